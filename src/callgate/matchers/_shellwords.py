"""Shell words: the one shell-metacharacter scanner, and a bounded, linear word splitter.

``shell_construct`` finds the first thing a POSIX shell would act on in a command string that is
meant to run as a plain argv: a ``;``, ``&``, ``|``, ``<``, ``>``, ``(``, ``)``, ``{``, ``}``,
``$`` or backtick outside quotes (``$`` and backticks also inside double quotes, where a shell
still expands them), a ``~`` a shell would expand, a ``#`` that would start a comment, and any
newline, carriage return, NUL or other control character, even quoted. Single-quoted and
backslash-escaped characters are literal in both readings. Glob characters are not constructs
here: a command that runs as an argv has nothing to expand them.

``split_words`` splits a string that passed the scan the way ``shlex.split(posix=True)`` does,
in one pass (``shlex`` grows a token one character at a time and takes quadratic time on a long
one). Strings longer than ``MAX_COMMAND_CHARS`` are refused before either runs.
"""

from __future__ import annotations

from callgate.abstraction._shell import MAX_COMMAND_CHARS

__all__ = ["MAX_COMMAND_CHARS", "shell_construct", "split_words"]

_ALWAYS_BAD = {"\n": "\\n", "\r": "\\r", "\x00": "\\0"}
_UNQUOTED_META = frozenset(";&|<>(){}$`")
_TWO_CHAR = ("&&", "||", "$(", ">>", "<<", ">&", "<&", "&>", "|&")
_WHITESPACE = frozenset(" \t\r\n")


def _scan_unquoted(command: str) -> str | None:
    """The first shell construct a shell would act on, as written, or ``None``."""
    quote: str | None = None
    previous = " "  # the character before, as the shell saw it ("" when it was quoted)
    i = 0
    while i < len(command):
        char = command[i]
        if quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            if quote == '"' and command[i + 1 : i + 2] in ("$", "`"):
                return command[i + 1]  # shlex keeps this backslash, a shell drops it
            i += 1  # the escaped character is literal
        elif quote == '"':
            if char == '"':
                quote = None
            elif char in "$`":
                return command[i : i + 2] if command[i : i + 2] == "$(" else char
        elif char in "'\"":
            quote = char
        elif char in _UNQUOTED_META:
            pair = command[i : i + 2]
            return pair if pair in _TWO_CHAR else char
        elif char in "~#" and (previous.isspace() or (char == "~" and previous in ("=", ":"))):
            return char
        previous = char if quote is None else ""
        i += 1
    return None


def shell_construct(command: str) -> str | None:
    """The first shell construct in ``command`` as written (``;``, ``$(``, ``\\n`` …), or None.

    Control characters are shown escaped (``\\x1b``): they split nothing in either reading but
    hide what a reviewer of the audit log would read.
    """
    for char, shown in _ALWAYS_BAD.items():
        if char in command:
            return shown
    for char in command:
        if (ord(char) < 0x20 and char != "\t") or ord(char) == 0x7F:
            return f"\\x{ord(char):02x}"
    return _scan_unquoted(command)


def split_words(command: str) -> tuple[str, ...]:
    """The words of ``command`` as ``shlex.split(command, posix=True)`` reads them.

    Raises ``ValueError`` with ``shlex``'s messages for an unclosed quote or a trailing
    backslash, and for a string longer than ``MAX_COMMAND_CHARS``.
    """
    if len(command) > MAX_COMMAND_CHARS:
        raise ValueError(f"command longer than {MAX_COMMAND_CHARS} characters")
    words: list[str] = []
    parts: list[str] = []
    in_word = False
    i, end = 0, len(command)
    while i < end:
        char = command[i]
        if char in _WHITESPACE:
            if in_word:
                words.append("".join(parts))
                parts, in_word = [], False
            i += 1
            continue
        in_word = True
        if char == "\\":
            if i + 1 >= end:
                raise ValueError("No escaped character")
            parts.append(command[i + 1])
            i += 2
        elif char in "'\"":
            i = _quoted(command, i, parts)
        else:
            parts.append(char)
            i += 1
    if in_word:
        words.append("".join(parts))
    return tuple(words)


def _quoted(command: str, start: int, parts: list[str]) -> int:
    """Append the text of the quoted span opening at ``start``; return the index after it."""
    if command[start] == "'":
        close = command.find("'", start + 1)
        if close < 0:
            raise ValueError("No closing quotation")
        parts.append(command[start + 1 : close])
        return close + 1
    i = start + 1
    next_quote = next_escape = -2  # -2: not looked up yet; each is searched forward once
    while True:
        if next_quote < i and next_quote != -1:
            next_quote = command.find('"', i)
        if next_escape < i and next_escape != -1:
            next_escape = command.find("\\", i)
        if next_escape < 0 or 0 <= next_quote < next_escape:
            if next_quote < 0:
                raise ValueError("No closing quotation")
            parts.append(command[i:next_quote])
            return next_quote + 1
        parts.append(command[i:next_escape])
        if next_escape + 1 >= len(command):
            raise ValueError("No escaped character")
        escaped = command[next_escape + 1]
        parts.append(escaped if escaped in '"\\' else "\\" + escaped)
        i = next_escape + 2
