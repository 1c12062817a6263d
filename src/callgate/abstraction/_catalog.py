"""The command catalog: what each program's flags and positional words mean.

The catalog is data (``catalog.yaml`` next to this module): one entry per program with its
options, positional roles, subcommands, effects and output taint. This module loads it once
and grounds a simple command's words into named arguments. Programs not in the catalog still
get ``argv``, ``flags``, ``options`` and ``positionals``.

Option keys in the data are the flag spellings separated by spaces; the value is a role name,
``role=`` when the flag takes a value, ``role=+`` when it may repeat (a list), or a mapping
``{role, value, multi, at_file, implies, set}`` for the rare cases that need more.

The data is read from its compiled form, ``catalog.json`` beside the YAML: the same values as
JSON, parsed in under a millisecond where the YAML takes some 20 (the first shell command a
``callgate`` process judges waits for it). The JSON names the SHA-256 of the ``catalog.yaml``
it was made from and is used only while that matches: an edited catalog is read from its YAML
until ``write_compiled()`` writes the JSON again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from callgate._errors import CallgateError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

#: The catalog as written, and its data as JSON (made by ``compiled_catalog``).
SOURCE = "catalog.yaml"
COMPILED = "catalog.json"

_VERSION_SUFFIX = re.compile(r"^(?P<base>[A-Za-z+_-]*?[A-Za-z+_])-?[0-9][0-9.]*$")
_REMOTE = re.compile(r"^(?:[^@/\s]+@)?(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:]+\]):")


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One flag of a program: the role it fills and how it takes its value."""

    role: str | None
    takes_value: bool = False
    multi: bool = False
    at_file: str | None = None
    implies: Mapping[str, Any] = field(default_factory=dict)
    set_value: Any = True
    attached: bool = False
    until: bool = False


@dataclass(frozen=True, slots=True)
class ProgramSpec:
    """A program's entry in the catalog."""

    name: str
    options: Mapping[str, OptionSpec] = field(default_factory=dict)
    positionals: tuple[tuple[str, str], ...] = ()
    subcommands: Mapping[str, ProgramSpec] = field(default_factory=dict)
    subcommand_role: str = "subcommand"
    defaults: Mapping[str, Any] = field(default_factory=dict)
    effects: Mapping[str, str] = field(default_factory=dict)
    kinds: Mapping[str, str] = field(default_factory=dict)
    taint: str | None = None
    language: str | None = None
    category: str = "other"
    options_end_at_positional: bool = False
    old_style: bool = False
    single_dash_long: bool = False
    fills: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WrapperSpec:
    """A program that runs another one (``sudo``, ``env``, ``timeout`` …)."""

    name: str
    value_flags: frozenset[str] = frozenset()
    skip_positionals: int = 0
    assignments: bool = False
    inert_flags: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Catalog:
    """The loaded catalog: programs by name (aliases included), wrappers and shells."""

    programs: Mapping[str, ProgramSpec]
    wrappers: Mapping[str, WrapperSpec]
    shells: frozenset[str]
    detectors: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: The ``runs_*`` sections as written: options that run commands (``_runners`` reads them).
    runs_data: Mapping[str, Any] = field(default_factory=dict)

    def detect(self, words: Sequence[str]) -> ProgramSpec | None:
        """The entry of an uncatalogued program recognised by its flags (libFuzzer targets)."""
        for name, flags in self.detectors.items():
            if any(w.partition("=")[0] in flags for w in words[1:] if w.startswith("-")):
                return self.programs.get(name)
        return None

    def program(self, word: str) -> tuple[str, ProgramSpec | None]:
        """The canonical program name of a command word and its entry, if any."""
        name = word.rsplit("/", 1)[-1] or word
        spec = self.programs.get(name)
        if spec is None:
            match = _VERSION_SUFFIX.match(name)
            if match and match.group("base") in self.programs:
                spec = self.programs[match.group("base")]
        return (spec.name, spec) if spec is not None else (name, None)


def _option(value: Any) -> OptionSpec:
    if isinstance(value, str):
        multi = value.endswith("=+")
        takes = multi or value.endswith("=")
        return OptionSpec(role=value.rstrip("=+") or None, takes_value=takes, multi=multi)
    return OptionSpec(
        role=value.get("role"),
        takes_value=value.get("value", False) is True,
        attached=value.get("value") == "attached",
        until=value.get("value") == "until",
        multi=bool(value.get("multi", False)),
        at_file=value.get("at_file"),
        implies=dict(value.get("implies", {})),
        set_value=value.get("set", True),
    )


def _positional(text: str) -> tuple[str, str]:
    if text[-1] in "*?":
        return text[:-1], text[-1]
    return text, "1"


def _program(
    name: str, data: Mapping[str, Any], inherited: Mapping[str, OptionSpec]
) -> ProgramSpec:
    options: dict[str, OptionSpec] = dict(inherited)
    for names, value in (data.get("options") or {}).items():
        spec = _option(value)
        for flag in str(names).split():
            options[flag] = spec
    subs = {
        str(sub): _program(name, body or {}, options)
        for sub, body in (data.get("subcommands") or {}).items()
    }
    positionals = [_positional(p) for p in data.get("positionals", ())]
    if "subcommand_role" in data and not subs:
        # a named first word whose values are not catalogued (``gh pr create``)
        positionals.insert(0, (str(data["subcommand_role"]), "?"))
    return ProgramSpec(
        name=name,
        options=options,
        positionals=tuple(positionals),
        subcommands=subs,
        subcommand_role=data.get("subcommand_role", "subcommand"),
        defaults=dict(data.get("defaults", {})),
        effects=dict(data.get("effects", {})),
        kinds=dict(data.get("kinds", {})),
        taint=data.get("taint"),
        language=data.get("language"),
        category=data.get("category", "other"),
        options_end_at_positional=bool(data.get("options_end_at_positional", False)),
        old_style=bool(data.get("old_style", False)),
        single_dash_long=bool(data.get("single_dash_long", False)),
        fills={str(k): tuple(v) for k, v in (data.get("fills") or {}).items()},
    )


class _Programs(Mapping[str, ProgramSpec]):
    """Programs by name and alias, each entry built from its data the first time it is asked
    for: a command names one or two programs of the catalog's hundreds, and building them all
    costs a single-call command (``callgate exec``, a hook) a few milliseconds."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._bodies: dict[str, tuple[str, Mapping[str, Any]]] = {}
        for name, body in data.items():
            entry = (str(name), body or {})
            self._bodies[entry[0]] = entry
            for alias in entry[1].get("aliases", ()):
                self._bodies[str(alias)] = entry
        self._built: dict[str, ProgramSpec] = {}

    def __getitem__(self, key: str) -> ProgramSpec:
        name, body = self._bodies[key]
        spec = self._built.get(name)
        if spec is None:  # two threads may both build it: equal entries, either is kept
            spec = self._built[name] = _program(name, body, {})
        return spec

    def __iter__(self) -> Iterator[str]:
        return iter(self._bodies)

    def __len__(self) -> int:
        return len(self._bodies)


def parse_catalog(data: Mapping[str, Any]) -> Catalog:
    """Build a catalog from its data (the shape of ``catalog.yaml``); each program's entry is
    built when it is first looked up."""
    programs = _Programs(data["programs"])
    wrappers = {
        str(name): WrapperSpec(
            name=str(name),
            value_flags=frozenset(str(body.get("value_flags", "")).split()),
            skip_positionals=int(body.get("skip_positionals", 0)),
            assignments=bool(body.get("assignments", False)),
            inert_flags=frozenset(str(body.get("inert_flags", "")).split()),
        )
        for name, body in data["wrappers"].items()
    }
    detectors = {
        str(name): frozenset(str(flags).split())
        for name, flags in (data.get("detectors") or {}).items()
    }
    return Catalog(
        programs=programs,
        wrappers=wrappers,
        shells=frozenset(data["shells"]),
        detectors=detectors,
        runs_data={k: v for k, v in data.items() if str(k).startswith("runs_")},
    )


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    """The catalog shipped with callgate (loaded once)."""
    try:
        return parse_catalog(catalog_data(resources.files(__package__ or "callgate.abstraction")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CallgateError(f"the command catalog cannot be loaded: {exc}") from exc


def catalog_data(folder: Traversable) -> Any:
    """The data of ``folder``'s ``catalog.yaml``: from the ``catalog.json`` beside it while that
    was made from this very text, else from the YAML. ``OSError`` when the YAML cannot be
    read, ``ValueError`` when it is not UTF-8 YAML."""
    source = folder.joinpath(SOURCE).read_bytes()
    try:
        compiled = json.loads(folder.joinpath(COMPILED).read_bytes())
    except (OSError, ValueError):  # absent or damaged: the YAML is the catalog
        compiled = None
    if (isinstance(compiled, dict) and isinstance(compiled.get("catalog"), dict)
            and compiled.get("source_sha256") == hashlib.sha256(source).hexdigest()):
        return compiled["catalog"]
    return _yaml_data(source)


def _yaml_data(source: bytes) -> Any:
    """The catalog YAML's data; ``ValueError`` when it is not UTF-8 or not YAML."""
    import yaml  # only for a catalog whose compiled form is stale: PyYAML costs 10 ms to import

    try:
        return yaml.load(source.decode("utf-8"), Loader=getattr(yaml, "CSafeLoader",
                                                                yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from exc


def compiled_catalog(source: bytes) -> str:
    """The text of ``catalog.json`` for the catalog YAML ``source``: its data with the
    SHA-256 of ``source``. ``ValueError`` when the data does not make a catalog, or makes
    another one once written as JSON (a value JSON cannot hold, such as a date)."""
    data = _yaml_data(source)
    try:
        catalog = parse_catalog(data)
        text = json.dumps({"source_sha256": hashlib.sha256(source).hexdigest(),
                           "catalog": data}, ensure_ascii=False, separators=(",", ":"))
        same = parse_catalog(json.loads(text)["catalog"]) == catalog
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a catalog JSON can hold: {exc!r}") from exc
    if not same:  # e.g. a key JSON turns into text that the catalog does not read as text
        raise ValueError("the catalog read from JSON differs from the one read from YAML")
    return text + "\n"


def write_compiled(folder: Path | None = None) -> Path:
    """Write ``catalog.json`` anew from the ``catalog.yaml`` beside it (in ``folder``, by default
    this module's, that is the source tree's); the path written."""
    here = folder or Path(__file__).resolve().parent
    (here / COMPILED).write_text(compiled_catalog((here / SOURCE).read_bytes()),
                                 encoding="utf-8")
    return here / COMPILED


class _Grounding:
    """Accumulates the named arguments of one command while its words are read."""

    def __init__(self) -> None:
        self.args: dict[str, Any] = {}
        self.flags: list[str] = []
        self.options: dict[str, str] = {}
        self.positionals: list[str] = []
        self.implied: dict[str, Any] = {}

    def set_option(self, flag: str, opt: OptionSpec | None, value: Any) -> None:
        """Record a flag's value under its role (or in ``options`` when it has none)."""
        if opt is None or opt.role is None:
            if isinstance(value, str):
                self.options[flag] = value
            return
        if opt.at_file and isinstance(value, str) and value.startswith("@"):
            self._put(opt.at_file, value[1:], opt.multi)
        else:
            self._put(opt.role, opt.set_value if value is True else value, opt.multi)
        self.implied.update(opt.implies)

    def _put(self, role: str, value: Any, multi: bool) -> None:
        if multi:
            self.args.setdefault(role, []).append(value)
        else:
            self.args[role] = value


def _read_cluster(
    g: _Grounding, spec: ProgramSpec, cluster: str, rest: Sequence[str], i: int
) -> int:
    """Read a short-flag cluster (``-rf``, ``-ofile``); returns how many next words it used."""
    used = 0
    for j, ch in enumerate(cluster):
        flag = "-" + ch
        g.flags.append(flag)
        opt = spec.options.get(flag)
        if opt is not None and opt.attached:
            g.set_option(flag, opt, cluster[j + 1 :] or True)
            return used
        if opt is not None and opt.takes_value:
            tail = cluster[j + 1 :]
            if tail:
                g.set_option(flag, opt, tail)
            elif i + 1 + used < len(rest):
                used += 1
                g.set_option(flag, opt, rest[i + used])
            return used
        g.set_option(flag, opt, True)
    return used


def _read_words(g: _Grounding, spec: ProgramSpec, words: Sequence[str]) -> ProgramSpec:
    """Read flags and positionals; descends into subcommands. Returns the innermost spec."""
    end_of_options = False
    separator_seen = False
    i = 0
    while i < len(words):
        word = words[i]
        if not separator_seen and word == "--":
            end_of_options = separator_seen = True
        elif not end_of_options and word.startswith("-") and len(word) > 1:
            i += _read_flag(g, spec, words, i)
        elif spec.subcommands and not g.positionals and spec.subcommand_role not in g.args:
            g.args[spec.subcommand_role] = word
            sub = spec.subcommands.get(word)
            inner = sub if sub is not None else ProgramSpec(name=spec.name, options=spec.options)
            return _read_words(g, inner, words[i + 1 :])
        elif spec.old_style and i == 0 and word.isalpha():
            i += _read_cluster(g, spec, word, words, i)
        else:
            g.positionals.append(word)
            end_of_options = end_of_options or spec.options_end_at_positional
        i += 1
    return spec


def _read_flag(g: _Grounding, spec: ProgramSpec, words: Sequence[str], i: int) -> int:
    """Read one flag word at ``words[i]``; returns how many following words it consumed."""
    word = words[i]
    name, eq, inline = word.partition("=")
    exact = spec.options.get(name)
    if exact is not None and exact.until:
        end = i + 1
        while end < len(words) and words[end] not in (";", "+", "\\;"):
            end += 1
        g.flags.append(name)
        g.set_option(name, exact, " ".join(words[i + 1 : end]))
        return end - i
    if word.startswith("--") or exact is not None or spec.single_dash_long:
        g.flags.append(name)
        if exact is not None and exact.takes_value and not eq:
            if i + 1 < len(words):
                g.set_option(name, exact, words[i + 1])
                return 1
            return 0
        g.set_option(name, exact, inline if eq else True)
        return 0
    return _read_cluster(g, spec, word[1:], words, i)


def _assign_positionals(g: _Grounding, spec: ProgramSpec) -> None:
    filled = set(g.args)
    for role in list(filled):
        filled.update(spec.fills.get(role, ()))
    roles = [(r, c) for r, c in spec.positionals if r not in filled]
    words = list(g.positionals)
    star = next((k for k, (_, c) in enumerate(roles) if c == "*"), len(roles))
    for role, card in roles[:star]:
        if words and (card == "1" or len(words) > sum(c == "1" for _, c in roles[star:])):
            g.args[role] = words.pop(0)
    after = roles[star + 1 :]
    for role, _card in reversed(after):
        if words:
            g.args[role] = words.pop()
    if star < len(roles) and words:
        g.args[roles[star][0]] = words


def _host(value: str, kind: str) -> str | None:
    if kind == "url":
        candidate = value if "://" in value else f"//{value}"
        try:
            return urlsplit(candidate).hostname
        except ValueError:
            return None
    match = _REMOTE.match(value)
    if match:
        return match.group("host").strip("[]")
    return value.rsplit("@", 1)[-1] or None if kind == "host" else None


def _derive(args: dict[str, Any], spec: ProgramSpec) -> None:
    """Add ``reads`` / ``writes`` / ``deletes`` and ``host`` / ``hosts`` from declared roles."""
    for role, effect in spec.effects.items():
        value = args.get(role)
        if isinstance(value, str) and value not in ("-", ""):
            args.setdefault(f"{effect}s", []).append(value)
        elif isinstance(value, list):
            args.setdefault(f"{effect}s", []).extend(v for v in value if v not in ("-", ""))
    hosts: list[str] = []
    for role, kind in spec.kinds.items():
        value = args.get(role)
        for item in value if isinstance(value, list) else [value]:
            host = _host(item, kind) if isinstance(item, str) else None
            if host and host not in hosts:
                hosts.append(host)
    if hosts:
        args["host"] = hosts[0]
        args["hosts"] = hosts


@dataclass(frozen=True, slots=True)
class Grounded:
    """A grounded command: its action, named arguments, output taint and script language."""

    action: str
    args: dict[str, Any]
    taint: str | None = None
    language: str | None = None


def ground(words: Sequence[str], catalog: Catalog | None = None) -> Grounded:
    """Ground a simple command's words (program first) into an action and named arguments."""
    cat = catalog or default_catalog()
    action, spec = cat.program(words[0])
    if spec is None:
        spec = cat.detect(words)
    g = _Grounding()
    inner = _read_words(g, spec or ProgramSpec(name=action), list(words[1:]))
    if spec is not None:
        _assign_positionals(g, inner)
        for role, value in {**spec.defaults, **inner.defaults, **g.implied}.items():
            g.args.setdefault(role, value)
        _derive(g.args, inner if inner is spec else _merged(spec, inner))
    args = g.args
    args["flags"] = g.flags
    args["positionals"] = g.positionals
    if g.options:
        args["options"] = g.options
    taint = (inner.taint or spec.taint) if spec is not None else None
    return Grounded(action, args, taint, spec.language if spec is not None else None)


def _merged(outer: ProgramSpec, inner: ProgramSpec) -> ProgramSpec:
    return ProgramSpec(
        name=inner.name,
        effects={**outer.effects, **inner.effects},
        kinds={**outer.kinds, **inner.kinds},
    )


def ground_words(
    words: Sequence[str], catalog: Catalog | None = None
) -> tuple[str, dict[str, Any]]:
    """The action and named arguments of a simple command's words."""
    grounded = ground(words, catalog)
    return grounded.action, grounded.args
