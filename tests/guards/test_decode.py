"""What a parameter string decodes to: each encoding undone, within a budget."""

from __future__ import annotations

import base64
import codecs
import os
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.guards._decode import (
    BUDGET_FACTOR,
    BUDGET_SLACK,
    _decoded,
    _directions,
    decode,
    decode_all,
)

PRINTABLE = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=8, max_size=60)


@settings(max_examples=60)
@given(PRINTABLE)
def test_hex_and_base64_forms_decode_back_to_the_text(text: str) -> None:
    assert text in decode("x=" + text.encode().hex()).texts
    assert text in decode("x=" + base64.b64encode(text.encode()).decode()).texts


@settings(max_examples=60)
@given(PRINTABLE, st.integers(0, 3), st.sampled_from(["", "rev", "rot13", "rev+rot13"]))
def test_base64_is_read_at_any_alignment_and_in_any_direction(text: str, junk: int,
                                                              turn: str) -> None:
    encoded = "Q" * junk + base64.b64encode(text.encode()).decode()
    if "rot13" in turn:
        encoded = codecs.encode(encoded, "rot13")
    if "rev" in turn:
        encoded = encoded[::-1]
    assert any(text in form for form in decode(encoded).texts)


def test_url_and_backslash_escapes_are_decoded() -> None:
    assert "a b&c" in decode("a+b%26c").texts
    assert "curl x" in decode("\\x63\\x75\\x72\\x6c\\040x").texts
    assert "id" in decode("\\u0069\\u0064").texts


def test_utf8_content_is_kept_whole_and_binary_is_cut_to_printable_stretches() -> None:
    assert "naïve café résumé" in decode(base64.b64encode("naïve café résumé".encode()).decode()
                                         ).texts
    noise = base64.b64encode(b"\x00\x81\xff" * 4 + b"hidden-command" + b"\xfe\x00").decode()
    assert any("hidden-command" in form for form in decode(noise).texts)


def test_random_base64_expands_within_the_budget() -> None:
    blob = base64.b64encode(os.urandom(30000)).decode()
    forms = decode(blob)
    assert forms.complete
    assert sum(len(t) for t in forms.texts) - len(blob) <= BUDGET_FACTOR * len(blob) + \
        BUDGET_SLACK


def test_decode_all_reports_incomplete_when_the_scan_limit_is_passed() -> None:
    texts = ["plain words that decode to nothing much"] * 3
    assert decode_all(texts, max_chars=10_000).complete
    assert not decode_all(texts, max_chars=50).complete


# -- the joint decoding of every direction and alignment, against a plain one -----------------

_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-"
_ROT13 = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
                         b"NOPQRSTUVWXYZABCDEFGHIJKLMnopqrstuvwxyzabcdefghijklm")


def _plain_layer(form: str) -> list[str]:
    """One layer of hex and base64 readings, each alignment decoded on its own with ``=``."""
    kept = bytes(b for b in form.encode("utf-8", "surrogatepass") if b in _B64)
    if len(kept) < 8:
        return []
    turned = kept.translate(_ROT13)
    out: list[str] = []
    for text in (kept, kept[::-1], turned, turned[::-1]):
        raws: list[bytes] = []
        digits = bytes(b for b in text if chr(b) in "0123456789abcdefABCDEF")
        for start in (0, 1):
            usable = (len(digits) - start) // 2 * 2
            if usable >= 12:
                raws.append(bytes.fromhex(digits[start:start + usable].decode()))
        body = text.replace(b"-", b"+").replace(b"_", b"/")
        for start in range(4):
            piece = body[start:]
            piece = piece[:-1] if len(piece) % 4 == 1 else piece
            if len(piece) >= 8:
                raws.append(base64.b64decode(piece + b"=" * (-len(piece) % 4)))
        for raw in raws:
            decoded = raw.decode("utf-8", "replace")
            if "\ufffd" not in decoded:
                out.append(decoded)
            elif stretches := re.findall(rb"[\t\n\r\x20-\x7e]{6,}", raw):
                out.append(b"\n".join(stretches).decode("ascii"))
    return out


_ENCODED = st.one_of(
    st.text(st.sampled_from("0123456789abcdefABCDEF+/_-=%. xyzQ"), max_size=90),
    st.binary(max_size=60).map(lambda b: base64.b64encode(b).decode()),
    st.text(max_size=40).map(lambda t: base64.urlsafe_b64encode(
        t.encode("utf-8", "surrogatepass")).decode()[::-1]),
    st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass").hex() + "Zz"),
    st.text(max_size=60),
)


@settings(max_examples=400)
@given(_ENCODED)
def test_one_layer_reads_every_direction_and_alignment_as_a_plain_decoder_does(
        form: str) -> None:
    assert _decoded(_directions(form)) == _plain_layer(form)
