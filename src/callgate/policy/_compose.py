"""YAML text to plain Python values, each node keeping its place: the loader's first stage.

PyYAML composes the node tree (every node carries its marks); ``Builder`` builds the values
itself, so that YAML's permissive corners become problems instead of surprises:

* duplicate mapping keys are refused (YAML parsers normally keep the last one silently);
* aliases are refused outright, which rules out "billion laughs" expansion bombs;
* nesting is capped (``compose``'s ``max_depth``);
* scalars resolve by the YAML 1.2 core schema: only ``true``/``false`` are booleans, so a tool
  or key named ``on``, ``yes`` or ``no`` stays a string, and ``2024-01-01`` stays text;
* mapping keys are always the text as written (``on:`` is the key ``"on"``, ``1:`` is ``"1"``);
* tags other than the standard scalar and collection tags are refused (no object construction).

Only ``_loader`` imports this module, and only when a policy is validated: a policy the cache
(``_cache``) holds loads without importing PyYAML.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from callgate._errors import PolicyError, Problem

NodePath = tuple[str | int, ...]
#: Where a node is written: (line, column) 1-based, start and end offsets in the text, and its
#: kind: ``map``, ``seq``, or a scalar's style (``plain``, ``'``, ``"``, ``|``, ``>``).
Place = tuple[int, int, int, int, str]

_STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"


# The YAML 1.2 core schema's spellings (PyYAML defaults to YAML 1.1, where `on` is a boolean).
_CORE_PATTERNS: dict[str, re.Pattern[str]] = {
    _NULL: re.compile(r"^(?:~|null|Null|NULL|)$"),
    _BOOL: re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    _INT: re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    _FLOAT: re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
}


def _read_int(text: str) -> int:
    return int(text, 0) if text[:2] in ("0o", "0x") else int(text)


def _read_float(text: str) -> float:
    lowered = text.lower()
    return float(lowered.replace(".inf", "inf").replace(".nan", "nan"))


_SCALAR_READERS: dict[str, Any] = {
    _NULL: lambda text: None,
    _BOOL: lambda text: text.lower() == "true",
    _INT: _read_int,
    _FLOAT: _read_float,
}


class _CoreResolver(BaseResolver):
    """Implicit typing of plain scalars by the YAML 1.2 core schema."""


for _tag, _pattern in _CORE_PATTERNS.items():
    _CoreResolver.add_implicit_resolver(_tag, _pattern, None)


class _Refused(Exception):  # noqa: N818 - internal signal, converted to PolicyError
    """A structural refusal (alias, depth) found while composing, with its node mark."""

    def __init__(self, message: str, mark: Any) -> None:
        super().__init__(message)
        self.mark = mark


class _NodeLoader(Reader, Scanner, Parser, Composer, _CoreResolver):
    """PyYAML's pure-Python pipeline up to the node graph, refusing aliases and deep nesting."""

    def __init__(self, text: str, max_depth: int) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _CoreResolver.__init__(self)
        self._depth = 0
        self._max_depth = max_depth

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's parser API is untyped
            raise _Refused("YAML aliases (*name) are not allowed in policy files", event.start_mark)
        self._depth += 1
        try:
            if self._depth > self._max_depth:
                raise _Refused(f"nesting deeper than {self._max_depth} levels",
                               self.peek_event().start_mark)  # type: ignore[no-untyped-call]  # PyYAML's parser API is untyped
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def compose(text: str, source: str, max_depth: int) -> Node:
    """The node tree of ``text``; ``PolicyError`` at the place of invalid or refused YAML."""
    loader: _NodeLoader | None = None
    try:
        loader = _NodeLoader(text, max_depth)
        root = loader.get_single_node()
    except _Refused as exc:
        line, column = line_column(exc.mark)
        raise PolicyError([Problem(str(exc), source, line, column)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = ": ".join(part for part in (exc.context, exc.problem) if part) or "unreadable"
        place = line_column(mark) if mark is not None else (None, None)
        raise PolicyError([Problem(f"invalid YAML: {message}", source, *place)]) from exc
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise PolicyError([Problem(f"invalid YAML: {exc.reason}", source, line, column)]) from exc
    except (yaml.YAMLError, RecursionError) as exc:
        raise PolicyError([Problem(f"invalid YAML: {exc}", source)]) from exc
    finally:
        if loader is not None:
            loader.dispose()
    if root is None:
        raise PolicyError([Problem("the policy is empty (it needs at least name and version)",
                                   source)])
    return root


def line_column(mark: Any) -> tuple[int, int]:
    """A PyYAML mark as a 1-based (line, column)."""
    return mark.line + 1, mark.column + 1


def place_of(node: Node) -> Place:
    """Where ``node`` is written, as plain values (what ``LoadedPolicy`` and the cache keep)."""
    line, column = line_column(node.start_mark)
    if isinstance(node, ScalarNode):
        kind = node.style or "plain"
    else:
        kind = "map" if isinstance(node, MappingNode) else "seq"
    return line, column, node.start_mark.index, node.end_mark.index, kind


class Builder:
    """Builds plain Python values from the node tree, recording each node's place by path.

    ``values`` and ``keys`` map paths to the value and key nodes; ``refused`` lists what the
    building refused, as (message, node, path), for the loader to report.
    """

    def __init__(self) -> None:
        self.values: dict[NodePath, Node] = {}
        self.keys: dict[NodePath, Node] = {}
        self.refused: list[tuple[str, Node, NodePath]] = []

    def places(self) -> dict[NodePath, Place]:
        """The place of every value node, by path."""
        return {path: place_of(node) for path, node in self.values.items()}

    def build(self, node: Node, path: NodePath) -> Any:
        """The value of ``node`` (found at ``path``), recording the places below it."""
        self.values[path] = node
        if isinstance(node, MappingNode):
            return self._mapping(node, path)
        if isinstance(node, SequenceNode):
            self._check_tag(node, _SEQ, path)
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        assert isinstance(node, ScalarNode)
        return self._scalar(node, path)

    def _mapping(self, node: MappingNode, path: NodePath) -> dict[str, Any]:
        self._check_tag(node, _MAP, path)
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                self.refused.append(("mapping keys must be plain text", key_node, path))
                continue
            key = key_node.value
            if key in result:
                first = line_column(self.keys[(*path, key)].start_mark)
                self.refused.append((f"duplicate key {key!r} (first given at line {first[0]})",
                                     key_node, (*path, key)))
                continue
            self.keys[(*path, key)] = key_node
            result[key] = self.build(value_node, (*path, key))
        return result

    def _scalar(self, node: ScalarNode, path: NodePath) -> Any:
        value: str = node.value
        if node.tag == _STR:
            return value
        kind = node.tag.rsplit(":", 1)[-1]
        if node.tag not in _SCALAR_READERS:
            self.refused.append((f"unsupported YAML tag {node.tag!r}", node, path))
            return None
        # Explicit tags (!!bool yes) are held to the same core-schema spellings as plain ones.
        if not _CORE_PATTERNS[node.tag].match(value):
            self.refused.append((f"{short(value)} is not a valid {kind}", node, path))
            return None
        try:
            return _SCALAR_READERS[node.tag](value)
        except ValueError:
            # e.g. an integer beyond Python's digit limit; say what, not how to lift the limit
            self.refused.append((f"cannot read {short(value)} as {kind}", node, path))
            return None

    def _check_tag(self, node: Node, expected: str, path: NodePath) -> None:
        if node.tag != expected:
            self.refused.append((f"unsupported YAML tag {node.tag!r}", node, path))


def short(value: Any) -> str:
    """``repr(value)``, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
