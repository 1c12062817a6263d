"""Load policy files: YAML to a validated ``Policy``, every problem reported at file:line:col.

Two stages: ``_compose`` turns the text into plain values, each node keeping its place, and
refuses YAML's permissive corners (duplicate keys, aliases, YAML 1.1 booleans, object tags,
input over ``MAX_POLICY_BYTES`` or nested deeper than ``MAX_DEPTH``); the schema
(``callgate.policy._schema``) validates the values, and each validation error is mapped back to
the node it names. All problems are reported together in one ``PolicyError``.

Given a ``PolicyCache`` (``_cache``), a text that validated once loads again from what
validating it produced, without composing YAML (PyYAML is not even imported) or running the
schema's validators. What depends on more than the text happens on every load: a relative
``working_dir`` is resolved, and declared roots are checked against the filesystem. Only texts
that load are kept, so a text with problems is validated, and its problems reported, each time.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from callgate._errors import PolicyError, Problem
from callgate._text import NotUtf8Error, decode_utf8
from callgate.matchers._regex import check_pattern
from callgate.policy._roots import root_problems
from callgate.policy._schema import Policy

if TYPE_CHECKING:
    from yaml.nodes import Node

    from callgate.policy._cache import PolicyCache
    from callgate.policy._compose import Builder, NodePath, Place

_M = TypeVar("_M", bound=BaseModel)

#: Policy files larger than this are refused before parsing.
MAX_POLICY_BYTES = 1024 * 1024
#: Deeper nesting than this is refused (a real policy needs about seven levels).
MAX_DEPTH = 32


@dataclass(frozen=True)
class LoadedPolicy:
    """A validated policy with the places of its nodes in the source it came from."""

    policy: Policy
    source: str
    _places: Mapping[NodePath, Place] = field(default_factory=dict, repr=False, compare=False)
    _text: str = field(default="", repr=False, compare=False)

    def locate(self, path: NodePath) -> tuple[int, int] | None:
        """The 1-based (line, column) where the node at ``path`` starts, or None if absent.

        ``path`` names keys and list indexes from the top, e.g. ``("behavior", 2, "rule")``.
        """
        place = self._places.get(tuple(path))
        return None if place is None else (place[0], place[1])

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
        place = self._places.get(tuple(path))
        if place is None or place[4] in ("map", "seq"):
            return None
        line, column, start, end, style = place
        if style in ("|", ">"):
            newline = self._text.find("\n", start, end)
            if newline < 0:
                return "", line, column
            start, line, column = newline + 1, line + 1, 1
        elif style in ("'", '"'):
            start, end, column = start + 1, end - 1, column + 1
        return self._text[start:end].rstrip(), line, column


def load_policy(path: str | os.PathLike[str], *, cache: PolicyCache | None = None
                ) -> LoadedPolicy:
    """Read and validate a policy file; raise ``PolicyError`` listing every problem found.

    A relative ``working_dir`` in the file is resolved against the file's directory. With
    ``cache``, a file whose bytes validated before loads from the cache (see ``PolicyCache``);
    a file owned by another user (one the user cannot change) never does.
    """
    source = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_POLICY_BYTES + 1)
            owner = os.fstat(handle.fileno()).st_uid
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise PolicyError([Problem(f"cannot read policy file: {reason}", source)]) from exc
    _check_size(len(data), source)
    try:
        text = decode_utf8(data)
    except NotUtf8Error as exc:
        raise PolicyError(
            [Problem("policy file is not valid UTF-8", source, exc.line, exc.column)]
        ) from exc
    if cache is not None and not cache.may_stand_for(owner):
        cache = None  # the user's cache is no stand-in for a file the user cannot change
    return _load(text, source, Path(source).parent, cache, ("file", data))


def parse_policy(
    text: str, source: str = "<string>", *, base_dir: str | os.PathLike[str] | None = None,
    cache: PolicyCache | None = None,
) -> LoadedPolicy:
    """Validate policy YAML given as text; ``source`` names it in problems.

    A relative ``working_dir`` is resolved against ``base_dir`` (default: the current
    directory at call time) and returned absolute. With ``cache``, a text that validated
    before loads from the cache (see ``PolicyCache``).
    """
    # Characters never outnumber bytes, so the cheap length test comes first.
    _check_size(len(text), source)
    data = text.encode("utf-8", "surrogatepass")
    _check_size(len(data), source)
    return _load(text, source, base_dir, cache, ("text", data))


def _load(text: str, source: str, base_dir: str | os.PathLike[str] | None,
          cache: PolicyCache | None, content: tuple[str, bytes]) -> LoadedPolicy:
    """The validated policy of ``text``, from ``cache`` when it holds ``content``'s."""
    compiled = cache.get(*content) if cache is not None else None
    if compiled is None:
        compiled = _validate(text, source)
        if cache is not None:
            cache.put(*content, compiled)
    policy, places = compiled
    policy = _resolve_working_dir(policy, base_dir)
    escapes = _root_problems(policy, places, source)
    if escapes:
        raise PolicyError(escapes)
    return LoadedPolicy(policy, source, places, text)


def _validate(text: str, source: str) -> tuple[Policy, dict[NodePath, Place]]:
    """The text composed, built and validated: the policy and the place of every node."""
    shipped = _shipped(text)
    if shipped is not None:
        return shipped
    from callgate.policy._compose import Builder, compose

    root = compose(text, source, MAX_DEPTH)
    builder = Builder()
    data = builder.build(root, ())
    if not isinstance(data, dict):
        raise PolicyError([_problem("the top level of a policy must be a mapping of keys "
                                    "(name, version, rules, ...)", source, root, ())])
    problems = [_problem(message, source, node, path) for message, node, path in builder.refused]
    problems += [_problem(f"refused regex: {reason}", source, builder.values[path], path)
                 for path, reason in _refused_patterns(data)]
    problems += [_problem(message, source, builder.values[path], path)
                 for path, message in _repeated_ids(data)]
    flagged = [p for p in problems if p.field is not None]
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        problems += [p for p in _placed(exc, data, builder, source, Policy)
                     if not _covered(p, flagged)]
        raise PolicyError(_sorted(problems)) from exc
    if problems:
        raise PolicyError(_sorted(problems))
    return policy, builder.places()


def validate_document(text: str, source: str, schema: type[_M], *, max_depth: int = MAX_DEPTH,
                      list_key: str | None = None) -> tuple[_M, dict[NodePath, Place]]:
    """YAML ``text`` validated against any ``schema`` by this loader's rules: the model and the
    place of every node.

    The YAML is read as a policy is (core-schema scalars, no aliases, duplicate keys refused,
    nesting up to ``max_depth``), and every problem, unknown keys with a suggestion included, is
    reported at its file:line:col in one ``PolicyError``. Other files callgate reads next to
    policies (policy tests, tools' schemas) use it. With ``list_key``, a document that is a
    list is read as the mapping ``{list_key: the list}`` (places stay where the text has them).
    """
    from callgate.policy._compose import Builder, compose

    root = compose(text, source, max_depth)
    builder = Builder()
    data = builder.build(root, ())
    if list_key is not None and isinstance(data, list):
        data = {list_key: data}
        builder.values = {**{(list_key, *path): node for path, node in builder.values.items()},
                          (): root}
        builder.keys = {(list_key, *path): node for path, node in builder.keys.items()}
        builder.refused = [(m, node, (list_key, *path)) for m, node, path in builder.refused]
    if not isinstance(data, dict):
        raise PolicyError([_problem("the top level must be a mapping of keys", source, root, ())])
    problems = [_problem(message, source, node, path) for message, node, path in builder.refused]
    flagged = [p for p in problems if p.field is not None]
    try:
        model = schema.model_validate(data)
    except ValidationError as exc:
        problems += [p for p in _placed(exc, data, builder, source, schema)
                     if not _covered(p, flagged)]
        raise PolicyError(_sorted(problems)) from exc
    if problems:
        raise PolicyError(_sorted(problems))
    return model, builder.places()


def _root_problems(policy: Policy, places: Mapping[NodePath, Place], source: str
                   ) -> list[Problem]:
    """Declared roots a symlink leads out of where they were written, at the place written.

    Relative roots are taken against the working directory the kernel will use by default: the
    policy's ``working_dir``, else the current directory.
    """
    working_dir = policy.working_dir or os.getcwd()
    problems = []
    for where, why in root_problems(policy, working_dir):
        node_path = where
        while node_path not in places:  # e.g. a default filled in by the schema
            node_path = node_path[:-1]
        line, column = places[node_path][:2]
        problems.append(Problem(why, source, line, column, field_name(where) or None))
    return _sorted(problems)


def _placed(exc: ValidationError, data: dict[str, Any], builder: Builder, source: str,
            schema: type[BaseModel]) -> list[Problem]:
    """The schema errors as placed problems; unplaced if placing them fails (never lose one)."""
    try:
        return _validation_problems(exc, data, builder, source, schema)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return [Problem(f"{err['msg']} at {'.'.join(map(str, err['loc']))}", source)
                for err in exc.errors(include_url=False)]


def _check_size(size: int, source: str) -> None:
    if size > MAX_POLICY_BYTES:
        raise PolicyError([Problem(
            f"policy is larger than {MAX_POLICY_BYTES} bytes; refusing to parse it", source
        )])


def _shipped(text: str) -> tuple[Policy, dict[NodePath, Place]] | None:
    """The policy of a text shipped with callgate, validated without composing it (its values
    and places from ``_precomposed``); None for any other text, and for one with a problem:
    composing it reports the problem at its place."""
    from callgate.policy._precomposed import precomposed

    found = precomposed(text)
    if found is None:
        return None
    data, places = found
    if (max(map(len, places), default=0) >= MAX_DEPTH or _refused_patterns(data)
            or _repeated_ids(data)):
        return None
    try:
        return Policy.model_validate(data), places
    except ValidationError:
        return None


def _refused_patterns(data: dict[str, Any]) -> list[tuple[NodePath, str]]:
    """Rule parameter patterns that cannot run in linear time with Python's meaning: where
    each is, and why it is refused."""
    refused: list[tuple[NodePath, str]] = []
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
                refused.append((("rules", i, "match", "parameters", name, "pattern"), reason))
    return refused


def _repeated_ids(data: dict[str, Any]) -> list[tuple[NodePath, str]]:
    """Each repeat of a rule or statement id, at the repeat (the schema only names the
    first)."""
    repeats: list[tuple[NodePath, str]] = []
    for section in ("rules", "behavior"):
        items = data.get(section)
        seen: dict[str, int] = {}
        for i, item in enumerate(items if isinstance(items, list) else []):
            ident = item.get("id") if isinstance(item, dict) else None
            if not isinstance(ident, str):
                continue
            if ident in seen:
                repeats.append(((section, i, "id"),
                                f"duplicate id {ident!r} (also {section}[{seen[ident]}])"))
            else:
                seen[ident] = i
    return repeats


# Error types meaning "the value has the wrong shape for this union member".
_SHAPE_ERRORS = frozenset({
    "literal_error", "dict_type", "model_type", "model_attributes_type", "string_type",
    "int_type", "int_parsing", "int_from_float", "bool_type", "bool_parsing", "tuple_type",
    "list_type", "float_type", "float_parsing", "none_required",
})


def _validation_problems(
    exc: ValidationError, data: dict[str, Any], builder: Builder, source: str,
    schema: type[BaseModel],
) -> list[Problem]:
    """Turn each schema error into a problem at the node it names; merge union alternatives."""
    from callgate.policy._compose import short

    plain: list[Problem] = []
    unions: dict[NodePath, list[tuple[Any, NodePath]]] = {}
    for error in exc.errors(include_url=False):
        if error["type"] == "value_error" and not error["loc"] and "duplicate" in error["msg"]:
            continue  # reported with its exact place by _repeated_ids
        path, union_at = _data_path(error, data)
        if union_at is None:
            plain.append(_error_problem(error, path, builder, source, schema))
        else:
            unions.setdefault(union_at, []).append((error, path))
    for union_at, errors in unions.items():
        specific = [(e, p) for e, p in errors if not (p == union_at and e["type"] in _SHAPE_ERRORS)]
        if specific:
            plain += [_error_problem(e, p, builder, source, schema) for e, p in specific]
            continue
        forms = dict.fromkeys(_shape_text(e) for e, _ in errors)
        value = short(errors[0][0].get("input"))
        node = builder.values[union_at]
        plain.append(_problem(f"must be {' or '.join(forms)} (got {value})", source,
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


def _error_problem(error: Any, path: NodePath, builder: Builder, source: str,
                   schema: type[BaseModel]) -> Problem:
    """One schema error as a problem: unknown keys at the key, missing ones at their mapping."""
    from callgate.policy._compose import short

    kind = error["type"]
    if kind == "missing":
        message = f"missing required key {path[-1]!r}"
    elif kind == "extra_forbidden":
        message = f"unknown key {path[-1]!r}{_suggest(path, schema)}"
    else:
        text = error["msg"].removeprefix("Value error, ")
        message = f"{text[:1].lower()}{text[1:]}"
        if kind != "value_error":  # a custom check's message already says what is wrong
            message += f" (got {short(error.get('input'))})"
    node = builder.keys.get(path) if kind == "extra_forbidden" else None
    node_path = path
    while node is None and node_path not in builder.values:
        node_path = node_path[:-1]
    return _problem(message, source, node or builder.values[node_path], path)


def _shape_text(error: Any) -> str:
    if error["type"] in ("dict_type", "model_type", "model_attributes_type"):
        return "a mapping"
    text: str = error["msg"]
    return text.removeprefix("Input should be ")


def _suggest(path: NodePath, schema: type[BaseModel]) -> str:
    """A hint for an unknown key: the closest allowed key, or the allowed keys."""
    import difflib

    allowed = _allowed_keys(path[:-1], schema)
    if not allowed:
        return ""
    close = difflib.get_close_matches(str(path[-1]), allowed, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; allowed keys: {', '.join(allowed)}"


def _allowed_keys(path: NodePath, schema: type[BaseModel]) -> list[str]:
    """The keys ``schema`` allows in the mapping at ``path`` (empty if not a model)."""
    current: Any = schema
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


def _problem(message: str, source: str, node: Node, path: NodePath) -> Problem:
    """A problem at the place ``node`` starts, naming the field at ``path``."""
    mark = node.start_mark
    return Problem(message, source, mark.line + 1, mark.column + 1, field_name(path) or None)


def field_name(path: NodePath) -> str:
    """A path as people write it: ``rules[1].match.tool``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text
