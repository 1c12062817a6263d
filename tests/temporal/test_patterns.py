"""Atom meaning on concrete events: literals, text patterns, numbers, absent args, bounds."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from callgate._model import Event
from callgate.policy._schema import BehaviorStatement
from callgate.temporal import OBSERVATION_LIMIT, compile_behavior, parse_statement
from callgate.temporal._patterns import (
    CompiledPattern,
    Glob,
    GlobSet,
    observe,
    text_of,
    value_key,
)


def _holds(pattern: str, ev: Event) -> bool:
    st_ = parse_statement(f"abs({pattern})")
    return CompiledPattern(st_.patterns[0], (), binding=True).ground(ev)


def _ev(action: str = "a", output: str = "", **args: Any) -> Event:
    return Event(action=action, args=args, output=output)


def test_number_literal_matches_equal_numbers_and_their_spelling_only() -> None:
    assert _holds("fps = 6", _ev(fps=6))
    assert _holds("fps = 6", _ev(fps=6.0))
    assert _holds("fps = 6", _ev(fps="6"))
    assert _holds("fps = 6", _ev(fps="6.0"))
    assert not _holds("fps = 6", _ev(fps="six"))
    assert not _holds("fps = 6", _ev(fps=" 6"))
    assert not _holds("flag = 1", _ev(flag=True))


def test_string_literal_matches_only_an_equal_string() -> None:
    assert _holds('fps = "6"', _ev(fps="6"))
    assert not _holds('fps = "6"', _ev(fps=6))


def test_atoms_on_an_absent_argument_are_false_even_negated() -> None:
    for atom in ('x = "v"', 'x != "v"', 'x in {"v"}', 'x not in {"v"}', 'x ~ "*"',
                 'x !~ "v"', "x > 0", "x <= 0"):
        assert not _holds(atom, _ev(y="v")), atom


def test_negated_atoms_hold_on_other_values() -> None:
    assert _holds('x != "v"', _ev(x="w"))
    assert _holds('x not in {"v", 1}', _ev(x=2))
    assert _holds("action != b", _ev())
    assert _holds("action not in {b, c}", _ev())


def test_star_matches_slashes_and_question_mark_one_character() -> None:
    assert _holds('path ~ "*.ssh*"', _ev(path="/home/u/.ssh/id_rsa"))
    assert _holds('path ~ "/home/*"', _ev(path="/home/u/deep/file"))
    assert _holds('f ~ "out_?.csr"', _ev(f="out_1.csr"))
    assert not _holds('f ~ "out_?.csr"', _ev(f="out_12.csr"))
    assert not _holds('f ~ "*.csr"', _ev(f="a.csr.bak"))


def test_non_string_arguments_are_matched_through_their_json_text() -> None:
    # A list argument cannot slip past a text pattern by not being a string.
    assert _holds('argv ~ "*rm*"', _ev(argv=["rm", "-rf", "/"]))
    assert _holds('port ~ "80"', _ev(port=80))
    assert _holds('flag ~ "true"', _ev(flag=True))
    assert not _holds('argv !~ "*rm*"', _ev(argv=["rm"]))
    assert _holds('nothing ~ "null"', _ev(nothing=None))


def test_numeric_comparisons_accept_numbers_and_number_strings() -> None:
    assert _holds("amount > 1000", _ev(amount=1000.5))
    assert _holds("amount > 1000", _ev(amount="2000"))
    assert not _holds("amount > 1000", _ev(amount=1000))
    assert _holds("amount >= 1000", _ev(amount=1000))
    assert not _holds("amount > 1000", _ev(amount="lots"))
    assert not _holds("amount > 0", _ev(amount=True))


def test_status_and_taint_atoms() -> None:
    assert _holds("status = denied", Event(action="a", status="denied"))
    assert not _holds("status = ok", Event(action="a", status="error"))
    assert _holds("taint has {web, rag}", Event(action="a", taint=frozenset({"rag"})))
    assert not _holds("taint has web", Event(action="a", taint=frozenset({"email"})))


def test_output_is_observed_only_up_to_the_limit() -> None:
    huge = "a" * OBSERVATION_LIMIT + "SECRET"
    assert len(observe(huge)) == OBSERVATION_LIMIT
    assert not _holds('output ~ "*SECRET*"', _ev(output=huge))
    assert _holds('output ~ "a*"', _ev(output=huge))


def test_values_compare_by_value_for_variables() -> None:
    assert value_key(1) == value_key(1.0)
    assert value_key("1") != value_key(1)
    assert value_key(True) != value_key(1)
    assert value_key(["a", 1]) == value_key(["a", 1])
    assert text_of({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'


def test_glob_on_adversarial_input_is_fast() -> None:
    # A pattern that backtracks exponentially in naive matchers.
    glob = Glob("*a*a*a*a*a*a*a*b")
    assert not glob.matches("a" * 50_000)


def _reference(pattern: str) -> re.Pattern[str]:
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body, re.DOTALL)


@settings(max_examples=600, deadline=None)
@given(pattern=st.text("ab*?/", max_size=7), text=st.text("ab/", max_size=9))
def test_glob_agrees_with_a_regular_expression_reading(pattern: str, text: str) -> None:
    assert Glob(pattern).matches(text) == bool(_reference(pattern).fullmatch(text))


_GLOB_ALPHABET = "ab*?/.\\()[]|$^+{}\n\u00e9\ud800"


@settings(max_examples=600, deadline=None)
@given(patterns=st.lists(st.text(_GLOB_ALPHABET, max_size=6), min_size=1, max_size=4),
       text=st.text("ab/.\\()[]|$\n\u00e9\ud800", max_size=8))
def test_a_set_of_patterns_matches_exactly_when_one_of_them_does(patterns: list[str],
                                                                  text: str) -> None:
    # regular-expression syntax and lone surrogates in patterns or text are literal characters
    assert GlobSet(patterns).matches(text) == any(Glob(p).matches(text) for p in patterns)


def test_a_disjunction_of_patterns_on_one_argument_decides_as_its_parts() -> None:
    behavior = compile_behavior([BehaviorStatement(id="s", rule=(
        'always(not (action = exec and (cmd ~ "rm *" or cmd ~ "curl*|*" or cmd ~ "*.sh")))'))])

    def violated(cmd: object) -> bool:
        return bool(behavior.monitor().check_pending(Event(action="exec", args={"cmd": cmd})))

    assert violated("rm -rf /") and violated("curl x | sh") and violated("a.sh")
    assert not violated("ls") and not violated("curl x") and not violated(["rm", "x"])
    assert violated("rm \ud800")  # a text RE2 cannot read falls back to the patterns
    assert not violated("ls \ud800")
