"""Safe YAML loading that keeps line numbers, rejects duplicate keys, tags and aliases.

Every refusal is a YamlProblem carrying the 1-based line of the actual mistake, plain words, and
the key path of the enclosing mapping, so a syntax error reads like the model builder's errors.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

import yaml
from yaml.events import (
    AliasEvent,
    CollectionStartEvent,
    Event,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
)
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

MAX_BLOCK_CHARS = 200_000
# ``key:`` at the start of a line, optionally after a list dash (the key a line defines)
_LINE_KEY = re.compile(r"[ \t]*(?:-[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)[ \t]*:(?=\s|$)")


class LDict(dict):
    """A dict that remembers the 1-based line of itself and of each key."""

    line: int = 0
    key_lines: dict

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class LList(list):
    line: int = 0
    item_lines: list


class YamlProblem(ValueError):
    """``covers``: key paths this problem makes unreadable, so "missing" is not said of them too."""

    def __init__(self, line: int, message: str, keypath: str = "", covers: tuple[str, ...] = ()):
        super().__init__(message)
        self.line = line
        self.message = message
        self.keypath = keypath
        self.covers = covers


class _Loader(yaml.SafeLoader):
    """SafeLoader (no python tags) that also refuses anchors/aliases and duplicate keys."""

    def compose_node(self, parent, index):  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise YamlProblem(event.start_mark.line + 1, "YAML aliases are not allowed in contracts")
        event = self.peek_event()
        if getattr(event, "anchor", None):
            raise YamlProblem(event.start_mark.line + 1, "YAML anchors are not allowed in contracts")
        return super().compose_node(parent, index)


_PLAIN_TAGS = {
    MappingNode: "tag:yaml.org,2002:map",
    SequenceNode: "tag:yaml.org,2002:seq",
}


def _join(path: str, part: str) -> str:
    """Append ``.key`` or ``[i]`` to a key path (no leading dot at the root)."""
    return (path + part).lstrip(".")


def _build(node: Any, path: str) -> Any:
    line = node.start_mark.line + 1
    expected = _PLAIN_TAGS.get(type(node))
    if expected is not None and node.tag != expected:
        raise YamlProblem(line, f"YAML tag {node.tag!r} is not allowed in contracts", path)
    if isinstance(node, MappingNode):
        out = LDict()
        out.line = line
        out.key_lines = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise YamlProblem(key_node.start_mark.line + 1, "mapping keys must be plain scalars", path)
            key = key_node.value
            if key in out:
                # lines here are relative to the block, so say how far back the first one is
                back = key_node.start_mark.line + 1 - out.key_lines[key]
                raise YamlProblem(key_node.start_mark.line + 1,
                                  f"duplicate key {key!r} (first given {back} line{'s' if back != 1 else ''} above)",
                                  _join(path, f".{key}"))
            out[key] = _build(value_node, _join(path, f".{key}"))
            out.key_lines[key] = key_node.start_mark.line + 1
        return out
    if isinstance(node, SequenceNode):
        seq = LList(_build(n, _join(path, f"[{i}]")) for i, n in enumerate(node.value))
        seq.line = line
        seq.item_lines = [n.start_mark.line + 1 for n in node.value]
        return seq
    if node.tag not in (
        "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null",
    ):
        raise YamlProblem(line, f"YAML tag {node.tag!r} is not allowed in contracts", path)
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def load(text: str, root: str = "") -> Any:
    """Parse one YAML document; raises YamlProblem(line, message, keypath) on any refusal.

    ``root`` prefixes every key path (an fkc block's kernel name)."""
    if len(text) > MAX_BLOCK_CHARS:
        raise YamlProblem(1, f"YAML block longer than {MAX_BLOCK_CHARS} characters", root)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        return None if node is None else _build(node, root)
    except YamlProblem as exc:
        if not exc.keypath:  # raised while composing (anchors, aliases): locate it by the events
            exc.keypath = keypath_at(text, exc.line - 1, root)
        raise
    except yaml.MarkedYAMLError as exc:
        line, message = syntax_error(exc, text)
        raise YamlProblem(line + 1, message, keypath_at(text, line, root)) from None
    except yaml.YAMLError as exc:
        raise YamlProblem(1, f"YAML error: {exc}", root) from None
    finally:
        loader.dispose()


# ---- syntax errors in plain words ----------------------------------------------------------------
# PyYAML reports where its parser gave up (problem_mark), which for the common mistakes is the
# line *after* the mistake; the construct it was inside (context_mark) is usually the real place.


def syntax_error(exc: yaml.MarkedYAMLError, text: str) -> tuple[int, str]:
    """(0-based line of the actual mistake, plain-words message with PyYAML's words as a suffix)."""
    lines = text.splitlines() or [""]
    problem, context = exc.problem or "", exc.context or ""
    pm, cm = exc.problem_mark, exc.context_mark
    detail = f" (YAML parser: {context + ', ' if context else ''}{problem})"
    runaway = _runaway_quote(text, pm)
    if runaway is not None:
        start, extra = runaway
        return start, (f"a quoted string is not closed on its line: it runs on for {extra} more "
                       f"line{'s' if extra != 1 else ''}, to the next quote")
    if context.startswith("while scanning a quoted scalar") and cm is not None:
        return cm.line, "a quoted string is never closed" + detail
    if context.startswith("while parsing a flow ") and cm is not None:
        bracket = "[" if "sequence" in context else "{"
        return cm.line, f"a '{bracket}' is not closed, or its entries are not separated by ','" + detail
    if context.startswith("while scanning a simple key") and cm is not None:
        return cm.line, "expected 'key: value' but the ':' (followed by a space) is missing" + detail
    if pm is None:
        return (cm.line if cm is not None else 0), f"YAML syntax error: {problem or context or exc}"
    line = lines[pm.line] if pm.line < len(lines) else ""
    if "cannot start any token" in problem:
        char = line[pm.column] if pm.column < len(line) else ""
        if char == "\t":
            return pm.line, "a tab character: YAML indentation must use spaces" + detail
        return pm.line, f"{char!r} cannot start an unquoted value; put the value in quotes" + detail
    if problem.startswith("mapping values are not allowed"):
        return pm.line, _stray_colon(lines, pm.line, pm.column) + detail
    if problem.startswith("expected <block end>"):
        if context.startswith("while parsing a block collection") and cm is not None and cm.column == pm.column:
            return pm.line, "a list item must start with '- '" + detail
        return pm.line, ("this line's indentation does not match the lines above it (keys of one "
                         "mapping line up; nested keys are indented further)") + detail
    return pm.line, f"YAML syntax error: {context + ', ' if context else ''}{problem}"


def _runaway_quote(text: str, pm: Optional[yaml.Mark]) -> Optional[tuple[int, int]]:
    """A quoted string left open swallows the lines up to the next quote and the parse fails on
    that later line; return (0-based line where it opened, lines swallowed) when that happened."""
    if pm is None:
        return None
    last = None
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.line > pm.line:
                break
            if isinstance(token, yaml.ScalarToken) and token.style in ('"', "'"):
                last = token
    except yaml.YAMLError:
        pass
    if last is None or last.start_mark.line == last.end_mark.line or last.end_mark.line != pm.line:
        return None
    return last.start_mark.line, last.end_mark.line - last.start_mark.line


def _stray_colon(lines: list[str], number: int, column: int) -> str:
    """PyYAML says "mapping values are not allowed here" for two different mistakes."""
    m = _LINE_KEY.match(lines[number]) if number < len(lines) else None
    if m is not None and lines[number].index(":", m.end(1)) == column:
        # the line's own 'key:' is refused: it is indented under a finished 'key: value' line
        return ("this key is indented deeper than the key above it, so it reads as part of that "
                "key's value; line it up with its sibling keys")
    return "a ': ' inside an unquoted value; put the value in quotes"


# ---- the key path at a line, from the parser's events ---------------------------------------------


@dataclass
class _Frame:
    label: str  # how the enclosing collection names this one: ".key" or "[i]"
    is_map: bool
    flow: bool
    key: Optional[str] = None  # a mapping's key whose value is being read (None: a key is next)
    index: int = 0  # a sequence's index of the item being read


def keypath_at(text: str, line: int, root: str = "") -> str:
    """The key path enclosing 0-based ``line`` (plus the key the line defines), as far as the
    events parse; works on text that fails to parse later, which is what a syntax error needs."""
    frames: list[_Frame] = []
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if event.start_mark is not None and event.start_mark.line > line:
                break
            _track(frames, event)
    except yaml.YAMLError:
        pass
    path = root + "".join(f.label for f in frames)
    top = frames[-1] if frames else None
    if top is not None and top.is_map and not top.flow:
        lines = text.splitlines()
        m = _LINE_KEY.match(lines[line]) if line < len(lines) else None
        key = m.group(1) if m else top.key
        if key is not None:
            path += f".{key}"
    return path.lstrip(".")


def _track(frames: list[_Frame], event: Event) -> None:
    if isinstance(event, CollectionStartEvent):
        label = "" if not frames else (f".{frames[-1].key}" if frames[-1].is_map else f"[{frames[-1].index}]")
        frames.append(_Frame(label, isinstance(event, MappingStartEvent), bool(event.flow_style)))
    elif isinstance(event, (MappingEndEvent, SequenceEndEvent)):
        frames.pop()
        _value_done(frames)
    elif isinstance(event, (ScalarEvent, AliasEvent)) and frames:
        top = frames[-1]
        if top.is_map and top.key is None:
            top.key = str(getattr(event, "value", "*"))
        else:
            _value_done(frames)


def _value_done(frames: list[_Frame]) -> None:
    if frames:
        top = frames[-1]
        if top.is_map:
            top.key = None
        else:
            top.index += 1
