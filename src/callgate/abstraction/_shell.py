"""Shell command lines to simple commands, with a real parser (tree-sitter-bash).

Every simple command of a line becomes one ``ShellCommand``: the ones joined by ``;``, ``&&``,
``||`` and pipes, the ones inside subshells, groups, loops and conditionals, and the ones inside
command and process substitutions (which run first, so they come first). Wrappers such as
``sudo``, ``env`` or ``timeout`` are peeled off, and ``bash -c STRING`` parses STRING again.

Bounds keep the cost predictable on hostile input: the line length, the nesting depth of
substitutions and ``-c`` strings, and the number of commands per line are capped; going over a
cap, like a syntax error, yields commands carrying ``parse_error`` instead of raising.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from callgate.abstraction._catalog import Catalog, default_catalog
from callgate.abstraction._runners import Changing, Expanding, runs_command, runs_environment

if TYPE_CHECKING:  # tree-sitter is the abstraction extra, imported where a parser is made
    from tree_sitter import Node, Parser

#: What a shell line is, when the parser (the ``abstraction`` extra) is not installed.
NO_PARSER = ("the shell parser is not installed (the 'abstraction' extra: tree-sitter-bash), "
             "so no shell line can be read")

#: Longest command line parsed; longer lines become a ``parse_error`` command.
MAX_COMMAND_CHARS = 100_000
#: Deepest nesting of syntax nodes, substitutions and ``sh -c`` strings followed.
MAX_DEPTH = 64
#: Deepest nesting of ``sh -c`` strings followed (each level is a full re-parse).
MAX_SHELL_DEPTH = 6
#: Most wrappers (``env``, ``timeout`` …) peeled off one command, ``sh -c`` levels included.
MAX_WRAPPERS = 64
#: Most simple commands read from one line.
MAX_COMMANDS = 1_000
#: Longest here-document or here-string kept as ``stdin``.
MAX_STDIN_CHARS = 65_536

_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)
_DQ_UNESCAPE = re.compile(r"\\([\"\\$`\n])")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_EXPANSIONS = frozenset({"simple_expansion", "expansion", "command_substitution"})
_LITERAL = frozenset({"raw_string", "ansi_c_string", "number", "string_content"})
_SPECIAL = frozenset("*?[{")
_IFS_OR_GLOB = re.compile(r"[\s*?\[{]")
_local = threading.local()



@dataclass(frozen=True, slots=True)
class Redirect:
    """A redirection: its operator (``>``, ``>>``, ``<``, ``&>`` …), target and descriptor."""

    op: str
    target: str
    fd: str | None = None


@dataclass(frozen=True, slots=True)
class ShellCommand:
    """One simple command of a shell line, after peeling wrappers.

    ``words`` start with the program as written; ``wrappers`` lists what was peeled (``sudo``,
    ``bash -c`` …); ``dynamic`` says a word holds an expansion the parser could not resolve;
    ``parse_error`` is set when the line (or the part holding this command) did not parse;
    ``runs_command`` says why the command, one of its wrappers or its environment makes a
    program run a command its words do not show (``git -c core.pager=…``, ``sed 1e…``).
    """

    words: tuple[str, ...]
    assignments: tuple[tuple[str, str], ...] = ()
    redirects: tuple[Redirect, ...] = ()
    wrappers: tuple[str, ...] = ()
    stdin: str | None = None
    piped_from: str | None = None
    dynamic: bool = False
    depth: int = 0
    parse_error: str | None = None
    runs_command: str | None = None

    @property
    def program(self) -> str:
        """The program's base name, or ``""`` for a bare assignment or a failed parse."""
        return (self.words[0].rsplit("/", 1)[-1] or self.words[0]) if self.words else ""


class _LimitError(Exception):
    """Internal: a bound was exceeded while walking the tree."""


def _crashes_parser(command: str) -> str | None:
    """Why ``command`` must not reach tree-sitter-bash, or None.

    The bash grammar's C code reads out of bounds (a crash, or worse, of the whole process) on
    some lines where a ``{`` is followed, anywhere later, by a character outside the Basic
    Multilingual Plane (four UTF-8 bytes). Such lines are refused as a parse error instead of
    parsed; they are rare in real commands (an emoji after a brace).
    """
    brace = command.find("{")
    if brace < 0:
        return None
    if any(ord(ch) > 0xFFFF for ch in command[brace + 1:]):
        return ("command has a '{' followed by a character outside the Basic Multilingual "
                "Plane, which the shell parser cannot read safely")
    return None


def thread_parser(name: str, language: Callable[[], object]) -> Parser:
    """A tree-sitter parser per thread and grammar (parsers are not safe to share)."""
    parser: Parser | None = getattr(_local, name, None)
    if parser is None:
        from tree_sitter import Language, Parser

        parser = Parser(Language(language()))
        setattr(_local, name, parser)
    return parser


def _parser() -> Parser:
    import tree_sitter_bash

    return thread_parser("bash", tree_sitter_bash.language)


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


class _Walker:
    """Walks one parse tree, collecting simple commands in execution order."""

    def __init__(self, source: bytes, depth: int, wrappers: tuple[str, ...], cat: Catalog):
        self.source = source
        self.depth = depth
        self.wrappers = wrappers
        self.catalog = cat
        self.env: dict[str, str] = {}
        self.once: dict[str, bool] = {}
        self.out: list[ShellCommand] = []

    # -- words -----------------------------------------------------------------------------
    def word(self, node: Node) -> tuple[str, bool]:
        """The value of a word node and whether it holds an unresolved expansion."""
        kind = node.type
        if kind == "word":
            return _UNESCAPE.sub(r"\1", _text(node)), False
        if kind == "raw_string":
            return _text(node)[1:-1], False
        if kind in ("string", "concatenation", "translated_string"):
            return self._joined(node)
        if kind == "ansi_c_string":
            return _ansi_c(_text(node)[2:-1]), False
        if kind in ("simple_expansion", "expansion"):
            name = _text(node).lstrip("$").strip("{}")
            if name in self.env:
                return self.env[name], False
            return _text(node), True
        if kind in ("number", "string_content", "heredoc_content"):
            return _text(node), False
        return _text(node), True

    def _joined(self, node: Node) -> tuple[str, bool]:
        quoted = node.type in ("string", "translated_string")
        start = node.start_byte + (2 if node.type == "translated_string" else int(quoted))
        end = node.end_byte - int(quoted)
        parts: list[str] = []
        dynamic = False
        for child in node.named_children:
            gap = self.source[start : child.start_byte].decode("utf-8", "replace")
            parts.append(_DQ_UNESCAPE.sub(r"\1", gap) if quoted else gap)
            if child.type == "string_content":
                value = _DQ_UNESCAPE.sub(r"\1", _text(child))
            else:
                value, dyn = self.word(child)
                dynamic = dynamic or dyn
            parts.append(value)
            start = child.end_byte
        if start < end:
            tail = self.source[start:end].decode("utf-8", "replace")
            parts.append(_DQ_UNESCAPE.sub(r"\1", tail) if quoted else tail)
        return "".join(parts), dynamic

    def _marked(self, node: Node, value: str) -> str:
        """``value`` as an ``Expanding`` word when the shell may turn ``node`` into words that
        start with ``-`` (or several words) the parser did not see, as a ``Changing`` one when
        the shell changes it in some other way, else as it is."""
        pieces = node.named_children if node.type == "concatenation" else [node]
        lead: str | None = ""  # the first character, "" while unknown, None when not literal
        special = False
        for piece in pieces:
            first, piece_special = self._piece(piece)
            special = special or piece_special
            if first == "?split":
                return Expanding(value)
            if lead == "":
                lead = first
        if lead is None or (special and lead == "-"):
            return Expanding(value)
        return Changing(value) if special else value

    def _piece(self, node: Node) -> tuple[str | None, bool]:
        """(first character, or None when it is not literal, or "" when empty; whether the
        piece holds a glob, brace or expansion); ``"?split"`` for an unquoted expansion that
        the shell splits into words."""
        kind = node.type
        if kind == "word":
            text = _text(node)
            special = any(ch in _SPECIAL for ch in re.sub(r"\\.", "", text, flags=re.DOTALL))
            if not text:
                return "", special
            if text[0] == "\\":
                return text[1:2], special
            return (None if text[0] in _SPECIAL else text[0]), special
        if kind in _LITERAL:
            value = self.word(node)[0]
            return value[:1], False
        if kind in ("string", "translated_string"):
            value, dynamic = self._joined(node)
            children = [c for c in node.named_children if c.type != "string_content"]
            opens = node.start_byte + (2 if kind == "translated_string" else 1)
            if children and children[0].start_byte == opens and self.word(children[0])[1]:
                return None, True
            return value[:1], dynamic
        if kind in _EXPANSIONS:
            value, dynamic = self.word(node)
            if dynamic or self._splits(value):
                return "?split", True
            return value[:1], False
        return None, True

    def _set_once(self, name: str) -> bool:
        """Whether ``name`` appears only once in the line outside ``$name`` / ``${name}``."""
        once = self.once.get(name)
        if once is None:
            pattern = rb"(?<![\w${])" + re.escape(name.encode()) + rb"(?!\w)"
            once = self.once[name] = len(re.findall(pattern, self.source)) <= 1
        return once

    def _splits(self, value: str) -> bool:
        """Whether the shell may split an unquoted expansion of ``value`` into several words
        (blanks, or anything once the line sets ``IFS``) or glob it."""
        return bool(_IFS_OR_GLOB.search(value)) or b"IFS" in self.source

    # -- traversal -------------------------------------------------------------------------
    def visit(self, node: Node, level: int, redirects: tuple[Redirect, ...] = ()) -> None:
        """Collect the commands under ``node``; ``redirects`` apply to all of them."""
        if level > MAX_DEPTH:
            raise _LimitError(f"nesting deeper than {MAX_DEPTH} levels")
        kind = node.type
        if kind == "list":
            for child in _flatten_list(node):
                self.visit(child, level + 1, redirects)
        elif kind == "pipeline":
            self._pipeline(node, level, redirects)
        elif kind == "command":
            self._command(node, level, redirects)
        elif kind == "redirected_statement":
            self._redirected(node, level, redirects)
        elif kind in ("variable_assignment", "declaration_command"):
            self._assignment(node, level)
        elif kind in _SUBSTITUTIONS:
            self._substitution(node, level)
        else:
            for child in node.named_children:
                self.visit(child, level + 1, redirects)

    def _redirected(self, node: Node, level: int, redirects: tuple[Redirect, ...]) -> None:
        own: list[Redirect] = []
        trailing: list[Node] = []
        for item in node.children_by_field_name("redirect"):
            own.append(self._redirect(item))
            if item.type == "heredoc_redirect":
                # ``cat <<EOF > f`` and ``cat <<EOF | grep x``: the rest of the line sits
                # inside the here-document node.
                for child in item.named_children:
                    if child.type.endswith("_redirect"):
                        own.append(self._redirect(child))
                    elif child.type not in ("heredoc_start", "heredoc_body", "heredoc_end"):
                        trailing.append(child)
        body = node.child_by_field_name("body")
        if body is not None:
            self.visit(body, level + 1, redirects + tuple(own))
        previous = self.out[-1].program if self.out else None
        for child in trailing:
            before = len(self.out)
            self.visit(child, level + 1, redirects)
            if len(self.out) > before and previous:
                self.out[before] = replace(self.out[before], piped_from=previous)

    def _pipeline(self, node: Node, level: int, redirects: tuple[Redirect, ...]) -> None:
        previous: str | None = None
        for child in node.named_children:
            before = len(self.out)
            self.visit(child, level + 1, redirects)
            if previous is not None and len(self.out) > before:
                self.out[before] = replace(self.out[before], piped_from=previous)
            if len(self.out) > before:
                previous = self.out[-1].program

    def _substitution(self, node: Node, level: int) -> None:
        for child in node.named_children:
            self.visit(child, level + 1)

    def _nested(self, node: Node, level: int) -> None:
        """Visit substitutions inside a word (they run before the command that holds them)."""
        stack = [node]
        while stack:
            current = stack.pop()
            if current.type in _SUBSTITUTIONS:
                self._substitution(current, level + 1)
            else:
                stack.extend(reversed(current.named_children))

    def _assignment(self, node: Node, level: int) -> None:
        pairs: list[tuple[str, str]] = []
        assigns = [node] if node.type == "variable_assignment" else node.named_children
        for item in assigns:
            self._nested(item, level)
            name_node = item.child_by_field_name("name")
            value_node = item.child_by_field_name("value")
            if item.type != "variable_assignment" or name_node is None:
                continue
            value, dynamic = self.word(value_node) if value_node is not None else ("", False)
            name = _text(name_node)
            pairs.append((name, value))
            appends = any(c.type == "+=" for c in item.children)
            if dynamic or appends or not self._set_once(name):
                # Resolved only when this is the one place the line names the variable: a
                # second assignment (a branch, a loop, +=, read, for, printf -v …) makes the
                # value depend on which runs, so it stays an expansion.
                self.env.pop(name, None)
            else:
                self.env[name] = value
        words = (_text(node.children[0]),) if node.type == "declaration_command" else ()
        self._emit(ShellCommand(words=words, assignments=tuple(pairs),
                                runs_command=runs_environment([n for n, _ in pairs])))

    def _redirect(self, node: Node) -> Redirect:
        fd_node = next((c for c in node.named_children if c.type == "file_descriptor"), None)
        fd = _text(fd_node) if fd_node is not None else None
        if node.type == "heredoc_redirect":
            body = next((c for c in node.named_children if c.type == "heredoc_body"), None)
            self._nested(node, 0)
            return Redirect("<<", _text(body)[:MAX_STDIN_CHARS] if body is not None else "", fd)
        if node.type == "herestring_redirect":
            here = node.named_children[-1] if node.named_children else node
            return Redirect("<<<", self.word(here)[0][:MAX_STDIN_CHARS], fd)
        dest = node.child_by_field_name("destination")
        op = next((_text(c) for c in node.children if not c.is_named), ">")
        return Redirect(op, self.word(dest)[0] if dest is not None else "", fd)

    def _command(self, node: Node, level: int, redirects: tuple[Redirect, ...]) -> None:
        words: list[str] = []
        pairs: list[tuple[str, str]] = []
        own: list[Redirect] = []
        dynamic = False
        for child in node.named_children:
            self._nested(child, level)
            if child.type == "variable_assignment":
                name_node = child.child_by_field_name("name")
                value_node = child.child_by_field_name("value")
                text = self.word(value_node)[0] if value_node is not None else ""
                pairs.append((_text(name_node) if name_node is not None else "", text))
            elif child.type.endswith("_redirect"):
                own.append(self._redirect(child))
            else:
                word_node = child.named_children[0] if child.type == "command_name" else child
                value, dyn = self.word(word_node)
                words.append(self._marked(word_node, value))
                dynamic = dynamic or dyn
        all_redirects = tuple(own) + redirects
        stdin = next((r.target for r in all_redirects if r.op in ("<<", "<<<")), None)
        base = ShellCommand(
            words=tuple(words),
            assignments=tuple(pairs),
            redirects=tuple(r for r in all_redirects if r.op not in ("<<", "<<<")),
            wrappers=self.wrappers,
            stdin=stdin,
            dynamic=dynamic,
            depth=self.depth,
        )
        for command in peel(base, self.catalog):
            self._emit(command)

    def _emit(self, command: ShellCommand) -> None:
        if len(self.out) >= MAX_COMMANDS:
            raise _LimitError(f"more than {MAX_COMMANDS} simple commands")
        self.out.append(command)


def _flatten_list(node: Node) -> list[Node]:
    """The commands of a left-nested ``a && b || c`` list, without recursing on its spine."""
    items: list[Node] = []
    current: Node | None = node
    while current is not None and current.type == "list":
        named = current.named_children
        items.extend(reversed(named[1:]))
        current = named[0] if named else None
    if current is not None:
        items.append(current)
    return list(reversed(items))


_ANSI_C_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n",
                  "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
_ANSI_C_ESCAPE = re.compile(
    r"\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})|U([0-9A-Fa-f]{1,8})"
    r"|c(.)|(.))", re.DOTALL)


def _ansi_c_char(match: re.Match[str]) -> str:
    octal, hex2, hex4, hex8, control, other = match.groups()
    if octal is not None:
        return chr(int(octal, 8) & 0xFF)
    if hex2 is not None:
        return chr(int(hex2, 16))
    if hex4 is not None or hex8 is not None:
        code = int(hex4 or hex8, 16)
        return chr(code) if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else "\ufffd"
    if control is not None:
        return "\x7f" if control == "?" else chr(ord(control) & 0x1F)
    return _ANSI_C_SIMPLE.get(other, match.group(0))


def _ansi_c(body: str) -> str:
    """The value bash gives ``$'body'``: every escape it decodes (``\\x2d`` is ``-``, octal,
    ``\\u``, ``\\c``), cut at the first NUL, where bash ends the string."""
    return _ANSI_C_ESCAPE.sub(_ansi_c_char, body).split("\x00", 1)[0]


def _wrapped_start(words: tuple[str, ...], cat: Catalog) -> tuple[int, tuple[tuple[str, str], ...]]:
    """Where the wrapped command starts in a wrapper's words (0 when there is none)."""
    spec = cat.wrappers[words[0].rsplit("/", 1)[-1]]
    if spec.inert_flags.intersection(words[1:]):
        return 0, ()
    i = 1
    pairs: list[tuple[str, str]] = []
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        if words[i] == "--":
            i += 1
            break
        i += 2 if _takes_next(words[i], spec.value_flags) else 1
    # env and sudo take any word holding "=" as an assignment, not only a shell name
    # (``env 'BASH_FUNC_ls%%=() { id; }' bash -c ls`` defines a function bash imports).
    while spec.assignments and i < len(words) and "=" in words[i][1:]:
        name, _, value = words[i].partition("=")
        pairs.append((name, value))
        i += 1
    i += spec.skip_positionals
    return (i if i < len(words) else 0), tuple(pairs)


def _takes_next(word: str, value_flags: frozenset[str]) -> bool:
    """Whether a wrapper's option ``word`` takes the next word as its value, read the way
    getopt reads it: ``--name`` and any GNU abbreviation of a long value option (``env --uns
    NAME``), and a short cluster whose last letter takes a value (``env -iu NAME``)."""
    if word.startswith("--"):
        return "=" not in word and any(f.startswith(word) for f in value_flags
                                       if f.startswith("--"))
    for j, char in enumerate(word[1:], start=1):
        if "-" + char in value_flags:
            return j == len(word) - 1
    return False


def _shell_string(words: tuple[str, ...]) -> str | None:
    """The STRING of ``sh -c STRING`` (also ``-lc``, ``-ec`` …), or None when not a -c call."""
    for i, word in enumerate(words[1:], start=1):
        if word.startswith("--"):
            continue
        if not word.startswith("-"):
            return None
        if "c" in word[1:]:
            return words[i + 1] if i + 1 < len(words) else ""
    return None


def peel(command: ShellCommand, cat: Catalog | None = None) -> list[ShellCommand]:
    """Peel wrappers off a command; ``sh -c`` strings are parsed again (depth-bounded)."""
    catalog = cat or default_catalog()
    current = _judged(command, command.words, catalog)
    while current.words:
        program = current.program
        if program in catalog.wrappers and len(current.wrappers) >= MAX_WRAPPERS:
            # each level re-reads the rest of the words: unbounded nesting is quadratic
            return [replace(current, parse_error=f"more than {MAX_WRAPPERS} wrappers nested")]
        if program in catalog.wrappers:
            start, pairs = _wrapped_start(current.words, catalog)
            if start == 0:
                break
            current = _judged(replace(
                current,
                words=current.words[start:],
                wrappers=(*current.wrappers, program),
                assignments=current.assignments + pairs,
            ), current.words[start:], catalog)
            continue
        if program in catalog.shells:
            script = _shell_string(current.words)
            if script is not None:
                inner = parse_commands(
                    script, depth=current.depth + 1, wrappers=(*current.wrappers, f"{program} -c")
                )
                return [replace(c, redirects=c.redirects + current.redirects,
                                runs_command=c.runs_command or current.runs_command)
                        for c in inner]
        break
    return [current, *_find_exec(current)]


def _judged(command: ShellCommand, words: tuple[str, ...], cat: Catalog) -> ShellCommand:
    """``command`` with ``runs_command`` set by ``words`` or its environment, if not set yet."""
    if command.runs_command is not None:
        return command
    found = runs_environment([name for name, _ in command.assignments])
    if found is None and words and isinstance(words[0], Changing):
        found = (f"program {words[0][:40]!r} is an expansion the shell makes when it runs, "
                 "so what it runs cannot be checked")
    if found is None and words:
        found = runs_command(words, None if cat is default_catalog() else cat)
    return command if found is None else replace(command, runs_command=found)


def _find_exec(command: ShellCommand) -> list[ShellCommand]:
    """``find … -exec CMD {} ;`` runs CMD: each such segment is a command of its own."""
    if command.program != "find":
        return []
    found: list[ShellCommand] = []
    words = command.words
    i = 0
    while i < len(words):
        if words[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            end = i + 1
            while end < len(words) and words[end] not in (";", "+", "\\;"):
                end += 1
            if end > i + 1:
                inner = ShellCommand(words=words[i + 1 : end], wrappers=(*command.wrappers, "find"))
                found.extend(peel(replace(inner, depth=command.depth + 1)))
            i = end
        i += 1
    return found


def parse_commands(
    command: str, *, depth: int = 0, wrappers: tuple[str, ...] = ()
) -> list[ShellCommand]:
    """The simple commands of a shell line, in execution order; never raises on bad input."""
    if depth > MAX_SHELL_DEPTH:
        return [ShellCommand(words=(), wrappers=wrappers, depth=depth,
                             parse_error=f"shell strings nested deeper than {MAX_SHELL_DEPTH}")]
    if len(command) > MAX_COMMAND_CHARS:
        return [ShellCommand(words=(), wrappers=wrappers, depth=depth,
                             parse_error=f"command longer than {MAX_COMMAND_CHARS} characters")]
    unsafe = _crashes_parser(command)
    if unsafe is not None:
        return [ShellCommand(words=(), wrappers=wrappers, depth=depth, parse_error=unsafe)]
    try:
        parser = _parser()
    except ImportError:  # fail closed: a line that cannot be read is a parse error
        return [ShellCommand(words=(), wrappers=wrappers, depth=depth, parse_error=NO_PARSER)]
    source = command.encode("utf-8", "replace")
    tree = parser.parse(source)
    walker = _Walker(source, depth, wrappers, default_catalog())
    error: str | None = None
    try:
        walker.visit(tree.root_node, 0)
    except _LimitError as exc:
        error = str(exc)
    except RecursionError:
        error = "command nested too deeply"
    if error is None and tree.root_node.has_error:
        error = _syntax_error(tree.root_node)
    if error is None and "\x00" in command:
        error = "command contains a NUL byte"
    commands = walker.out
    if error is not None:
        commands = [replace(c, parse_error=c.parse_error or error) for c in commands]
        if not any(c.words for c in commands):
            commands.append(
                ShellCommand(words=(), wrappers=wrappers, depth=depth, parse_error=error)
            )
    elif not commands and command.strip() and not _only_comments(tree.root_node):
        commands = [ShellCommand(words=(), wrappers=wrappers, depth=depth,
                                 parse_error="no command found")]
    return commands


def _only_comments(root: Node) -> bool:
    return all(child.type == "comment" for child in root.named_children)


def _syntax_error(root: Node) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            row, col = node.start_point
            what = f"missing {node.type}" if node.is_missing else "syntax error"
            return f"{what} at line {row + 1}, column {col + 1}"
        stack.extend(c for c in node.children if c.has_error or c.is_missing)
    return "syntax error"

