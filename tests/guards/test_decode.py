"""What a parameter string decodes to: each encoding undone, within a budget."""

from __future__ import annotations

import base64
import codecs
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.guards._decode import BUDGET_FACTOR, BUDGET_SLACK, decode, decode_all

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
