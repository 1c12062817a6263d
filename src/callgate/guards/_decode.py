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
# The same bytes marked 1, every other byte 0: whether a stretch exists is then a plain
# ``find`` of MIN_PRINTABLE ones, several times faster than the regular expression.
_MARK = bytes(int(b in b"\t\n\r" or 0x20 <= b <= 0x7E) for b in range(256))
_MARKED_STRETCH = b"\x01" * MIN_PRINTABLE
# Completes a base64 piece to whole quanta (``A`` is six zero bits; see ``_decoded``).
_FILL = (b"", b"A", b"AA", b"AAA")
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
    variants = _directions(form)
    if not variants:
        return
    # One decode per direction, each counted; the budget may stop the directions part way.
    allowed = min(len(variants), max(budget.decodes, 0))
    budget.decodes = budget.decodes - len(variants) if allowed == len(variants) else -1
    for decoded in _decoded(variants[:allowed]):
        yield decoded, True


def _directions(form: str) -> tuple[bytes, ...]:
    """The text as written, reversed, ROT13-ed and both; only characters that can encode, with
    the URL-safe ``-`` and ``_`` read as ``+`` and ``/`` (neither is a hex digit or a letter)."""
    kept = form.encode("utf-8", "surrogatepass").translate(_URLSAFE, _NOT_B64)
    if len(kept) < 8:
        return ()
    turned = kept.translate(_ROT13)
    return (kept, kept[::-1], turned, turned[::-1])


def _decoded(variants: tuple[bytes, ...]) -> list[str]:
    """Every alignment of each variant decoded as hex and as base64, cut to printable stretches;
    a variant's hex readings (two alignments), then its base64 ones (four), variant by variant.

    Separators were removed, so every run of the original sits in one long string; each run
    decodes correctly at the alignment its start falls on, its neighbours become noise. All the
    readings of one encoding are decoded by one call over their concatenation: hex pieces have
    an even length, and each base64 piece is completed to whole quanta with ``A`` (zero bits),
    its output then cut to the bytes its own characters encode (what ``=`` padding gives).
    Where the pieces start and the outputs are cut depends on the lengths alone (``_plan``).
    """
    digits = [text.translate(None, _NOT_HEX) for text in variants]
    # (lists, not generators, for the lengths and the pieces: compiled, a generator is an object)
    hex_pieces, b64_pieces, cuts = _plan(tuple([len(d) for d in digits]),
                                         tuple([len(text) for text in variants]))
    chars: list[bytes] = []
    for v, first, stop, fill in b64_pieces:
        chars.append(variants[v][first:stop])
        if fill:
            chars.append(fill)
    outputs = (
        binascii.unhexlify(b"".join([digits[v][first:stop] for v, first, stop in hex_pieces])),
        binascii.a2b_base64(b"".join(chars), strict_mode=True),
    )
    return _printable([outputs[side][first:stop] for side, first, stop in cuts])


@functools.lru_cache(maxsize=1024)
def _plan(hex_counts: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[
        tuple[tuple[int, int, int], ...], tuple[tuple[int, int, int, bytes], ...],
        tuple[tuple[int, int, int], ...]]:
    """For variants of ``hex_counts`` hex digits and ``sizes`` base64 characters: the hex
    pieces read (variant, start, stop), the base64 pieces (variant, start, stop, fill to whole
    quanta), and where each reading lies in the joint outputs (0 hex or 1 base64, start, stop),
    in the order ``_decoded`` gives them.

    Hex: each alignment with 12 digits or more (6 bytes). Base64: each alignment with 8
    characters or more, a last lone character dropped; its reading is the bytes its own
    characters give, the fill's bytes skipped."""
    hex_pieces: list[tuple[int, int, int]] = []
    b64_pieces: list[tuple[int, int, int, bytes]] = []
    cuts: list[tuple[int, int, int]] = []
    at = [0, 0]
    for variant, (count, size) in enumerate(zip(hex_counts, sizes, strict=True)):
        for start in (0, 1):
            usable = (count - start) // 2 * 2
            if usable >= 12:
                hex_pieces.append((variant, start, start + usable))
                cuts.append((0, at[0], at[0] + usable // 2))
                at[0] += usable // 2
        for start in range(4):
            end = size - 1 if (size - start) % 4 == 1 else size
            chars = end - start
            if chars < 8:
                continue
            b64_pieces.append((variant, start, end, _FILL[-chars % 4]))
            cuts.append((1, at[1], at[1] + chars * 3 // 4))
            at[1] += (chars + 3) // 4 * 3
    return tuple(hex_pieces), tuple(b64_pieces), tuple(cuts)


def _printable(raws: list[bytes]) -> list[str]:
    """Each decoded run as text when it is UTF-8, else its printable ASCII stretches as one
    text (nothing when it has none); in the order of ``raws``.

    Most runs are noise (a wrong alignment or direction): whether they hold a stretch at all
    is looked up in one pass over all of them, cut apart by a byte no stretch holds, before run
    by run.
    """
    texts = [raw.decode("utf-8", "replace") for raw in raws]
    noise = [i for i, text in enumerate(texts) if "\ufffd" in text]
    if not noise:
        return texts
    kept: list[str | None] = list(texts)
    if _has_stretch(b"\xff".join([raws[i] for i in noise])):
        for i in noise:
            stretches = _STRETCH.findall(raws[i]) if _has_stretch(raws[i]) else None
            kept[i] = b"\n".join(stretches).decode("ascii") if stretches else None
    else:
        for i in noise:
            kept[i] = None
    return [text for text in kept if text is not None]


def _has_stretch(raw: bytes) -> bool:
    """Whether ``raw`` holds a printable stretch ``_STRETCH`` would find."""
    return _MARKED_STRETCH in raw.translate(_MARK)


def _unescape(match: re.Match[str]) -> str:
    hex_byte, unicode_point, octal = match.groups()
    if hex_byte is not None:
        return chr(int(hex_byte, 16))
    if unicode_point is not None:
        return chr(int(unicode_point, 16))
    return chr(int(octal, 8) & 0xFF)
