"""Recover the nesting of YAML whose indentation was lost (every line at column 0).

The founding contract's blocks were flattened: ``accept:`` / ``inputs:`` / ``- name: q`` /
``dtypes: ...`` all start at column 0, so a plain YAML load silently builds the wrong tree.
Because every key of an FKC block has a known home in the schema, the nesting can be rebuilt
line by line: a key belongs to the innermost open mapping that knows it.  The output keeps a
1:1 line correspondence with the input, so YAML line numbers still point at the source.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .errors import suggest
from .schema import FreeMapNode, ListNode, MapNode, SchemaNode
from .yamlload import YamlProblem

INDENT = 2
_KEY_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*:(?:\s+|$)")
_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def split_comment(line: str) -> tuple[str, str]:
    """Split ``content # comment`` outside quotes; returns (content, comment-text)."""
    quote: Optional[str] = None
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip(), line[i + 1:].strip()
        i += 1
    return line.rstrip(), ""


def is_indented(lines: list[str]) -> bool:
    """True when any content line starts with white space (a normally indented document)."""
    for line in lines:
        content, _ = split_comment(line)
        if content.strip() and content[0] in " \t":
            return True
    return False


@dataclass
class _Ctx:
    node: Optional[SchemaNode]  # None: the children of an unknown key (swallowed, see _Recovery)
    indent: int  # column of this container's keys (or of its dashes for a list)
    keypath: str
    count: int = 0  # a list's items so far, for the ``[i]`` of key paths


def _accepts(ctx: _Ctx, key: str, stack: list[_Ctx]) -> bool:
    if isinstance(ctx.node, MapNode):
        return key in ctx.node.keys
    if isinstance(ctx.node, FreeMapNode):
        # a user-named entry, unless an enclosing mapping claims the key
        return not any(isinstance(c.node, MapNode) and key in c.node.keys for c in stack)
    return False


def _child(ctx: _Ctx, key: str) -> Optional[SchemaNode]:
    if isinstance(ctx.node, MapNode):
        return ctx.node.keys[key]
    if isinstance(ctx.node, FreeMapNode):
        return ctx.node.value
    return None


def _expected(ctx: _Ctx) -> str:
    if isinstance(ctx.node, MapNode):
        return ", ".join(ctx.node.keys)
    if isinstance(ctx.node, ListNode):
        return "a '- ' list item"
    return "an identifier"


def _join(keypath: str, key: str) -> str:
    return f"{keypath}.{key}" if keypath else key


class _Recovery:
    """Places flattened lines one by one.  Without ``problems`` the first unplaceable line raises
    (the formatter must never guess).  With it, the validator's mode, recovery goes on so one run
    reports every error: an unknown key is kept, at the mapping it appeared in, for the model
    builder to report with its full key path; a line that cannot be placed at all is recorded and
    blanked; the lines under either are swallowed, since their home is unknown too."""

    def __init__(self, lines: list[str], schema: MapNode, root: str, problems: Optional[list[YamlProblem]]):
        self.lines = lines
        self.stack: list[_Ctx] = [_Ctx(schema, 0, root)]
        self.problems = problems

    def place(self, number: int, raw: str) -> str:
        content, _ = split_comment(raw.strip())
        if not content:
            return " " * self.stack[-1].indent + raw.strip() if raw.strip() else ""
        if content.startswith("- ") or content == "-":
            return self._item(number, raw, content)
        return self._key(number, raw.strip(), content, None)

    @property
    def _swallowing(self) -> bool:
        return self.stack[-1].node is None

    def _refuse(self, number: int, message: str, keypath: str, swallow: bool, covers: tuple[str, ...] = ()) -> str:
        if self.problems is None:
            raise YamlProblem(number, message, keypath)
        self.problems.append(YamlProblem(number, message, keypath, covers))
        if swallow:  # the lines under it have no known home either; one message is enough
            self.stack.append(_Ctx(None, self.stack[-1].indent + INDENT, keypath))
        return ""

    def _item(self, number: int, raw: str, content: str) -> str:
        rest = content[1:].strip()
        at = next((i for i in range(len(self.stack) - 1, -1, -1) if isinstance(self.stack[i].node, ListNode)), None)
        if self._swallowing and (at is None or not self._fits_item(self.stack[at], rest)):
            return ""  # a child of an unknown key
        if at is None:
            return self._refuse(number, f"list item {content!r} is not inside any list", self.stack[-1].keypath, True)
        del self.stack[at + 1:]
        lst = self.stack[-1]
        assert isinstance(lst.node, ListNode)
        keypath = f"{lst.keypath}[{lst.count}]"
        lst.count += 1
        prefix = " " * lst.indent + "- "
        if rest.startswith("{") or not rest:
            return prefix + raw.strip()[1:].strip()
        self.stack.append(_Ctx(lst.node.item, lst.indent + INDENT, keypath))
        return self._key(number, raw.strip()[1:].strip(), rest, prefix)

    @staticmethod
    def _fits_item(lst: _Ctx, rest: str) -> bool:
        m = _KEY_RE.match(rest)
        return m is not None and isinstance(lst.node, ListNode) and m.group(1) in lst.node.item.keys

    def _key(self, number: int, text: str, body: str, prefix: Optional[str]) -> str:
        m = _KEY_RE.match(body)
        if not m:
            if self._swallowing:
                return ""
            # 'rank 4' most likely meant the key 'rank', which the builder must not call missing
            word = _WORD_RE.match(body)
            covers = (_join(self.stack[-1].keypath, word.group(0)),) if word else ()
            return self._refuse(number, f"expected 'key: value', found {body!r} (is the ': ' missing?)",
                                self.stack[-1].keypath, False, covers)
        key, value = m.group(1), body[m.end():].strip()
        # the key after '- ' must belong to the new item; any other key to the innermost mapping
        # that knows it
        candidates = [len(self.stack) - 1] if prefix is not None else range(len(self.stack) - 1, -1, -1)
        home = next((i for i in candidates if _accepts(self.stack[i], key, self.stack[:i])), None)
        if home is None:
            return self._unknown(number, text, key, value, prefix)
        if self.problems is not None and self._misspelt_section(home, number, key, value) is not None:
            # a user-named map takes any key, so a misspelt section after it ('retur:' after
            # op_params.fields) would become a param and its lines a cascade of complaints
            return self._unknown(number, text, key, value, prefix, below=home)
        del self.stack[home + 1:]
        ctx = self.stack[-1]
        child = _child(ctx, key)
        if not value and child is not None:
            self.stack.append(_Ctx(child, ctx.indent + INDENT, _join(ctx.keypath, key)))
        return (prefix if prefix is not None else " " * ctx.indent) + text

    def _misspelt_section(self, home: int, number: int, key: str, value: str) -> Optional[int]:
        """When a user-named map at ``home`` took ``key`` but the key does not look like one of
        its entries (a ``{..}`` value, or none and an entry's key on the next line) and it
        resembles a key of an enclosing mapping, the index of that mapping; else None."""
        node = self.stack[home].node
        if not isinstance(node, FreeMapNode):
            return None
        if value:
            if value.startswith("{"):
                return None
        else:
            following = (split_comment(line.strip())[0] for line in self.lines[number:])
            m = _KEY_RE.match(next((c for c in following if c), ""))
            if m and m.group(1) in node.value.keys:
                return None
        maps = ((i, self.stack[i].node) for i in range(home - 1, -1, -1))
        return next((i for i, node in maps if isinstance(node, MapNode) and suggest(key, node.keys)), None)

    def _unknown(self, number: int, text: str, key: str, value: str, prefix: Optional[str],
                 below: Optional[int] = None) -> str:
        inner = self.stack[-1]
        if self.problems is None:
            where = inner.keypath or "the top level"
            raise YamlProblem(number, f"unknown key {key!r} at {where} (expected one of: {_expected(inner)})",
                              _join(inner.keypath, key))
        if self._swallowing and below is None:  # a child of an unknown key
            return ""
        if below is None:  # it stays in the mapping it appeared in
            home = next(i for i in range(len(self.stack) - 1, -1, -1) if not isinstance(self.stack[i].node, ListNode))
        else:  # it left a user-named map for the mapping whose key it likely misspells
            found = self._misspelt_section(below, number, key, value)
            assert found is not None
            home = found
        del self.stack[home + 1:]
        ctx = self.stack[-1]
        if not value:
            self.stack.append(_Ctx(None, ctx.indent + INDENT, _join(ctx.keypath, key)))
        return (prefix if prefix is not None else " " * ctx.indent) + text


def reindent(lines: list[str], schema: MapNode, root: str = "",
             problems: Optional[list[YamlProblem]] = None) -> list[str]:
    """Return ``lines`` re-indented per ``schema``.  An unplaceable line raises YamlProblem, or,
    when a ``problems`` list is given, is recorded there and recovery continues."""
    recovery = _Recovery(lines, schema, root, problems)
    return [recovery.place(number, raw) for number, raw in enumerate(lines, start=1)]


def flatten(lines: list[str]) -> list[str]:
    """Strip indentation (the inverse spelling), keeping comments and line count."""
    return [line.strip() for line in lines]
