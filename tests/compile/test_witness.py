"""Whether a statement can matter over Σ (``_witness.reach``), against the language's monitor.

The search is what refuses a drafted statement as one that could never fire, or one that would
refuse all work, so its verdicts are pinned against random statements of every form and random
runs over the same vocabulary: a statement the search calls unbreakable is broken by no run; a
pattern it calls dead matches no event; a statement it says breaks every run holds on none.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate._model import Event
from callgate.compile import Signature
from callgate.compile._witness import reach
from callgate.policy._schema import BehaviorStatement
from callgate.temporal import compile_behavior, parse_statement
from callgate.temporal._patterns import CompiledPattern
from tests.temporal.strategies import ACTIONS, FORMS, events, statement

#: The vocabulary of the random statements and runs: four actions, each with x and y open.
SIGNATURE = Signature(frozenset(ACTIONS), dict.fromkeys(ACTIONS, frozenset({"x", "y"})))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FORMS).flatmap(statement), st.lists(events(), min_size=1, max_size=8))
def test_what_the_search_calls_impossible_no_random_run_does(
        text: str, runs: list[list[Event]]) -> None:
    parsed = parse_statement(text)
    found = reach(parsed, SIGNATURE)
    behavior = compile_behavior([BehaviorStatement(id="s", rule=text)])
    for run in runs:
        broken = bool(behavior.check_trace(run))
        if found.breaks is None:
            assert not broken, (text, run)
        if found.holds is None and run:
            assert broken, (text, run)
    for pattern in found.dead:
        compiled = CompiledPattern(pattern, parsed.variables, False)
        assert not any(compiled.ground(e) for run in runs for e in run), (text, pattern)


def test_a_variable_contained_in_a_text_that_must_match_a_pattern_is_still_reached() -> None:
    # The search once set an output that must contain $v to $v's value alone, which a text
    # pattern on the same output then refused: it called this statement unbreakable, though
    # one event matching both patterns breaks it (nothing earlier matched the first).
    text = ('prec(y in {"2", "M"} and output ~ "*M*" and x = $v and output contains $v, '
            "action = a and x = $v)")
    found = reach(parse_statement(text), SIGNATURE)
    assert found.breaks is not None
    behavior = compile_behavior([BehaviorStatement(id="s", rule=text)])
    assert behavior.check_trace(list(found.breaks))
