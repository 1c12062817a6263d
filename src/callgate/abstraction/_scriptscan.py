"""Value checks for options that may run commands: git keys, ssh options, sed and awk scripts.

Each check reads one option value (or a program's operands) and says what in it would run a
command, write a file or load code, or returns ``None``; ``""`` means the option's own reason. They
are conservative: sed scripts are parsed with sed's own grammar and anything that does not parse is
refused; awk programs are scanned, not parsed, so ``system`` and a single ``|`` are refused
wherever they appear, even inside a string or a regular expression. """

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

_SED_PLAIN = frozenset("=dDgGhHlLnNpPqQxzF")
_SED_TO_EOL = frozenset("aic")
_SED_LABEL = frozenset(":btTv")
_SED_FILE = {"r": "reads a file", "R": "reads a file", "w": "writes a file", "W": "writes a file"}
_SED_FLAGS = frozenset("gpiImM0123456789")
_AWK_SYSTEM = re.compile(r"\bsystem\b")
_AWK_LOAD = re.compile(r"@\s*(load|include|namespace)\b")
_AWK_INDIRECT = re.compile(r"@\s*[A-Za-z_][\w:]*\s*\(")
# print > FILE, print >> FILE and getline < FILE up to the end of the statement: what sed's w
# and r do (gawk's --sandbox refuses them too); a comparison inside print is refused with them.
_AWK_WRITE = re.compile(r"\bprintf?\b[^;\n{}]*>")
_AWK_READ = re.compile(r"\bgetline\b[^;\n{}]*<")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*=")
_CLIENT_SHELL = re.compile(
    r"\\!|(^|[\s;])\.(shell|system|load)\b|(^|[;\n])\s*system\s|\bprogram\s+'"
    r"|(\\(o|out|g|gx|w|write|copy)|\.(output|once|excel))\b[^\n]*\|",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Tables:
    """The name lists the checks match against (from the catalog's ``runs_*`` sections)."""

    git_keys: Mapping[str, str]
    ssh_options: frozenset[str]
    prefixes: tuple[str, ...] = ()


Check = Callable[[str, str, Tables], "str | None"]


def git_config(label: str, value: str, tables: Tables) -> str | None:
    """``git -c KEY=VALUE``: a key whose value git runs, or that loads other configuration."""
    key = value.partition("=")[0].strip().lower()
    says = git_key(key, tables)
    return None if says is None else f"{label} {key} {says}"


def git_key(key: str, tables: Tables) -> str | None:
    """What setting ``key`` (lower case) does when it is one that runs commands, or None."""
    for pattern, says in tables.git_keys.items():
        if fnmatchcase(key, pattern):
            return says
    return None


def git_config_set(label: str, words: Sequence[str], tables: Tables) -> str | None:
    """``git config KEY VALUE``: writing a key that runs a command persists it for later calls."""
    for i, word in enumerate(words):
        says = git_key(word.lower(), tables)
        if says is not None and i + 1 < len(words):
            return f"{label} {word.lower()} {says}"
    return None


def git_remote(label: str, value: str, tables: Tables) -> str | None:
    """``git archive --remote=ext::COMMAND``: one remote given as an option value."""
    return git_transport(label, [value], tables)


def git_transport(label: str, words: Sequence[str], tables: Tables) -> str | None:
    """A remote named ``ext::COMMAND`` (or ``fd::``) makes git run a command as the transport."""
    for word in words:
        if word.lower().startswith(("ext::", "fd::")):
            return f"{label} remote {word.split('::', 1)[0]}:: runs a command"
    return None


def ssh_option(label: str, value: str, tables: Tables) -> str | None:
    """``-o Key=value`` or ``-o 'Key value'``: keys that run local commands or load code.

    ssh splits the line with quotes and backslashes (``-o '"ProxyCommand" cmd'``), so they are
    dropped from the key before it is compared."""
    key = re.split(r"[\s=]", re.sub(r"[\"'\\]", "", value).strip(), maxsplit=1)[0]
    if key.lower() in tables.ssh_options:
        return f"{label} {key} runs a command"
    return None


def prefix(label: str, value: str, tables: Tables) -> str | None:
    """Refused (``""``: the entry's own reason) when the value starts with a listed prefix."""
    return "" if value.strip().lower().startswith(tables.prefixes) else None


def with_value(label: str, value: str, tables: Tables) -> str | None:
    """Refused (``""``) only when a value is given: ``git --exec-path`` alone prints a path."""
    return "" if value else None


def remote_archive(label: str, value: str, tables: Tables) -> str | None:
    """``tar -f host:file`` opens the archive through a remote shell program."""
    colon, slash = value.find(":"), value.find("/")
    if colon > 0 and (slash < 0 or colon < slash):
        return f"{label} {value!r} names a remote archive, opened through a remote shell"
    return None


def plus_command(label: str, words: Sequence[str], tables: Tables) -> str | None:
    """``less +CMD`` / ``vim +CMD``: an operand starting with ``+`` is a command to run."""
    for word in words:
        if word.startswith("+") and word != "+":
            return f"{label} {word[:40]} runs a pager or editor command"
    return None


def socat_address(label: str, words: Sequence[str], tables: Tables) -> str | None:
    """socat ``EXEC:`` and ``SYSTEM:`` addresses run a program."""
    for word in words:
        lowered = word.lower()
        if re.search(r"(^|[!,|])\s*(exec|system)\s*[:,]|^\s*(exec|system)\s*$", lowered):
            return f"{label} address {word.split(':', 1)[0]!r} runs a command"
    return None


def make_assignment(label: str, words: Sequence[str], tables: Tables) -> str | None:
    """``make VAR=value`` overrides a variable, and recipes run variables as commands."""
    for word in words:
        if _ASSIGNMENT.match(word):
            return (f"{label} {word.partition('=')[0]}= sets a variable, which recipes can run "
                    "as a command")
    return None


def client_script(label: str, value: str, tables: Tables) -> str | None:
    """Database client text: ``\\!``, ``.shell``, ``system``, pipes to ``\\o`` / ``.output``."""
    match = _CLIENT_SHELL.search(value)
    if match is None:
        return None
    return f"{label} text {match.group(0).strip()[:20]!r} runs a command"


def client_scripts(label: str, words: Sequence[str], tables: Tables) -> str | None:
    """``client_script`` over each operand (``sqlite3 db '.shell id'``)."""
    return next((r for w in words if (r := client_script(label, w, tables)) is not None), None)


def awk_program(label: str, value: str, tables: Tables) -> str | None:
    """awk programs: ``system()``, pipes to or from commands, ``print > FILE``, ``getline <
    FILE``, gawk ``@load`` and indirect calls."""
    if _AWK_SYSTEM.search(value):
        return f"{label} program calls system(), which runs a command"
    if "|" in value.replace("||", ""):
        return f"{label} program pipes to or from a command ('|')"
    load = _AWK_LOAD.search(value)
    if load is not None:
        return f"{label} program loads code (@{load.group(1)})"
    if _AWK_WRITE.search(value):
        return f"{label} program redirects print to a file ('>'), which writes it"
    if _AWK_READ.search(value):
        return f"{label} program reads a file with getline ('<')"
    if _AWK_INDIRECT.search(value):
        return (f"{label} program calls a function by a name it computes (gawk @name()), "
                "which can be system()")
    return None


def sed_script(label: str, value: str, tables: Tables) -> str | None:
    """sed scripts, parsed: the ``e`` command and flag run commands, ``w``/``W`` (and the ``w``
    flag) write files, ``r``/``R`` read files: what ``sed --sandbox`` refuses."""
    try:
        return _SedScan(value, label).run()
    except _UnreadableError as exc:
        return f"{label} script cannot be checked: {exc}"


class _UnreadableError(Exception):
    """Internal: the sed script does not follow sed's grammar."""


class _SedScan:
    """A one-pass reader of sed's grammar that reports the first command that runs or writes."""

    def __init__(self, text: str, label: str) -> None:
        self.text, self.label, self.i = text, label, 0

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def run(self) -> str | None:
        while True:
            self._skip(" \t\n;")
            if self.i >= len(self.text):
                return None
            if self.peek() == "#":
                self._to_eol()
                continue
            self._address()
            self._skip(" \t")
            if self.peek() == "!":
                self.i += 1
                self._skip(" \t")
            found = self._command()
            if found is not None:
                return found

    def _skip(self, chars: str) -> None:
        while self.i < len(self.text) and self.text[self.i] in chars:
            self.i += 1

    def _to_eol(self) -> str:
        end = self.text.find("\n", self.i)
        end = len(self.text) if end < 0 else end
        rest, self.i = self.text[self.i : end], end
        return rest

    def _address(self) -> None:
        for part in range(2):
            char = self.peek()
            if char.isdigit() or char in "+~":
                self.i += 1
                self._skip("0123456789~")
            elif char == "$":
                self.i += 1
            elif char in ("/", "\\"):
                if char == "\\":
                    self.i += 1
                self._delimited(self.peek())
                self._skip("IM")
            elif part == 1:
                raise _UnreadableError(f"an address is missing after ',' at {self.i}")
            else:
                return
            self._skip(" \t")
            if self.peek() != ",":
                return
            self.i += 1
            self._skip(" \t")

    def _delimited(self, delimiter: str) -> str:
        """Read up to an unescaped ``delimiter`` (the one at ``self.i`` is the opener)."""
        if delimiter in ("", "\n", "\\"):
            raise _UnreadableError(f"bad delimiter at {self.i}")
        self.i += 1
        start = self.i
        while self.i < len(self.text):
            char = self.text[self.i]
            if char == "\\":
                self.i += 2
                continue
            if char == delimiter:
                self.i += 1
                return self.text[start : self.i - 1]
            self.i += 1
        raise _UnreadableError(f"unterminated {delimiter!r}")

    def _command(self) -> str | None:
        char = self.peek()
        self.i += 1
        if char == "e":
            return f"{self.label} script command 'e' runs a command"
        if char in _SED_FILE:
            return f"{self.label} script command {char!r} {_SED_FILE[char]}"
        if char == "s":
            return self._substitute()
        if char == "y":
            self._delimited(self.peek())
            self.i -= 1
            self._delimited(self.text[self.i])
            return None
        if char in _SED_TO_EOL:
            self._text_argument()
        elif char in _SED_LABEL:
            self._label()
        elif char in "lLqQ":
            self._skip(" \t0123456789")
        elif char not in _SED_PLAIN and char not in "{}":
            raise _UnreadableError(f"unknown command {char!r} at {self.i - 1}")
        return None

    def _substitute(self) -> str | None:
        delimiter = self.peek()
        self._delimited(delimiter)
        self.i -= 1
        self._delimited(delimiter)
        while self.peek() and self.peek() in _SED_FLAGS | {"e", "w"}:
            flag = self.peek()
            self.i += 1
            if flag == "e":
                return f"{self.label} script flag 'e' of 's' runs a command"
            if flag == "w":
                return f"{self.label} script flag 'w' of 's' writes a file"
        return None

    def _text_argument(self) -> None:
        # a\ TEXT, a TEXT: the text runs to the end of the line; a line ending in a
        # backslash continues it.
        while True:
            line = self._to_eol()
            if not line.endswith("\\") or self.i >= len(self.text):
                return
            self.i += 1

    def _label(self) -> None:
        # sed ends a label at ';' or a newline, GNU sed also at blanks; ending it at the first
        # of any of them (and '}') reads at least every command sed reads.
        self._skip(" \t")
        while self.i < len(self.text) and self.text[self.i] not in "; \t\n}":
            self.i += 1


#: Checks on one option value, by the name the catalog uses.
VALUE_CHECKS: dict[str, Check] = {
    "git-config": git_config,
    "ssh-option": ssh_option,
    "sed-script": sed_script,
    "awk-program": awk_program,
    "prefix": prefix,
    "with-value": with_value,
    "remote-archive": remote_archive,
    "client-script": client_script,
    "git-remote": git_remote,
}
#: Checks on a program's operands, by the name the catalog uses.
OPERAND_CHECKS: dict[str, Callable[[str, Sequence[str], Tables], str | None]] = {
    "git-config-set": git_config_set,
    "git-transport": git_transport,
    "plus-command": plus_command,
    "socat-address": socat_address,
    "make-assignment": make_assignment,
    "client-script": client_scripts,
    "sed-script": lambda label, words, t: next(
        (r for w in words if (r := sed_script(label, w, t)) is not None), None),
    "awk-program": lambda label, words, t: next(
        (r for w in words if (r := awk_program(label, w, t)) is not None), None),
}
