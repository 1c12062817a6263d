"""Options that make an allowed program run a command its argv does not show.

``git -c core.fsmonitor=CMD status``, ``sed '1e CMD'``, ``tar --to-command=CMD``, ``find -exec``,
``ssh -o ProxyCommand=CMD``: the program is allowed, but what it runs is not checked. The
``runs_commands`` section of the catalog lists, for the programs of the catalog, the options,
operands and configuration keys that do this; ``runs_command`` reads a command's words the way
the program reads them and returns the reason for the first one it finds, naming the option or
key. Spellings follow the program's option parser: ``--opt=value`` and ``--opt value``, GNU
abbreviations of long options (any prefix of a listed long option counts), short options inside
clusters (``-ne SCRIPT``), old-style ``tar`` letters. Where the position of an operand matters
(the script of ``sed`` and ``awk``), an option the catalog does not know is refused, since it
might take a value and shift the operands.

``runs_environment`` does the same for environment assignments (``GIT_SSH_COMMAND``,
``LD_PRELOAD``, ``PATH`` …).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

from callgate.abstraction._catalog import Catalog, OptionSpec, ProgramSpec, default_catalog
from callgate.abstraction._scriptscan import OPERAND_CHECKS, VALUE_CHECKS, Tables

_RUNS = "runs a command"


class Changing(str):
    """A word the shell changes at run time (a glob, brace or expansion anywhere in it): as a
    program name it names a program nobody checked."""

    __slots__ = ()


class Expanding(Changing):
    """A word the shell may turn into other words at run time: an unquoted glob or brace
    (``*``, ``-{a,b}``), an unquoted expansion (word splitting), or a quoted expansion at the
    word's start (``"$X"``). It can become an option the parser never saw; checks that read
    options refuse it where an option may stand."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class OptionRule:
    """An option that runs a command: its canonical name, what it does, how its value is read."""

    name: str
    says: str = _RUNS
    takes_value: bool = False
    check: str | None = None
    prefixes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class OperandRule:
    """A check over a program's operands (all of them, or the first unless an option is given)."""

    check: str
    first: bool = False
    unless: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class RunRules:
    """The rules of one program or subcommand."""

    options: Mapping[str, OptionRule] = field(default_factory=dict)
    subcommands: Mapping[str, RunRules] = field(default_factory=dict)
    operands: OperandRule | None = None
    refuse: str | None = None
    words: frozenset[str] = frozenset()
    after_separator: str | None = None
    strict: bool = False
    options_anywhere: bool = False
    inherit_options: bool = False


@dataclass(frozen=True, slots=True)
class Runners:
    """All rules: per program, the environment patterns and the name tables of the checks."""

    programs: Mapping[str, RunRules]
    environment: tuple[str, ...]
    tables: Tables


def _option_rules(data: Mapping[str, Any]) -> dict[str, OptionRule]:
    rules: dict[str, OptionRule] = {}
    for names, raw in (data or {}).items():
        body = raw or {}
        for name in str(names).split():
            rules[name] = OptionRule(
                name=name,
                says=str(body.get("says", _RUNS)),
                takes_value=body.get("value") is True,
                check=body.get("check"),
                prefixes=tuple(str(p) for p in body.get("prefixes", ())),
            )
    return rules


def _rules(data: Mapping[str, Any], inherited: Mapping[str, OptionRule]) -> RunRules:
    options = {**inherited, **_option_rules(data.get("options") or {})}
    passed = options if data.get("inherit_options") else {}
    subs: dict[str, RunRules] = {}
    for names, body in (data.get("subcommands") or {}).items():
        sub = _rules({**(body or {}), "inherit_options": data.get("inherit_options")}, passed)
        subs.update(dict.fromkeys(str(names).split(), sub))
    operands = data.get("positionals")
    return RunRules(
        options=options,
        subcommands=subs,
        operands=None if not operands else OperandRule(
            check=str(operands["check"]),
            first=bool(operands.get("first", False)),
            unless=frozenset(str(operands.get("unless", "")).split()),
        ),
        refuse=data.get("refuse"),
        words=frozenset(str(w) for w in data.get("words", ())),
        after_separator=data.get("after_separator"),
        strict=bool(data.get("strict", False)),
        options_anywhere=bool(data.get("options_anywhere", False)),
        inherit_options=bool(data.get("inherit_options", False)),
    )


def compile_runners(catalog: Catalog) -> Runners:
    """The rules of ``catalog``'s ``runs_*`` sections."""
    data = catalog.runs_data
    keys = {
        pattern.lower(): str(says)
        for says, patterns in (data.get("runs_git_config") or {}).items()
        for pattern in str(patterns).split()
    }
    return Runners(
        programs={str(k): _rules(v or {}, {})
                  for k, v in (data.get("runs_commands") or {}).items()},
        environment=tuple(str(data.get("runs_environment", "")).split()),
        tables=Tables(git_keys=keys,
                      ssh_options=frozenset(str(data.get("runs_ssh_options", "")).lower().split())),
    )


@lru_cache(maxsize=1)
def default_runners() -> Runners:
    """The rules of the shipped catalog (compiled once)."""
    return compile_runners(default_catalog())


def runs_environment(names: Sequence[str], runners: Runners | None = None) -> str | None:
    """The reason an environment assignment makes a program run something, or None."""
    patterns = (runners or default_runners()).environment
    for name in names:
        if any(fnmatchcase(name, pattern) for pattern in patterns):
            return f"environment variable {name} can make a program run a command"
    return None


def runs_command(words: Sequence[str], catalog: Catalog | None = None) -> str | None:
    """The reason ``words`` (program first) make the program run a command it does not show.

    ``None`` when no option, operand or key in them is one the catalog lists. A program the
    catalog has no rules for is ``None``: its options are not known to run anything.
    """
    if not words:
        return None
    cat = catalog or default_catalog()
    runners = default_runners() if catalog is None else compile_runners(cat)
    name, spec = cat.program(words[0])
    rules = runners.programs.get(name)
    if rules is None:
        return None
    if spec is None:
        spec = _wrapper_spec(cat, name)
    walk = _Walk(runners.tables, name)
    return next(walk.level(rules, spec, list(words[1:]), name), None)


def _wrapper_spec(cat: Catalog, name: str) -> ProgramSpec:
    wrapper = cat.wrappers.get(name)
    flags = wrapper.value_flags if wrapper is not None else frozenset()
    options = {flag: OptionSpec(role=None, takes_value=True) for flag in flags}
    return ProgramSpec(name=name, options=options, options_end_at_positional=True)


@dataclass(slots=True)
class _Word:
    """One option occurrence: as written, its canonical rule, and its value (None: no value)."""

    written: str
    rule: OptionRule | None
    value: str | None


class _Walk:
    """Reads one command's words level by level (program, then subcommands)."""

    def __init__(self, tables: Tables, program: str) -> None:
        self.tables = tables
        self.program = program

    def level(self, rules: RunRules, spec: ProgramSpec, words: list[str],
              label: str) -> Iterator[str]:
        """Reasons found at this level and below, in the order the words come."""
        if rules.refuse is not None:
            yield f"{label} {rules.refuse}"
            return
        operands: list[str] = []
        given: set[str] = set()
        stop_at_operand = spec.options_end_at_positional and not rules.options_anywhere
        i = 0
        while i < len(words):
            word = words[i]
            if _expands(word) and not (stop_at_operand and operands):
                yield (f"{label} word {word[:40]!r} can expand into options the shell shows "
                       "only when it runs, which cannot be checked")
                return
            if word == "--":
                if rules.after_separator is not None and i + 1 < len(words):
                    yield f"{label} -- {rules.after_separator}"
                operands.extend(words[i + 1 :])
                break
            if word.startswith("-") and len(word) > 1 and not (stop_at_operand and operands):
                found, used = self._option(rules, spec, words, i, label)
                for item in found:
                    given.add(item.rule.name if item.rule else item.written)
                    yield from self._judge(item, label)
                i += 1 + used
                continue
            if not operands and (rules.subcommands or spec.subcommands):
                yield from self._descend(rules, spec, word, words[i + 1 :], label)
                return
            if spec.old_style and i == 0:
                found, used = self._old_style(rules, spec, words, label)
                for item in found:
                    yield from self._judge(item, label)
                i += 1 + used
                continue
            operands.append(word)
            i += 1
        yield from self._operands(rules, operands, given, label)

    def _descend(self, rules: RunRules, spec: ProgramSpec, word: str, rest: list[str],
                 label: str) -> Iterator[str]:
        sub_rules = rules.subcommands.get(word) or RunRules(
            options=rules.options if rules.inherit_options else {})
        sub_spec = spec.subcommands.get(word) or ProgramSpec(name=spec.name, options=spec.options)
        if word in rules.words:
            yield f"{label} {word} {_RUNS}"
            return
        yield from self.level(sub_rules, sub_spec, rest, f"{label} {word}")

    def _operands(self, rules: RunRules, operands: list[str], given: set[str],
                  label: str) -> Iterator[str]:
        hit = next((w for w in operands if w in rules.words), None)
        if hit is not None:
            yield f"{label} {hit} {_RUNS}"
        spec = rules.operands
        if spec is None or (spec.first and spec.unless & given):
            return
        chosen = operands[:1] if spec.first else operands
        unseen = next((w for w in chosen if _expands(w)), None)
        if unseen is not None:
            yield f"{label} operand {unseen[:40]!r} is an expansion, which cannot be checked"
            return
        found = OPERAND_CHECKS[spec.check](label, chosen, self.tables)
        if found is not None:
            yield found

    def _judge(self, item: _Word, label: str) -> Iterator[str]:
        rule = item.rule
        if rule is None:
            yield f"{label} option {item.written!r} is not known, so what it runs cannot be checked"
            return
        shown = item.written if item.written == rule.name else f"{item.written} ({rule.name})"
        if rule.check is None:
            yield f"{label} {shown} {rule.says}"
            return
        if item.value is not None and _expands(item.value):
            yield (f"{label} {shown} value {item.value[:40]!r} is an expansion, which cannot "
                   "be checked")
            return
        tables = replace(self.tables, prefixes=rule.prefixes)
        found = VALUE_CHECKS[rule.check](f"{label} {shown}", item.value or "", tables)
        if found == "":
            yield f"{label} {shown} {rule.says}"
        elif found is not None:
            yield found

    def _option(self, rules: RunRules, spec: ProgramSpec, words: list[str], i: int,
                label: str) -> tuple[list[_Word], int]:
        """The rule-bearing (or, when strict, unknown) options of ``words[i]``; words used."""
        word = words[i]
        name, eq, inline = word.partition("=")
        if spec.single_dash_long and name.startswith("--"):
            name = name[1:]
        exact_rule, exact_opt = rules.options.get(name), spec.options.get(name)
        if word.startswith("--") or exact_rule or exact_opt or spec.single_dash_long:
            rule, takes, known = self._long(rules, spec, name)
            if not known and not spec.single_dash_long:
                return ([_Word(word, None, None)] if rules.strict else []), 0
            if takes and not eq and i + 1 < len(words):
                return ([_Word(name, rule, words[i + 1])] if rule else []), 1
            return ([_Word(name, rule, inline if eq else None)] if rule else []), 0
        return self._cluster(rules, spec, word[1:], words[i + 1 :])

    def _long(self, rules: RunRules, spec: ProgramSpec,
              name: str) -> tuple[OptionRule | None, bool, bool]:
        """(rule, takes a separate value, known) for a long option name as written."""
        rule = rules.options.get(name)
        opt = spec.options.get(name)
        if rule is not None:
            return rule, rule.takes_value, True
        if opt is not None:
            return None, _takes(opt), True
        if spec.single_dash_long or not name.startswith("--") or len(name) < 3:
            return None, False, False
        prefixed = [r for n, r in rules.options.items() if n.startswith(name)]
        if prefixed:  # an abbreviation of an option that runs commands (or an ambiguous one)
            return prefixed[0], prefixed[0].takes_value, True
        takes = {_takes(o) for n, o in spec.options.items() if n.startswith(name)}
        return None, True in takes, len(takes) == 1

    def _cluster(self, rules: RunRules, spec: ProgramSpec, cluster: str,
                 rest: list[str]) -> tuple[list[_Word], int]:
        found: list[_Word] = []
        for j, char in enumerate(cluster):
            flag = "-" + char
            rule, opt = rules.options.get(flag), spec.options.get(flag)
            if rule is None and opt is None:
                if rules.strict:
                    found.append(_Word(flag, None, None))
                continue
            takes = rule.takes_value if rule is not None else _takes(opt) or bool(
                opt and opt.attached)
            if not takes:
                if rule is not None:
                    found.append(_Word(flag, rule, None))
                continue
            tail = cluster[j + 1 :]
            separate = not tail and not (opt is not None and opt.attached and rule is None)
            value = rest[0] if separate and rest else tail
            if rule is not None:
                found.append(_Word(flag, rule, value))
            return found, int(separate and bool(rest))
        return found, 0

    def _old_style(self, rules: RunRules, spec: ProgramSpec, words: list[str],
                   label: str) -> tuple[list[_Word], int]:
        """``tar cIf PROG archive``: letters, whose values are the following words in order."""
        found: list[_Word] = []
        used = 0
        for char in words[0]:
            flag = "-" + char
            rule, opt = rules.options.get(flag), spec.options.get(flag)
            takes = rule.takes_value if rule is not None else opt is not None and _takes(opt)
            value = None
            if takes and 1 + used < len(words):
                used += 1
                value = words[used]
            if rule is not None:
                found.append(_Word(flag, rule, value))
        return found, used


def _expands(word: str) -> bool:
    """Whether the shell parser marked ``word`` as one the shell may expand at run time."""
    return isinstance(word, Expanding)


def _takes(opt: OptionSpec | None) -> bool:
    """Whether an option of the catalog takes its value from the next word."""
    return opt is not None and (opt.takes_value or opt.until) and not opt.attached
