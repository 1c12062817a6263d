"""Load policy files: YAML to a validated ``Policy``, every problem reported at file:line:col.

The loader composes the YAML node tree with PyYAML (every node carries its marks) and builds
the Python values itself, so that each value keeps its place and so that YAML's permissive
corners become errors instead of surprises:

* duplicate mapping keys are refused (YAML parsers normally keep the last one silently);
* aliases are refused outright, which rules out "billion laughs" expansion bombs;
* input is capped at ``MAX_POLICY_BYTES`` and nesting at ``MAX_DEPTH``;
* scalars resolve by the YAML 1.2 core schema: only ``true``/``false`` are booleans, so a tool
  or key named ``on``, ``yes`` or ``no`` stays a string, and ``2024-01-01`` stays text;
* mapping keys are always the text as written (``on:`` is the key ``"on"``, ``1:`` is ``"1"``);
* tags other than the standard scalar and collection tags are refused (no object construction).

Validation errors from the schema (``callgate.policy._schema``) are mapped back to the node
they name; all of them are reported together in one ``PolicyError``.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from callgate._errors import PolicyError, Problem
from callgate.matchers._regex import check_pattern
from callgate.policy._roots import root_problems
from callgate.policy._schema import Policy

#: Policy files larger than this are refused before parsing.
MAX_POLICY_BYTES = 1024 * 1024
#: Deeper nesting than this is refused (a real policy needs about seven levels).
MAX_DEPTH = 32

NodePath = tuple[str | int, ...]

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

    def __init__(self, text: str) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _CoreResolver.__init__(self)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's parser API is untyped
            raise _Refused("YAML aliases (*name) are not allowed in policy files", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nesting deeper than {MAX_DEPTH} levels",
                               self.peek_event().start_mark)  # type: ignore[no-untyped-call]  # PyYAML's parser API is untyped
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


@dataclass(frozen=True)
class LoadedPolicy:
    """A validated policy with the places of its nodes in the source it came from."""

    policy: Policy
    source: str
    _values: Mapping[NodePath, Node] = field(default_factory=dict, repr=False, compare=False)
    _text: str = field(default="", repr=False, compare=False)

    def locate(self, path: NodePath) -> tuple[int, int] | None:
        """The 1-based (line, column) where the node at ``path`` starts, or None if absent.

        ``path`` names keys and list indexes from the top, e.g. ``("behavior", 2, "rule")``.
        """
        node = self._values.get(tuple(path))
        return None if node is None else _place(node.start_mark)

    def rule_place(self, index: int) -> tuple[str, str, int, int] | None:
        """Where behavior statement ``index``'s rule is written: (source, its text as written,
        line, column), for ``compile_behavior(..., locate=...)``; None when unknown."""
        span = self.raw_span(("behavior", index, "rule"))
        return None if span is None else (self.source, span[0], span[1], span[2])

    def raw_span(self, path: NodePath) -> tuple[str, int, int] | None:
        """The scalar at ``path`` exactly as written, with the 1-based line/column it starts at.

        For plain scalars this is the source text (line breaks and indentation included); for
        block scalars (``|``, ``>``) it starts at the first content line, after the indicator;
        for quoted scalars it is the text between the quotes, escapes as written. Offsets into
        the returned text therefore map to exact file positions. None if the node is absent or
        not a scalar.
        """
        node = self._values.get(tuple(path))
        if not isinstance(node, ScalarNode):
            return None
        start, end = node.start_mark.index, node.end_mark.index
        line, column = _place(node.start_mark)
        if node.style in ("|", ">"):
            newline = self._text.find("\n", start, end)
            if newline < 0:
                return "", line, column
            start, line, column = newline + 1, line + 1, 1
        elif node.style in ("'", '"'):
            start, end, column = start + 1, end - 1, column + 1
        return self._text[start:end].rstrip(), line, column


def load_policy(path: str | os.PathLike[str]) -> LoadedPolicy:
    """Read and validate a policy file; raise ``PolicyError`` listing every problem found.

    A relative ``working_dir`` in the file is resolved against the file's directory.
    """
    source = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise PolicyError([Problem(f"cannot read policy file: {reason}", source)]) from exc
    _check_size(len(data), source)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise PolicyError(
            [Problem("policy file is not valid UTF-8", source, line, column)]
        ) from exc
    return parse_policy(text, source, base_dir=Path(source).parent)


def parse_policy(
    text: str, source: str = "<string>", *, base_dir: str | os.PathLike[str] | None = None
) -> LoadedPolicy:
    """Validate policy YAML given as text; ``source`` names it in problems.

    A relative ``working_dir`` is resolved against ``base_dir`` (default: the current
    directory at call time) and returned absolute.
    """
    # Characters never outnumber bytes, so the cheap length test comes first.
    _check_size(len(text), source)
    _check_size(len(text.encode("utf-8", "surrogatepass")), source)
    root = _compose(text, source)
    builder = _Builder(source)
    data = builder.build(root, ())
    if not isinstance(data, dict):
        raise PolicyError([_problem("the top level of a policy must be a mapping of keys "
                                    "(name, version, rules, ...)", source, root, ())])
    problems = builder.problems + _regex_problems(data, builder) + _id_problems(data, builder)
    flagged = [p for p in problems if p.field is not None]
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        problems += [p for p in _placed(exc, data, builder) if not _covered(p, flagged)]
        raise PolicyError(_sorted(problems)) from exc
    if problems:
        raise PolicyError(_sorted(problems))
    policy = _resolve_working_dir(policy, base_dir)
    escapes = _root_problems(policy, builder)
    if escapes:
        raise PolicyError(escapes)
    return LoadedPolicy(policy, source, builder.values, text)


def _root_problems(policy: Policy, builder: _Builder) -> list[Problem]:
    """Declared roots a symlink leads out of where they were written, at the place written.

    Relative roots are taken against the working directory the kernel will use by default: the
    policy's ``working_dir``, else the current directory.
    """
    working_dir = policy.working_dir or os.getcwd()
    problems = []
    for where, why in root_problems(policy, working_dir):
        node_path = where
        while node_path not in builder.values:  # e.g. a default filled in by the schema
            node_path = node_path[:-1]
        problems.append(_problem(why, builder.source, builder.values[node_path], where))
    return _sorted(problems)


def _placed(exc: ValidationError, data: dict[str, Any], builder: _Builder) -> list[Problem]:
    """The schema errors as placed problems; unplaced if placing them fails (never lose one)."""
    try:
        return _validation_problems(exc, data, builder)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return [Problem(f"{err['msg']} at {'.'.join(map(str, err['loc']))}", builder.source)
                for err in exc.errors(include_url=False)]


def _check_size(size: int, source: str) -> None:
    if size > MAX_POLICY_BYTES:
        raise PolicyError([Problem(
            f"policy is larger than {MAX_POLICY_BYTES} bytes; refusing to parse it", source
        )])


def _compose(text: str, source: str) -> Node:
    loader: _NodeLoader | None = None
    try:
        loader = _NodeLoader(text)
        root = loader.get_single_node()
    except _Refused as exc:
        line, column = _place(exc.mark)
        raise PolicyError([Problem(str(exc), source, line, column)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = ": ".join(part for part in (exc.context, exc.problem) if part) or "unreadable"
        place = _place(mark) if mark is not None else (None, None)
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


class _Builder:
    """Builds plain Python values from the node tree, recording each node's place by path."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.values: dict[NodePath, Node] = {}
        self.keys: dict[NodePath, Node] = {}
        self.problems: list[Problem] = []

    def build(self, node: Node, path: NodePath) -> Any:
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
                self._fail("mapping keys must be plain text", key_node, path)
                continue
            key = key_node.value
            if key in result:
                first = _place(self.keys[(*path, key)].start_mark)
                self._fail(f"duplicate key {key!r} (first given at line {first[0]})",
                           key_node, (*path, key))
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
            self._fail(f"unsupported YAML tag {node.tag!r}", node, path)
            return None
        # Explicit tags (!!bool yes) are held to the same core-schema spellings as plain ones.
        if not _CORE_PATTERNS[node.tag].match(value):
            self._fail(f"{_short(value)} is not a valid {kind}", node, path)
            return None
        try:
            return _SCALAR_READERS[node.tag](value)
        except ValueError:
            # e.g. an integer beyond Python's digit limit; say what, not how to lift the limit
            self._fail(f"cannot read {_short(value)} as {kind}", node, path)
            return None

    def _check_tag(self, node: Node, expected: str, path: NodePath) -> None:
        if node.tag != expected:
            self._fail(f"unsupported YAML tag {node.tag!r}", node, path)

    def _fail(self, message: str, node: Node, path: NodePath) -> None:
        self.problems.append(_problem(message, self.source, node, path))


def _regex_problems(data: dict[str, Any], builder: _Builder) -> list[Problem]:
    """Refuse rule parameter patterns that cannot run in linear time with Python's meaning."""
    problems: list[Problem] = []
    rules = data.get("rules")
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        match = rule.get("match") if isinstance(rule, dict) else None
        params = match.get("parameters") if isinstance(match, dict) else None
        for name, condition in (params.items() if isinstance(params, dict) else ()):
            pattern = condition.get("pattern") if isinstance(condition, dict) else None
            if not isinstance(pattern, str):
                continue
            reason = check_pattern(pattern)
            if reason is not None:
                path: NodePath = ("rules", i, "match", "parameters", name, "pattern")
                problems.append(_problem(f"refused regex: {reason}", builder.source,
                                         builder.values[path], path))
    return problems


def _id_problems(data: dict[str, Any], builder: _Builder) -> list[Problem]:
    """Report a repeated rule or statement id at the repeat (the schema only names the first)."""
    problems: list[Problem] = []
    for section in ("rules", "behavior"):
        items = data.get(section)
        seen: dict[str, int] = {}
        for i, item in enumerate(items if isinstance(items, list) else []):
            ident = item.get("id") if isinstance(item, dict) else None
            if not isinstance(ident, str):
                continue
            if ident in seen:
                path: NodePath = (section, i, "id")
                problems.append(_problem(
                    f"duplicate id {ident!r} (also {section}[{seen[ident]}])", builder.source,
                    builder.values[path], path))
            else:
                seen[ident] = i
    return problems


# Error types meaning "the value has the wrong shape for this union member".
_SHAPE_ERRORS = frozenset({
    "literal_error", "dict_type", "model_type", "model_attributes_type", "string_type",
    "int_type", "int_parsing", "int_from_float", "bool_type", "bool_parsing", "tuple_type",
    "list_type", "float_type", "float_parsing", "none_required",
})


def _validation_problems(
    exc: ValidationError, data: dict[str, Any], builder: _Builder
) -> list[Problem]:
    """Turn each schema error into a problem at the node it names; merge union alternatives."""
    plain: list[Problem] = []
    unions: dict[NodePath, list[tuple[Any, NodePath]]] = {}
    for error in exc.errors(include_url=False):
        if error["type"] == "value_error" and not error["loc"] and "duplicate" in error["msg"]:
            continue  # reported with its exact place by _id_problems
        path, union_at = _data_path(error, data)
        if union_at is None:
            plain.append(_error_problem(error, path, builder))
        else:
            unions.setdefault(union_at, []).append((error, path))
    for union_at, errors in unions.items():
        specific = [(e, p) for e, p in errors if not (p == union_at and e["type"] in _SHAPE_ERRORS)]
        if specific:
            plain += [_error_problem(e, p, builder) for e, p in specific]
            continue
        forms = dict.fromkeys(_shape_text(e) for e, _ in errors)
        value = _short(errors[0][0].get("input"))
        node = builder.values[union_at]
        plain.append(_problem(f"must be {' or '.join(forms)} (got {value})", builder.source,
                              node, union_at))
    return plain


def _data_path(error: Any, data: Any) -> tuple[NodePath, NodePath | None]:
    """Follow an error's ``loc`` through the data; loc parts naming union members are skipped."""
    current: Any = data
    path: list[str | int] = []
    union_at: NodePath | None = None
    loc = error["loc"]
    for i, part in enumerate(loc):
        if _has_child(current, part):
            current = current[part]
        elif i == len(loc) - 1 and error["type"] == "missing":
            pass  # the absent key itself: reported on its parent mapping
        else:
            if union_at is None:
                union_at = tuple(path)
            continue
        path.append(part)
    return tuple(path), union_at


def _has_child(value: Any, part: str | int) -> bool:
    if isinstance(value, dict):
        return isinstance(part, str) and part in value
    if isinstance(value, list):
        return isinstance(part, int) and 0 <= part < len(value)
    return False


def _error_problem(error: Any, path: NodePath, builder: _Builder) -> Problem:
    """One schema error as a problem: unknown keys at the key, missing ones at their mapping."""
    kind = error["type"]
    if kind == "missing":
        message = f"missing required key {path[-1]!r}"
    elif kind == "extra_forbidden":
        message = f"unknown key {path[-1]!r}{_suggest(path)}"
    else:
        text = error["msg"].removeprefix("Value error, ")
        message = f"{text[:1].lower()}{text[1:]}"
        if kind != "value_error":  # a custom check's message already says what is wrong
            message += f" (got {_short(error.get('input'))})"
    node = builder.keys.get(path) if kind == "extra_forbidden" else None
    node_path = path
    while node is None and node_path not in builder.values:
        node_path = node_path[:-1]
    line, column = _place((node or builder.values[node_path]).start_mark)
    return Problem(message, builder.source, line, column, field_name(path) or None)


def _shape_text(error: Any) -> str:
    if error["type"] in ("dict_type", "model_type", "model_attributes_type"):
        return "a mapping"
    text: str = error["msg"]
    return text.removeprefix("Input should be ")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _suggest(path: NodePath) -> str:
    """A hint for an unknown key: the closest allowed key, or the allowed keys."""
    allowed = _allowed_keys(path[:-1])
    if not allowed:
        return ""
    close = difflib.get_close_matches(str(path[-1]), allowed, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; allowed keys: {', '.join(allowed)}"


def _allowed_keys(path: NodePath) -> list[str]:
    """The keys the schema allows in the mapping at ``path`` (empty if not a model)."""
    current: Any = Policy
    for part in path:
        current = _unwrap(current, part)
        if current is None:
            return []
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return []
    return [info.alias or name for name, info in current.model_fields.items()]


def _unwrap(annotation: Any, part: str | int) -> Any:
    """The type one step below ``annotation`` along ``part`` (a field, index or dict key)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, info in annotation.model_fields.items():
            if part in (name, info.alias):
                return _model_of(info.annotation) or info.annotation
        return None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is tuple and args:
        return _model_of(args[0]) or args[0]
    if origin is dict and len(args) == 2:
        return _model_of(args[1]) or args[1]
    return None


def _model_of(annotation: Any) -> Any:
    """The container or model inside an optional or union annotation, if there is one."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if typing.get_origin(arg) in (tuple, dict) or (
                isinstance(arg, type) and issubclass(arg, BaseModel)
            ):
                return arg
    return None


def _resolve_working_dir(policy: Policy, base_dir: str | os.PathLike[str] | None) -> Policy:
    if policy.working_dir is None:
        return policy
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    resolved = (base / policy.working_dir).resolve()
    return policy.model_copy(update={"working_dir": str(resolved)})


def _covered(problem: Problem, flagged: list[Problem]) -> bool:
    """Whether an earlier problem already reports this place (a refused value, a bad regex)."""
    if problem.field is None:
        return False
    return any(problem.field == p.field or problem.field.startswith(f"{p.field}.")
               or problem.field.startswith(f"{p.field}[") for p in flagged if p.field)


def _sorted(problems: list[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: (p.line or 0, p.column or 0))


def _place(mark: Any) -> tuple[int, int]:
    return mark.line + 1, mark.column + 1


def _problem(message: str, source: str, node: Node, path: NodePath) -> Problem:
    line, column = _place(node.start_mark)
    return Problem(message, source, line, column, field_name(path) or None)


def field_name(path: NodePath) -> str:
    """A path as people write it: ``rules[1].match.tool``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text
