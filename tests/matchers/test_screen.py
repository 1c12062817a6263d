"""Literal screens: a text a screen turns away is one RE2 finds nothing in.

A screen is a claim about an expression: every match holds one of its literals. The claim is
tested against RE2 itself on texts drawn to sit near the expression (made to match it, built
from its literals and pieces, with case changes and the non-ASCII letters that fold to ASCII).
"""

from __future__ import annotations

import re

import pytest
import re2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate.guards._text import _SECRET_ASSIGNMENT, KEY_SHAPES
from callgate.matchers._screen import Screened
from callgate.matchers._sensitive import SECRET_RESOURCE, SENSITIVE_PATH

SCREENED: dict[str, Screened] = {
    "sensitive-path": SENSITIVE_PATH,
    "secret-resource": SECRET_RESOURCE,
    **{f"key-shape:{name}": screened for name, screened in KEY_SHAPES},
    "secret-assignment": _SECRET_ASSIGNMENT,
}
# letters outside ASCII that Unicode case folding takes to ASCII ones, and separators
_TRICKY = "\u017f\u212a\u0130\u0131/\\.-_ =:'\"\n\t~"


def _near(screened: Screened) -> st.SearchStrategy[str]:
    matching = st.from_regex(re.compile(screened.source), fullmatch=False)
    pieces = st.sampled_from([*screened.literals, *(lit.upper() for lit in screened.literals),
                              *(lit[1:] for lit in screened.literals if len(lit) > 1),
                              "A" * 16, "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZ0123456789ab"])
    built = st.lists(st.one_of(pieces, st.text(_TRICKY + "abcEKS019", max_size=4)),
                     max_size=8).map("".join)
    return st.one_of(matching, built)


@pytest.mark.parametrize("name", sorted(SCREENED))
def test_a_screen_never_turns_away_a_text_the_expression_matches(name: str) -> None:
    screened = SCREENED[name]

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
    @given(text=_near(screened))
    def check(text: str) -> None:
        try:
            found = screened.regex.search(text)
        except UnicodeEncodeError:  # RE2 takes no lone surrogate; the guards clean them first
            return
        if found is not None:
            assert screened.possible(text), (name, text)
        assert (screened.search(text) is None) == (found is None)

    check()


def test_texts_without_the_literals_never_reach_re2() -> None:
    class Counting:
        pattern = "x"
        calls = 0

        def search(self, text: str) -> None:
            Counting.calls += 1

    screened = Screened(Counting(), ("needle",), ignore_case=True)
    assert screened.search("/home/user/data/notes.txt") is None
    assert Counting.calls == 0
    screened.search("a NEEDLE in it")
    screened.search("caf\u00e9")  # non-ASCII: case folding may reach ASCII letters, so RE2
    assert Counting.calls == 2


def test_case_folding_letters_outside_ascii_still_reach_the_expression() -> None:
    # U+017F (long s) folds to "s" under RE2's (?i): the screen must let it through
    assert SENSITIVE_PATH.search("/srv/\u017fecrets/x") is not None
    assert SENSITIVE_PATH.search("/home/u/.\u017f\u017fh/id") is not None
    assert re2.compile("(?i)secret").search("\u017fecret") is not None


def test_an_expression_left_for_later_is_compiled_when_a_text_first_gets_through() -> None:
    compiled: list[str] = []

    def compile_regex(source: str) -> object:
        compiled.append(source)
        return re2.compile(source)

    screened = Screened.later("(?i)needle", compile_regex, ("needle",), ignore_case=True)
    assert screened.search("hay") is None and compiled == []
    assert screened.search("a NEEDLE") is not None and compiled == ["(?i)needle"]
    assert screened.search("needle") is not None and compiled == ["(?i)needle"]


def test_a_screen_needs_literals() -> None:
    with pytest.raises(ValueError, match="literals"):
        Screened(re2.compile("x"), (), ignore_case=False)
    with pytest.raises(ValueError, match="literals"):
        Screened(re2.compile("x"), ("",), ignore_case=False)


@settings(max_examples=400, deadline=None)
@given(texts=st.lists(st.text(alphabet="abcdefkst_-./\nK\u017f\u212aİ", max_size=14), max_size=8),
       ignore_case=st.booleans())
def test_screening_many_texts_at_once_answers_as_screening_each(texts: list[str],
                                                                ignore_case: bool) -> None:
    screen = Screened(None, ("secret", "s.k", "ab", "dst"), ignore_case=ignore_case,
                      source="secret|s\\.k|ab|dst")
    assert screen.possible_each(texts) == [screen.possible(text) for text in texts]


def test_a_literal_holding_a_line_end_is_refused() -> None:
    with pytest.raises(ValueError, match="line end"):
        Screened(None, ("a\nb",), ignore_case=False, source="a\nb")
