"""Text read from files: bytes to text naming the first byte that is not UTF-8, and text to
lines (one definition of each, for every loader)."""

from __future__ import annotations

__all__ = ["NotUtf8Error", "decode_utf8", "lines_of"]


class NotUtf8Error(ValueError):
    """Bytes that are not UTF-8; ``line`` and ``column`` (1-based, the column counted in bytes
    of that line) name the first bad byte."""

    def __init__(self, line: int, column: int) -> None:
        super().__init__(f"not valid UTF-8 at line {line}, column {column}")
        self.line = line
        self.column = column


def decode_utf8(data: bytes) -> str:
    """``data`` as text (a leading byte-order mark dropped); raises ``NotUtf8Error``."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise NotUtf8Error(line, column) from exc


def lines_of(text: str) -> list[str]:
    """The lines of ``text`` as files count them: split at ``\n`` only (a ``\r`` before it
    dropped). ``str.splitlines`` also splits at U+2028, U+0085 and other characters a JSON
    string or a sentence may hold, which would cut a line in two and misnumber the rest."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    return lines
