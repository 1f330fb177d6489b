"""Safe YAML loading that keeps line numbers, rejects duplicate keys, tags and aliases."""
from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

MAX_BLOCK_CHARS = 200_000


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
    def __init__(self, line: int, message: str, keypath: str = ""):
        super().__init__(message)
        self.line = line
        self.message = message
        self.keypath = keypath


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


def _build(node: Any) -> Any:
    line = node.start_mark.line + 1
    expected = _PLAIN_TAGS.get(type(node))
    if expected is not None and node.tag != expected:
        raise YamlProblem(line, f"YAML tag {node.tag!r} is not allowed in contracts")
    if isinstance(node, MappingNode):
        out = LDict()
        out.line = line
        out.key_lines = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise YamlProblem(key_node.start_mark.line + 1, "mapping keys must be plain scalars")
            key = key_node.value
            if key in out:
                raise YamlProblem(key_node.start_mark.line + 1, f"duplicate key {key!r}")
            out[key] = _build(value_node)
            out.key_lines[key] = key_node.start_mark.line + 1
        return out
    if isinstance(node, SequenceNode):
        seq = LList(_build(n) for n in node.value)
        seq.line = line
        seq.item_lines = [n.start_mark.line + 1 for n in node.value]
        return seq
    if node.tag not in (
        "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null",
    ):
        raise YamlProblem(line, f"YAML tag {node.tag!r} is not allowed in contracts")
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def load(text: str) -> Any:
    """Parse one YAML document; raises YamlProblem(line, message) on any refusal."""
    if len(text) > MAX_BLOCK_CHARS:
        raise YamlProblem(1, f"YAML block longer than {MAX_BLOCK_CHARS} characters")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
    except YamlProblem:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise YamlProblem((mark.line + 1) if mark else 1, f"YAML error: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise YamlProblem(1, f"YAML error: {exc}") from None
    finally:
        loader.dispose()
    if node is None:
        return None
    return _build(node)
