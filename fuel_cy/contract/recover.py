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

from .schema import FreeMapNode, ListNode, MapNode, SchemaNode
from .yamlload import YamlProblem

INDENT = 2
_KEY_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*:(?:\s+|$)")


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
    node: SchemaNode
    indent: int  # column of this container's keys (or of its dashes for a list)
    keypath: str


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


def reindent(lines: list[str], schema: MapNode, root: str = "") -> list[str]:
    """Return ``lines`` re-indented per ``schema``; raise YamlProblem on an unplaceable line."""
    stack: list[_Ctx] = [_Ctx(schema, 0, root)]
    out: list[str] = []
    for number, raw in enumerate(lines, start=1):
        content, comment = split_comment(raw.strip())
        if not content:
            out.append(" " * stack[-1].indent + raw.strip() if raw.strip() else "")
            continue
        item = content.startswith("- ") or content == "-"
        if item:
            while stack and not isinstance(stack[-1].node, ListNode):
                stack.pop()
            if not stack:
                raise YamlProblem(number, f"list item {content!r} is not inside any list")
            lst = stack[-1]
            rest = content[1:].strip()
            prefix = " " * lst.indent + "- "
            if rest.startswith("{") or not rest:
                out.append(prefix + raw.strip()[1:].strip())
                continue
            assert isinstance(lst.node, ListNode)
            stack.append(_Ctx(lst.node.item, lst.indent + INDENT, f"{lst.keypath}[]"))
            body = rest
        else:
            prefix = None
            body = content
        m = _KEY_RE.match(body)
        if not m:
            raise YamlProblem(number, f"expected 'key: value', found {body!r}")
        key = m.group(1)
        value = body[m.end():].strip()
        inner = stack[-1]
        while stack and not _accepts(stack[-1], key, stack[:-1]):
            if prefix is not None:  # the key after '- ' must belong to the new item
                break
            stack.pop()
        if not stack or not _accepts(stack[-1], key, stack[:-1]):
            where = inner.keypath or "the top level"
            raise YamlProblem(number, f"unknown key {key!r} at {where} (expected one of: {_expected(inner)})",
                              f"{inner.keypath}.{key}" if inner.keypath else key)
        ctx = stack[-1]
        text = raw.strip()[2:].strip() if prefix is not None else raw.strip()
        out.append((prefix if prefix is not None else " " * ctx.indent) + text)
        child = _child(ctx, key)
        if not value and child is not None:
            keypath = f"{ctx.keypath}.{key}" if ctx.keypath else key
            stack.append(_Ctx(child, ctx.indent + INDENT, keypath))
    return out


def flatten(lines: list[str]) -> list[str]:
    """Strip indentation (the inverse spelling), keeping comments and line count."""
    return [line.strip() for line in lines]
