"""The catastrophic-regex check: refuses what can backtrack exponentially, accepts the usual."""

from __future__ import annotations

import re
import time
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate._regexcheck import MAX_PATTERN_LENGTH, check_regex


@pytest.mark.parametrize(
    "pattern",
    [
        r"^https://(api\.github\.com|api\.openai\.com)/",
        r"^([a-z0-9-]+\.)+[a-z]{2,}$",
        r"(\d+,)*\d+",
        r"(ab+)+",
        r"(a\d+|b)+",
        r"(get|post|put)+",
        r"(foo|fo)+",
        r"(a|ab)*c",
        r"(\\.|[^\\])*",
        r"(^|/)\.ssh(/|$)",
        r"(^|/)\.env[^/]*$",
        r".*\.env.*",
        r"(ab{2})+",
        r"a++",
        r"(?>a+)+",
        r"(?=a+)+b",
        r"[a-z]*",
        "",
    ],
)
def test_common_and_delimited_patterns_are_accepted(pattern: str) -> None:
    assert check_regex(pattern) is None


@pytest.mark.parametrize(
    "pattern",
    [
        r"(a+)+",
        r"(a*)*",
        r"(a+)*b",
        r"^(\w+\s?)+$",
        r"(.*a)+",
        r"(x+x+)+y",
        r"(?:a{1,3})+",
        r"((ab)+c?)+",
        r"(?i)(A+a)+",
        r"(?:[a-z]+[0-9]*)+$",
    ],
)
def test_nested_quantifiers_over_the_same_characters_are_refused(pattern: str) -> None:
    reason = check_regex(pattern)
    assert reason is not None and reason.startswith("nested quantifier")


@pytest.mark.parametrize(
    "pattern", [r"(a|a)*", r"(a|aa)+$", r"(a|b|ab)*c", r"(ab|[ab]b)+", r"(ab|a.)+"]
)
def test_overlapping_alternatives_under_a_quantifier_are_refused(pattern: str) -> None:
    reason = check_regex(pattern)
    assert reason is not None and reason.startswith("alternatives under a quantifier")


@pytest.mark.parametrize("pattern", ["a?" * 20 + "a" * 20, r"\d*\d*\d*\d*", ".*a.*b.*c.*d"])
def test_long_runs_of_adjacent_overlapping_quantifiers_are_refused(pattern: str) -> None:
    reason = check_regex(pattern)
    assert reason is not None and "adjacent quantifiers" in reason


@pytest.mark.parametrize(
    "pattern", [r".*a.*b.*c", r"\d+\.\d+\.\d+\.\d+", r"^\s*\w+\s*=\s*\w+\s*$"]
)
def test_short_or_delimited_runs_of_quantifiers_are_accepted(pattern: str) -> None:
    assert check_regex(pattern) is None


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?P<x>a)(?P=x)", r"(a)?(?(1)b|c)"])
def test_back_references_and_conditionals_are_refused(pattern: str) -> None:
    reason = check_regex(pattern)
    assert reason is not None and "back-references" in reason


def test_patterns_longer_than_the_limit_are_refused() -> None:
    assert check_regex("a" * MAX_PATTERN_LENGTH) is None
    reason = check_regex("a" * (MAX_PATTERN_LENGTH + 1))
    assert reason is not None and str(MAX_PATTERN_LENGTH) in reason


def test_ambiguous_set_syntax_is_refused() -> None:
    reason = check_regex("[[a]")
    assert reason is not None and "ambiguous" in reason


@pytest.mark.parametrize("pattern", ["(", "[a-", "a{2,1}", "*a", "(?P<1>x)"])
def test_patterns_that_do_not_compile_are_refused_with_the_compiler_message(pattern: str) -> None:
    reason = check_regex(pattern)
    assert reason is not None and reason.startswith("pattern does not compile")


def test_an_accepted_delimited_repeat_stays_fast_on_hostile_input() -> None:
    # The classic attack on a domain pattern: a long run of the inner class with no ending.
    pattern = r"^([a-z0-9-]+\.)+[a-z]{2,}$"
    assert check_regex(pattern) is None
    start = time.perf_counter()
    re.match(pattern, "a." * 5000 + "a" * 5000 + "!")
    assert time.perf_counter() - start < 1.0


def test_a_refused_pattern_really_backtracks_exponentially() -> None:
    # Pins that the refusal guards a real cost: each extra character doubles the work.
    pattern = r"^(a+)+$"
    assert check_regex(pattern) is not None
    timings = []
    for n in (14, 18):
        runs = []
        for _ in range(3):  # best of three, so a busy machine does not skew the ratio
            start = time.perf_counter()
            re.match(pattern, "a" * n + "!")
            runs.append(time.perf_counter() - start)
        timings.append(min(runs))
    assert timings[1] > timings[0] * 4


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab.()[]|*+?{}1,^$\\-wdsP<>=!:")), max_size=24))
def test_check_never_raises_and_refuses_everything_that_does_not_compile(pattern: str) -> None:
    reason = check_regex(pattern)
    assert reason is None or isinstance(reason, str)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            re.compile(pattern)
    except (re.error, FutureWarning):
        assert reason is not None


_ATOMS = st.sampled_from(["a", "b", "[ab]", r"\d", ".", "x"])


@st.composite
def _simple_patterns(draw: st.DrawFn) -> str:
    """Small patterns built from atoms, groups, alternation and quantifiers."""
    parts = draw(st.lists(_ATOMS, min_size=1, max_size=3))
    body = "".join(parts)
    if draw(st.booleans()):
        body = f"({body}|{draw(_ATOMS)}{draw(_ATOMS)})"
    quant = draw(st.sampled_from(["", "+", "*", "?", "{2}"]))
    inner = draw(st.sampled_from(["", "+", "*"]))
    return f"({body}{inner}){quant}" if inner else f"({body}){quant}"


@settings(max_examples=200, deadline=None)
@given(_simple_patterns())
def test_accepted_patterns_match_hostile_input_in_bounded_time(pattern: str) -> None:
    if check_regex(pattern) is not None:
        return
    start = time.perf_counter()
    for text in ("a" * 28 + "!", "ab" * 14 + "!", "1" * 28 + "!"):
        re.fullmatch(pattern, text)
    assert time.perf_counter() - start < 0.5
