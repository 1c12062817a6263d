"""What a string can be read as: the encodings content is hidden in, undone within a budget.

An agent that must not send content X can send an encoding of X. Before fingerprints are looked
up, each parameter string is expanded into the forms it decodes to:

* percent escapes (``%41``, ``+``) and backslash escapes (``\\x41``, ``\\101``, ``\\u0041``);
* hex runs, either case, from both alignments (a stray hex digit in front hides nothing);
* base64 runs, standard or URL-safe, padded or not, wrapped over lines or cut up by spaces
  (whitespace is removed before runs are found), from all four alignments;
* each hex or base64 run read reversed, ROT13-ed, or both, before it is decoded
  (``rev | base64 -d``).

Decoding is applied again to what it produced, up to :data:`MAX_LAYERS` layers
(``base64(hex(x))``, a percent-escaped base64 string). A decoded run is kept only as its
printable stretches of :data:`MIN_PRINTABLE` or more characters: what the guards remember is
text, and a run decoded at the wrong alignment or direction is noise. The content itself being
reversed or ROT13-ed before it is encoded is matched by the store, which remembers those forms
too (see ``_store``).

Budget: the forms of one string may total :data:`BUDGET_FACTOR` times its length plus
:data:`BUDGET_SLACK` characters, and at most :data:`MAX_RUNS` runs of it are decoded. A string
that needs more is reported incomplete and the guards deny the call: fail closed. Ordinary
strings stay far below: a real base64 blob decodes to text at one alignment and in one
direction only, so it adds three quarters of its length.
"""

from __future__ import annotations

import binascii
import codecs
import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote_plus

#: Layers of encoding undone (``hex(base64(x))`` is two; a percent-escaped one three).
MAX_LAYERS = 3
#: Shortest printable stretch kept from a decoded run (the shortest value remembered alone).
MIN_PRINTABLE = 6
#: The forms of a string may total this many times its length ...
BUDGET_FACTOR = 8
#: ... plus this many characters.
BUDGET_SLACK = 1 << 16
#: Most strings decoded (in four directions each) while expanding one string.
MAX_DECODES = 1 << 14
#: Strings up to this length have their forms cached (a run repeats the same values often);
#: of longer ones, the last few.
CACHED_CHARS = 1024

_SPACE = re.compile(r"\s+")
# A base64 run as short as a 6-byte value encodes to; a hex run of 6 bytes.
_B64_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-"
_NOT_B64 = bytes(b for b in range(256) if b not in _B64_BYTES)
_NOT_HEX = bytes(b for b in range(256) if b not in b"0123456789abcdefABCDEF")
_ROT13 = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    b"NOPQRSTUVWXYZABCDEFGHIJKLMnopqrstuvwxyzabcdefghijklm")
_BACKSLASH = re.compile(r"\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|([0-7]{1,3}))")
# A stretch of printable ASCII (tab and line ends included) long enough to keep.
_STRETCH = re.compile(rb"[\t\n\r\x20-\x7e]{%d,}" % MIN_PRINTABLE)
_PADDING = (b"", b"=", b"==", b"===")
_URLSAFE = bytes.maketrans(b"-_", b"+/")


@dataclass(frozen=True, slots=True)
class Forms:
    """A string and what it decodes to; ``complete`` is False when the budget ran out."""

    texts: tuple[str, ...]
    complete: bool = True


def rot13(text: str) -> str:
    """``text`` with ASCII letters rotated by 13 places."""
    return codecs.encode(text, "rot13")


def decode(text: str) -> Forms:
    """``text`` and every form it decodes to, within the budget (see the module docstring)."""
    if len(text) <= CACHED_CHARS:
        return _decode_cached(text)
    return _decode_long(text)


def decode_all(texts: Iterable[str], *, max_chars: int) -> Forms:
    """The forms of every string in ``texts``; incomplete when any string ran out of budget
    or all the forms together exceed ``max_chars`` (what the store can scan for one call)."""
    out: list[str] = []
    total = 0
    for text in texts:
        forms = decode(text)
        out.extend(forms.texts)
        total += sum(len(t) for t in forms.texts)
        if not forms.complete or total > max_chars:
            return Forms(tuple(out), complete=False)
    return Forms(tuple(out))


@functools.lru_cache(maxsize=4096)
def _decode_cached(text: str) -> Forms:
    return _decode(text)


@functools.lru_cache(maxsize=4)
def _decode_long(text: str) -> Forms:
    # The guards of one call decode the same long strings in turn; a few are kept so they
    # are decoded once (at most a few times the kernel's 1 MiB parameter cap in memory).
    return _decode(text)


class _Budget:
    __slots__ = ("chars", "decodes")

    def __init__(self, text: str) -> None:
        self.chars = BUDGET_FACTOR * len(text) + BUDGET_SLACK
        self.decodes = MAX_DECODES

    @property
    def spent(self) -> bool:
        return self.chars < 0 or self.decodes < 0


def _decode(text: str) -> Forms:
    budget = _Budget(text)
    forms = {text: True}
    layer = [text]
    for _ in range(MAX_LAYERS):
        found: list[str] = []
        for form in layer:
            for child, further in _children(form, budget):
                if child not in forms:
                    forms[child] = further
                    budget.chars -= len(child)
                    if further:
                        found.append(child)
                if budget.spent:
                    return Forms(tuple(forms), complete=False)
        layer = found
        if not layer:
            break
    return Forms(tuple(forms))


def _children(form: str, budget: _Budget) -> Iterator[tuple[str, bool]]:
    """The forms one layer of decoding gives, each with whether to decode it further.

    Escapes undone, and every hex and base64 reading. A string whose only escapes are ``+``
    (a space in a query) is matched with spaces but not decoded again: its base64 reading
    is that of the string itself.
    """
    if "%" in form:
        yield unquote_plus(form), True
    elif "+" in form:
        yield form.replace("+", " "), False
    unescaped = _BACKSLASH.sub(_unescape, form) if "\\" in form else form
    if unescaped != form:
        yield unescaped, True
    for variant in _directions(form):
        budget.decodes -= 1
        if budget.spent:
            return
        for decoded in _decoded(variant):
            yield decoded, True


def _directions(form: str) -> tuple[bytes, ...]:
    """The text as written, reversed, ROT13-ed and both; only characters that can encode."""
    kept = form.encode("utf-8", "surrogatepass").translate(None, _NOT_B64)
    if len(kept) < 8:
        return ()
    turned = kept.translate(_ROT13)
    return (kept, kept[::-1], turned, turned[::-1])


def _decoded(text: bytes) -> list[str]:
    """Every alignment of ``text`` decoded as hex and as base64, cut to printable stretches.

    Separators were removed, so every run of the original sits in one long string; each run
    decodes correctly at the alignment its start falls on, its neighbours become noise.
    """
    raws: list[bytes] = []
    digits = text.translate(None, _NOT_HEX)
    if len(digits) >= 12:
        for start in (0, 1):
            usable = (len(digits) - start) // 2 * 2
            if usable >= 12:
                raws.append(binascii.unhexlify(digits[start:start + usable]))
    body = text.translate(_URLSAFE)
    size = len(body)
    for start in range(4):
        end = size - 1 if (size - start) % 4 == 1 else size
        if end - start < 8:
            continue
        piece = body[start:end]
        try:
            raws.append(binascii.a2b_base64(piece + _PADDING[-len(piece) % 4],
                                            strict_mode=True))
        except binascii.Error:
            continue
    return _printable(raws)


def _printable(raws: list[bytes]) -> list[str]:
    """Each decoded run as text when it is UTF-8, else its printable ASCII stretches as one
    text (nothing when it has none); in the order of ``raws``.

    Most runs are noise (a wrong alignment or direction): their stretches are looked for in
    one pass over all of them, cut apart by a byte no stretch holds, before run by run.
    """
    found: list[str | None] = []
    noise: list[bytes] = []
    for raw in raws:
        if raw.isascii():
            found.append(raw.decode("ascii"))
            continue
        text = raw.decode("utf-8", "replace")
        if "\ufffd" not in text:
            found.append(text)
            continue
        found.append(None)
        noise.append(raw)
    if noise and _STRETCH.search(b"\xff".join(noise)):
        for i, raw in enumerate(raws):
            if found[i] is None:
                stretches = _STRETCH.findall(raw)
                if stretches:
                    found[i] = b"\n".join(stretches).decode("ascii")
    return [text for text in found if text is not None]


def _unescape(match: re.Match[str]) -> str:
    hex_byte, unicode_point, octal = match.groups()
    if hex_byte is not None:
        return chr(int(hex_byte, 16))
    if unicode_point is not None:
        return chr(int(unicode_point, 16))
    return chr(int(octal, 8) & 0xFF)
