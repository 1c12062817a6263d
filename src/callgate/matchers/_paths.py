"""The path gate: find the paths in a call's arguments, canonicalise them, match them to globs.

Every path a call names is reduced to one canonical form (``canonical``: ``~`` expanded,
``file://`` stripped, joined to the working directory, symlinks and ``..`` resolved by
``os.path.realpath``) and that form is what the globs judge, so ``./data/../../etc/passwd`` and a
symlink ``./data/etc -> /etc`` are judged where they really lead. The executor must open the same
canonical form it was checked as: the file executor opens it with no symlink followed
(``callgate.executors._open``), so a symlink swapped in between check and use is refused there,
and for subprocess tools the OS sandbox confines what the program opens.

Compared with an absolute-paths-only gate this one also checks relative paths (every call carries
a working directory here), ``~`` and ``file://`` forms, and strings nested at any depth in the
arguments, while ordinary text that merely holds a slash ("and/or") is left alone.

Decisions worth knowing: a backslash anywhere in a path is refused (a literal character on POSIX,
a separator elsewhere, so ``..\\..\\etc\\passwd`` has two readings); ``..`` is resolved after the
symlinks before it, as the kernel does, never collapsed lexically first; ``~user`` is not
expanded; ``file:`` URLs must be local (no host, or ``localhost``) with no query or fragment.

Glob syntax: ``**`` is zero or more whole segments (``./data/**`` matches ``./data`` itself and
everything below it), ``*`` and ``?`` stay within one segment, ``[abc]``, ``[a-z]`` and ``[!abc]``
are classes. Hidden files are not special. Compiled globs are cached; the literal prefix of a glob
is resolved with ``realpath`` once, when it is first compiled.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple
from urllib.parse import unquote, urlsplit

from callgate._errors import CallgateError
from callgate.matchers._regex import (
    PatternError,
    PolicyPattern,
    SubjectError,
    compile_policy_pattern,
)

Intent = Literal["read", "write"]

#: Actions that change the filesystem; the one definition, for the gate and the executors.
WRITE_ACTIONS: frozenset[str] = frozenset(
    {"write", "append", "create", "delete", "remove", "put", "move", "copy", "mkdir", "edit"}
)


def intent_of(action: str) -> Intent:
    """Whether an action writes (``write``) or only reads (``read``)."""
    return "write" if action in WRITE_ACTIONS else "read"


#: Parameter names whose string values are paths even when relative.
PATH_PARAM_NAMES: frozenset[str] = frozenset(
    {
        "path", "paths", "file", "files", "file_path", "filepath", "filename", "filenames",
        "dir", "dirs", "directory", "directories", "src", "source", "sources", "dest",
        "destination", "target", "output", "out", "cwd", "root",
    }
)  # fmt: skip
_PATH_SUFFIXES: tuple[str, ...] = ("_path", "_paths", "_file", "_files", "_dir", "_dirs")
_WRITE_NAMES: frozenset[str] = frozenset({"dest", "destination", "output", "out", "target"})
_WRITE_PREFIXES: tuple[str, ...] = ("write", "out", "dest", "save")
_READ_NAMES: frozenset[str] = frozenset({"src", "source", "sources", "input"})
_MAX_DEPTH = 32
_GLOB_CHARS = frozenset("*?[")


class PathRejected(CallgateError):  # noqa: N818 - reads as "the path was rejected"
    """A path argument cannot be canonicalised safely; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class PathArg(NamedTuple):
    """One path found in a call's arguments: where it was, what it said, read or write."""

    key: str
    value: str
    intent: Intent


@dataclass(frozen=True, slots=True)
class PathVerdict:
    """The first path argument that is not allowed, with the sentence that says why."""

    key: str
    value: str
    resolved: str | None
    intent: Intent
    reason: str


@dataclass(frozen=True, slots=True)
class Glob:
    """A compiled glob: its canonical literal root and a regex over canonical absolute paths."""

    pattern: str
    root: str
    _regex: PolicyPattern

    def matches(self, abs_path: str) -> bool:
        """Whether a canonical absolute path (as ``canonical`` returns) matches this glob.

        Matching runs on RE2 (linear time), so no glob can be made slow by a long path.
        """
        try:
            return self._regex.matches(abs_path)
        except SubjectError as exc:
            raise PathRejected(f"path cannot be matched against {self.pattern!r}: {exc}") from exc


# --------------------------------------------------------------------------- canonical forms


def _home() -> str:
    return os.path.expanduser("~")


def _strip_file_url(path: str) -> str:
    try:
        parts = urlsplit(path)
    except ValueError as exc:
        raise PathRejected(f"malformed file URL {path!r}") from exc
    host = parts.netloc.lower()
    if host not in ("", "localhost"):
        raise PathRejected(f"file URL {path!r} names a remote host {parts.netloc!r}")
    if parts.query or parts.fragment:
        raise PathRejected(f"file URL {path!r} has a query or fragment")
    local = unquote(parts.path, errors="strict")
    if not local.startswith("/"):
        raise PathRejected(f"file URL {path!r} does not hold an absolute path")
    return local


def _check_text(path: str) -> None:
    if not path:
        raise PathRejected("empty path")
    if "\x00" in path:
        raise PathRejected(f"path {path!r} contains a NUL byte")
    if "\\" in path:
        # POSIX treats a backslash as an ordinary character, Windows and some tools as a
        # separator: "..\\..\\etc\\passwd" would mean one thing here and another there.
        raise PathRejected(f"path {path!r} contains a backslash, which is ambiguous")


def _real_dir(working_dir: str) -> str:
    home = working_dir == "~" or working_dir.startswith("~/")
    base = _home() + working_dir[1:] if home else working_dir
    if not os.path.isabs(base):
        raise PathRejected(f"working directory {working_dir!r} is not absolute")
    return _real_abs_dir(base)


@functools.lru_cache(maxsize=256)
def _real_abs_dir(base: str) -> str:
    # Cached: every path joined to it is realpath'd again as a whole, so a stale entry (the
    # directory replaced by a symlink later) cannot widen what a path reaches.
    return os.path.realpath(base)


def _anchor(path: str, working_dir: str) -> tuple[str, str]:
    """``(base directory, rest)``: text checks, ``file:`` stripped, ``~`` and relative anchored.

    The base is taken literally (a working directory named ``a[1]`` holds no glob class); the
    rest is the part of ``path`` itself that follows it.
    """
    _check_text(path)
    if path[:5].lower() == "file:":
        try:
            path = _strip_file_url(path)
        except UnicodeDecodeError as exc:
            raise PathRejected(f"file URL {path!r} is not valid percent-encoded UTF-8") from exc
        _check_text(path)
    if path == "~" or path.startswith("~/"):
        # Only "~" and "~/..." name the home directory: "~user" stays a relative name, so the
        # result never depends on the password database of the machine.
        return _home(), path[2:]
    if path.startswith("/"):
        return "/", path.lstrip("/")
    return _real_dir(working_dir), path


def _absolute(path: str, working_dir: str, normalize: bool = True) -> str:
    """Steps of ``canonical`` before symlink resolution: text checks, URL, ``~``, join."""
    base, rest = _anchor(path, working_dir)
    joined = os.path.join(base, rest) if rest else base
    return os.path.normpath(joined) if normalize else joined


def canonical(path: str, working_dir: str) -> str:
    """The one canonical absolute form of ``path``: the form the gate checks and the executor uses.

    Expands ``~``, strips ``file://`` (percent-decoded; a non-local host is refused), joins a
    relative path to ``working_dir`` and resolves symlinks and ``..`` with ``realpath``.
    Raises ``PathRejected`` for NUL bytes, backslashes, empty paths and unusable file URLs.
    """
    # No lexical normalisation first: "link/.." must climb from the link's target, as the
    # kernel does, not cancel out the link.
    return _resolve(path, _absolute(path, working_dir, normalize=False))


def _resolve(path: str, absolute: str) -> str:
    try:
        found = _resolved_by_kernel(absolute)
        return found if found is not None else os.path.realpath(absolute)
    except (OSError, ValueError) as exc:  # e.g. lone surrogates the filesystem cannot encode
        raise PathRejected(f"path {path!r} cannot be resolved: {exc}") from exc


_O_PATH: int | None = getattr(os, "O_PATH", None)
_OWN_FDS = "/proc/self/fd"
#: A descriptor of ``/proc/self/fd`` (-1 when it cannot be opened), opened on first use:
#: reading a link relative to it spares the kernel the walk of ``/proc/self/fd/`` on every
#: path. It names the table of the process that opened it, so a forked child forgets it.
_own_fds: list[int] = []


def _own_fds_dir() -> int:
    """The descriptor of this process's ``/proc/self/fd`` (see ``_own_fds``)."""
    if _own_fds:
        return _own_fds[0]
    try:
        fd = os.open(_OWN_FDS, (_O_PATH or 0) | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        fd = -1
    _own_fds.append(fd)
    if _own_fds[0] != fd:  # another thread opened it first: keep one
        _own_fds.remove(fd)
        if fd >= 0:
            os.close(fd)
    return _own_fds[0]


def _forget_own_fds() -> None:
    """In a forked child: the inherited descriptor lists the parent's table, not this one."""
    if _own_fds and _own_fds[0] >= 0:
        os.close(_own_fds[0])
    _own_fds.clear()


os.register_at_fork(after_in_child=_forget_own_fds)


def _resolved_by_kernel(absolute: str) -> str | None:
    """``realpath`` of a path that exists, as the kernel resolved it: one ``open`` with
    ``O_PATH`` (no I/O, no side effect, nothing read) and one ``readlink`` of its descriptor
    (in ``/proc/self/fd``, held open), where ``realpath`` makes an ``lstat`` per component.
    None when the path does not open (missing, a loop, a file used as a directory), when the
    descriptor's name is not a plain absolute path (no ``/proc``, a deleted or unreachable
    file) or on a system without ``O_PATH``: then ``realpath``'s own walk decides, as it always
    did. A test holds the two equal on trees of symlinks. Under a concurrent rename the name is
    the one the file has just after it was reached (where it now is), as ``realpath`` gives a
    name it had just before: either way the executor opens the very name judged and refuses a
    change since."""
    if _O_PATH is None:
        return None
    table = _own_fds_dir()
    if table < 0:
        return None
    try:
        fd = os.open(absolute, _O_PATH | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        found = os.readlink(str(fd), dir_fd=table)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not found.startswith("/") or found.endswith(" (deleted)"):
        return None
    return found


# --------------------------------------------------------------------------- globs


def _segment_regex(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (end := class_end(segment, i)) > 0:
            out.append(class_pattern(segment[i + 1 : end]))
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def class_pattern(body: str) -> str:
    """A regex class for a glob class body; every member is escaped, and "/" never matches."""
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    members: list[str] = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            members.append(f"{re.escape(body[i])}-{re.escape(body[i + 2])}")
            i += 3
        else:
            members.append(re.escape(body[i]) if body[i] != "-" else "\\-")
            i += 1
    return f"[^/{''.join(members)}]" if negate else f"(?!/)[{''.join(members)}]"


def class_end(segment: str, start: int) -> int:
    """Index of the ``]`` closing a class opened at ``start``, or -1 if it is a literal ``[``."""
    i = start + 1
    if i < len(segment) and segment[i] in "!^":
        i += 1
    if i < len(segment) and segment[i] == "]":
        i += 1  # a leading "]" is a member, as in fnmatch
    end = segment.find("]", i)
    return end


class _Root(NamedTuple):
    """Where a glob's literal root was written and where it leads today."""

    anchor: str  # the real directory a relative or ~ root was written against; "/" if absolute
    lexical: str  # the written root joined to the anchor, normalised without the filesystem
    real: str  # the written root through realpath (symlinks, then ".."), existing or not
    rest: list[str]  # the segments from the first wildcard on


def _glob_root(pattern: str, working_dir: str) -> _Root:
    base, tail = _anchor(pattern, working_dir)
    segments = [s for s in tail.split("/") if s]
    split = next((n for n, s in enumerate(segments) if _GLOB_CHARS & set(s)), len(segments))
    anchor = _resolve(pattern, base)
    joined = os.path.join(anchor, *segments[:split])
    return _Root(anchor, os.path.normpath(joined), _resolve(pattern, joined), segments[split:])


def _escapes(root: _Root) -> bool:
    """Whether a symlink moves the root somewhere it was not written.

    An absolute root escapes whenever its real location differs from its written one. A
    relative or ``~`` root may pass through symlinks that stay within the directory it was
    written against (``./current -> ./releases/v2``), and escapes when it leaves it.
    """
    if root.real == root.lexical:
        return False
    if root.anchor == "/":
        return True
    return not (root.real == root.anchor or root.real.startswith(root.anchor + "/"))


def root_escape(pattern: str, base: str, *, follow: Collection[str] = ()) -> str | None:
    """Why the literal root of ``pattern`` does not stay where it was written, or None.

    The root is the part before the first wildcard; a relative one is written against ``base``
    (the kernel's working directory), ``~`` against the home directory. It escapes when a
    symlink on the way leads it out of that directory (for absolute roots: anywhere but the
    written place). A root that does not exist yet is judged by its existing part, so
    ``./data/new/**`` with ``./data -> /etc`` escapes too. Patterns listed, as written, in
    ``follow`` are allowed to lead out. A pattern that cannot be made absolute is reported
    with the reason it cannot.
    """
    if pattern in follow:
        return None
    try:
        root = _glob_root(pattern, base)
    except PathRejected as exc:
        return f"path pattern {pattern!r} cannot be used: {exc.reason}"
    if not _escapes(root):
        return None
    outside = "" if root.anchor == "/" else f", outside {root.anchor}"
    return (f"the root of {pattern!r} ({root.lexical}) leads through a symlink to "
            f"{root.real}{outside}; write the real location, or list the pattern under "
            f"follow_symlinks to allow it")


@functools.lru_cache(maxsize=4096)
def compile_glob(pattern: str, working_dir: str, follow: bool = False) -> Glob:
    """Compile ``pattern`` (relative ones against ``working_dir``, ``~`` as home) to a ``Glob``.

    Candidate paths are judged in their real form, so the root is anchored at its real
    location when symlinks keep it where it was written (``/tmp/x/**`` with a real ``/tmp``,
    ``./current/**`` with ``./current -> ./releases/v2``) or when ``follow`` allows it to lead
    out; otherwise at its written (lexical) location, so a symlink that leads the root out,
    made before or after load, moves no grant: paths through it resolve elsewhere and miss.
    The anchor is fixed at first compilation (cached), so later symlinks cannot move it.
    Raises ``PathRejected`` for a pattern that cannot be made absolute or holds ``..`` after a
    wildcard (which would make the glob's reach depend on the tree it matches).
    """
    found = _glob_root(pattern, working_dir)
    rest = found.rest
    if ".." in rest or "." in rest:
        raise PathRejected(f"glob {pattern!r} has '.' or '..' after a wildcard")
    root = found.real if follow or not _escapes(found) else found.lexical
    regex = [re.escape(root) if root != "/" else ""]
    for segment in rest:
        regex.append("(?:/[^/]+)*" if segment == "**" else "/" + _segment_regex(segment))
    if root == "/" and all(s == "**" for s in rest):
        regex.append("|/")  # the filesystem root itself, which has no segment to match
    try:
        compiled = compile_policy_pattern("".join(regex), "fullmatch", max_length=None)
    except PatternError as exc:
        raise PathRejected(f"glob {pattern!r} is malformed: {exc}") from exc
    return Glob(pattern=pattern, root=root, _regex=compiled)


# --------------------------------------------------------------------------- finding paths


def is_path_name(name: str, extra: Iterable[str]) -> bool:
    """Whether a parameter called ``name`` holds paths: a path name, or one of ``extra``."""
    return _is_path_name(name, frozenset(e.lower() for e in extra))


def _is_path_name(name: str, extra: frozenset[str]) -> bool:
    lowered = name.lower()
    return lowered in PATH_PARAM_NAMES or lowered in extra or lowered.endswith(_PATH_SUFFIXES)


def _intent_of(name: str, default: Intent) -> Intent:
    lowered = name.lower()
    if lowered in _WRITE_NAMES or lowered.startswith(_WRITE_PREFIXES):
        return "write"
    if lowered in _READ_NAMES:
        return "read"
    return default


def _looks_like_path(text: str) -> bool:
    """Whether free text is clearly a path: absolute, ``~``, ``file:``, ``./`` or ``../``."""
    return (
        text.startswith(("/", "~/", "./", "../"))
        or text in ("~", ".", "..")
        or text[:5].lower() == "file:"
    )


def _as_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return os.fsdecode(value)
    if isinstance(value, os.PathLike):
        return os.fsdecode(os.fspath(value))
    return None


class _Finder:
    """One walk over a call's parameters; ``name`` is the nearest enclosing dict key.

    ``top`` is the call's own parameter the value sits under: a declared role is looked up
    by it, so ``{"opts": {"dest": ...}}`` takes the role declared for ``opts``.
    """

    def __init__(self, extra: frozenset[str], default_intent: Intent,
                 roles: Mapping[str, Intent] | None) -> None:
        self.extra = extra
        self.default_intent = default_intent
        self.roles = roles
        self.found: list[PathArg] = []

    def walk(self, value: Any, key: str, name: str, depth: int, top: str = "") -> None:
        if depth > _MAX_DEPTH:
            raise PathRejected(f"parameters nest deeper than {_MAX_DEPTH} levels at {key!r}")
        if isinstance(value, str):  # the common case first: ABC checks below are slower
            self.visit(value, key, name, top)
        elif isinstance(value, dict | Mapping):
            for raw_name, child in value.items():
                child_name = str(raw_name)
                child_key = f"{key}.{child_name}" if key else child_name
                self.walk(child, child_key, child_name, depth + 1, top or child_name)
        elif isinstance(value, list | tuple | set | frozenset):
            for index, child in enumerate(value):
                self.walk(child, f"{key}[{index}]", name, depth + 1, top)
        elif (text := _as_text(value)) is not None:
            self.visit(text, key, name, top)

    def intent(self, name: str, top: str) -> Intent:
        if self.roles is None:
            return _intent_of(name, self.default_intent)
        return self.roles.get(top, self.default_intent)

    def visit(self, text: str, key: str, name: str, top: str) -> None:
        intent = self.intent(name, top)
        stripped = text.strip()
        named = bool(name) and _is_path_name(name, self.extra)
        # Free text is a path only when it is one line shaped like a path: code or prose that
        # starts with "/" on some line is content, not something a tool opens.
        one_line = "\n" not in stripped and "\r" not in stripped
        if not named and not (one_line and _looks_like_path(stripped)):
            return
        if text:
            self.found.append(PathArg(key, text, intent))
        # A tool that strips its input would open " /etc/passwd" as "/etc/passwd": check both.
        if stripped and stripped != text:
            self.found.append(PathArg(key, stripped, intent))


def path_arguments(
    parameters: Mapping[str, Any],
    extra_path_params: Iterable[str] = (),
    default_intent: Intent = "read",
    *,
    roles: Mapping[str, Intent] | None = None,
) -> list[PathArg]:
    """Every path in ``parameters``, nested ones included, with its key path and intent.

    A string is a path when it is absolute, starts with ``~/``, ``./``, ``../`` or ``file:``, or is
    the value of a path-named parameter (``PATH_PARAM_NAMES``, names ending in ``_path``,
    ``_file``, ``_dir`` and their plurals, plus ``extra_path_params`` and the keys of
    ``roles``), even when relative; free text that spans lines is never a path. A value padded
    with whitespace is reported twice, as written and stripped. Items of a list take the name
    of the key holding the list.

    With ``roles`` (declared per parameter) a path takes the role of the call's parameter it
    sits under, and ``default_intent`` when that parameter has none: nothing is guessed.
    Without, the intent is guessed from names: "write" for write-named keys (``dest``,
    ``output``, ``target``, names starting ``write``, ``out``, ``dest`` or ``save``), "read"
    for source-named keys (``src``, ``source``, ``input``) and ``default_intent`` otherwise.
    Raises ``PathRejected`` when the parameters nest deeper than the walk will follow.
    """
    names = [*extra_path_params, *(roles or ())]
    finder = _Finder(frozenset(p.lower() for p in names), default_intent, roles)
    finder.walk(parameters, "", "", 0)
    return finder.found


def canonical_parameters(
    parameters: Mapping[str, Any],
    working_dir: str,
    extra_path_params: Iterable[str] = (),
    *,
    shaped: bool = False,
    resolved: set[str] | None = None,
) -> dict[str, Any]:
    """A copy of ``parameters`` with the value of every path-named parameter made canonical.

    This is the form to hand the executor, so the file it opens is the file that was checked.
    Path-shaped free text under other names is checked by ``path_arguments`` and left as
    written here (it may be prose an executor never opens) unless ``shaped``: then it is made
    canonical too, for code that may open any string it is given (in-process tools), so a
    relative ``./x`` cannot be checked against ``working_dir`` and opened against another
    directory. Lists, tuples and sets are rebuilt (sets as sets). Each canonical form made is
    added to ``resolved`` when given (``check_paths`` need not resolve it again). Raises
    ``PathRejected`` like ``canonical`` and for deep nesting.
    """
    extra = frozenset(p.lower() for p in extra_path_params)
    rebuilt: dict[str, Any] = _Rebuild(working_dir, extra, shaped, resolved).value(
        parameters, "", 0)
    return rebuilt


class _Rebuild:
    """``canonical_parameters``' walk. (A class, not a nested function that calls itself: such
    a function and its closure make a reference cycle on every call, left to the collector.)"""

    __slots__ = ("extra", "resolved", "shaped", "working_dir")

    def __init__(self, working_dir: str, extra: frozenset[str], shaped: bool,
                 resolved: set[str] | None) -> None:
        self.working_dir = working_dir
        self.extra = extra
        self.shaped = shaped
        self.resolved = resolved

    def value(self, value: Any, name: str, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise PathRejected(f"parameters nest deeper than {_MAX_DEPTH} levels")
        if isinstance(value, Mapping):
            return {k: self.value(v, str(k), depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return type(value)(self.value(v, name, depth + 1) for v in value)
        text = _as_text(value)
        if text is None:
            return value
        if (name and _is_path_name(name, self.extra)) or (
                self.shaped and "\n" not in (stripped := text.strip()) and "\r" not in stripped
                and _looks_like_path(stripped)):
            made = canonical(text, self.working_dir)
            if self.resolved is not None:
                self.resolved.add(made)
            return made
        return value


# --------------------------------------------------------------------------- checking


def _allowed_by(
    resolved: str, patterns: Sequence[str], working_dir: str, follow: Collection[str]
) -> bool:
    for pattern in patterns:  # a loop, not ``any`` over a generator: this runs per path
        if compile_glob(pattern, working_dir, pattern in follow).matches(resolved):
            return True
    return False


def _check_one(
    arg: PathArg,
    allowed_read: Sequence[str] | None,
    allowed_write: Sequence[str] | None,
    working_dir: str,
    follow: Collection[str],
    *,
    resolved: Collection[str] = (),
) -> PathVerdict | None:
    if arg.intent == "write":
        if allowed_write is None:
            return None
        patterns: Sequence[str] = allowed_write
    else:
        if allowed_read is None:
            return None
        # Write globs admit reads too: a tool that may write an area reads back what it wrote
        # (append, edit in place), and the declared stance is one union of both lists.
        patterns = [*allowed_read, *(allowed_write or ())]
    try:
        if arg.value in resolved:  # made canonical by this decision already: its own form
            absolute = real = arg.value
        else:
            absolute = _absolute(arg.value, working_dir, normalize=False)
            real = _resolve(arg.value, absolute)
        if _allowed_by(real, patterns, working_dir, follow):
            return None
    except PathRejected as exc:
        return PathVerdict(arg.key, arg.value, None, arg.intent, exc.reason)
    purpose = " for writing" if arg.intent == "write" else ""
    if os.path.normpath(absolute) != real:
        reason = (
            f"path {arg.value} resolves through a symlink to {real}, outside the allowed "
            f"paths{purpose}"
        )
    elif arg.value != real:
        reason = f"path {real} (from {arg.value}) is outside the allowed paths{purpose}"
    else:
        reason = f"path {real} is outside the allowed paths{purpose}"
    return PathVerdict(arg.key, arg.value, real, arg.intent, reason)


def check_paths(
    args: Iterable[PathArg],
    allowed_read: Sequence[str] | None,
    allowed_write: Sequence[str] | None,
    working_dir: str,
    follow: Collection[str] = (),
    *,
    resolved: Collection[str] = (),
) -> PathVerdict | None:
    """``None`` when every path argument is allowed, else the first offending one with a reason.

    A glob list of ``None`` is unspecified and not checked; an empty list allows nothing. Writes
    need a write glob; reads are allowed by read globs and by write globs. Any failure to
    canonicalise a path or compile a glob denies (fail closed). Globs listed, as written, in
    ``follow`` keep their root's real location even when a symlink leads it out (see
    ``compile_glob``). ``resolved`` holds canonical forms made in this decision (by
    ``canonical_parameters``): an argument equal to one is not resolved again.
    """
    for arg in args:
        verdict = _check_one(arg, allowed_read, allowed_write, working_dir, follow,
                             resolved=resolved)
        if verdict is not None:
            return verdict
    return None
