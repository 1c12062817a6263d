"""The language's syntax and scope rules, with places in errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from callgate._errors import TemporalError
from callgate._model import Event
from callgate.policy._loader import parse_policy
from callgate.policy._schema import BehaviorStatement
from callgate.temporal import _nodes as n
from callgate.temporal import compile_behavior, parse_statement


def _error(text: str) -> TemporalError:
    with pytest.raises(TemporalError) as caught:
        parse_statement(text, source="p.yaml", line=4, column=11)
    return caught.value


def test_every_form_parses_to_its_patterns() -> None:
    counts = {
        "abs(action = a)": 1,
        "prec(action = a, action = b)": 2,
        "resp(action = a, action = b)": 2,
        "bresp[3](action = a, action = b)": 2,
        "rslv(action = a, action = b)": 2,
        "until(action = a, action = b, action = c)": 3,
    }
    for text, count in counts.items():
        assert len(parse_statement(text).patterns) == count
    assert parse_statement("bresp[3](action = a, action = b)").bound == 3


def test_always_body_has_not_and_or_once_bounded_once_and_eventually() -> None:
    st = parse_statement(
        "always(not (action = a and once[2](action = b)) or eventually(action = c)"
        " and once(status = error))"
    )
    assert isinstance(st.body, n.Or)
    left, right = st.body.parts
    assert isinstance(left, n.Not)
    assert isinstance(right, n.And)
    inner = left.body
    assert isinstance(inner, n.And)
    assert isinstance(inner.parts[1], n.Once)
    assert inner.parts[1].bound == 2
    assert isinstance(right.parts[0], n.Eventually)


def test_every_atom_kind_parses() -> None:
    st = parse_statement(
        'prec(action in {a, "b.c"} and action != d and action not in {e} and status != error'
        ' and x = "v" and x != 3 and y in {"a", 2.5} and y not in {"z"} and p ~ "*.csr"'
        ' and p !~ "/tmp/*" and output ~ "*ok*" and output !~ "x" and amount > 1000'
        ' and amount <= 1e6 and taint has {web, rag} and k = $v,'
        ' action = f and body contains $v and output contains $v and taint has web)'
    )
    kinds = [type(a).__name__ for a in st.patterns[0].atoms]
    assert kinds.count("ActionIn") == 3
    assert {"StatusIs", "ArgIn", "TextMatch", "Compare", "TaintHas", "VarEq"} <= set(kinds)
    uses = [a for a in st.patterns[1].atoms if isinstance(a, n.VarContains)]
    assert [u.arg for u in uses] == ["body", None]
    assert st.variables == ("v",)


def test_parse_error_names_place_and_what_was_expected() -> None:
    error = _error("prec(action = a,\n  action = )")
    assert str(error) == "p.yaml:5:12: expected a name, found ')'"


def test_unknown_form_is_an_error() -> None:
    assert "expected a form" in str(_error("never(action = a)"))


def test_bound_below_one_is_an_error() -> None:
    assert "bound must be at least 1" in str(_error("bresp[0](action = a, action = b)"))
    assert "bound must be at least 1" in str(_error("always(not once[0](action = a))"))


def test_trailing_text_and_bad_characters_are_errors() -> None:
    assert "expected end of rule" in str(_error("abs(action = a) extra"))
    assert "unexpected character '@'" in str(_error("abs(action = @)"))


def test_variable_in_one_pattern_is_a_scope_error_at_its_place() -> None:
    error = _error("prec(action = a and x = $v, action = b)")
    assert str(error).startswith("p.yaml:4:31: variable $v appears in only one pattern")


def test_variable_not_bound_first_and_contains_before_binding_are_errors() -> None:
    assert "not bound in the first pattern" in str(
        _error("until(action = a, x = $v, y = $v)"))
    assert "used with 'contains' before it is bound" in str(
        _error("prec(x contains $v, y = $v)"))


def test_variable_inside_always_is_an_error() -> None:
    assert "inside an always body" in str(_error("always(not x = $v)"))


@pytest.mark.parametrize("rule", [
    "always(once(eventually(action = a)))",
    "always(eventually(eventually(action = a)))",
    "always(not (action = b and once[2](eventually(once(action = a)))))",
    "always(" + " or ".join(f"once(eventually(action = a{i}))" for i in range(7)) + ")",
])
def test_a_future_nested_in_a_past_or_a_future_is_accepted(rule: str) -> None:
    parse_statement(rule)


def test_too_many_eventually_operators_is_an_error() -> None:
    body = " or ".join(f"eventually(action = a{i})" for i in range(6))
    assert "at most 5 eventually" in str(_error(f"always({body})"))


def test_all_problems_of_a_policy_are_reported_together() -> None:
    statements = [
        BehaviorStatement(id="ok", rule="abs(action = a)"),
        BehaviorStatement(id="one", rule="abs(action = )"),
        BehaviorStatement(id="two", rule="prec(action = a and x = $v, action = b)"),
    ]
    with pytest.raises(TemporalError) as caught:
        compile_behavior(statements)
    assert len(caught.value.problems) == 2
    assert caught.value.problems[0].source == "<behavior one>"


def test_errors_in_a_folded_yaml_rule_name_the_file_position(tmp_path: Path) -> None:
    text = (
        "name: p\nversion: 1\nbehavior:\n"
        "  - id: r3\n"
        "    rule: prec(action = warpAffine and transform = $x,\n"
        "               action = validate_output and target = $y)\n"
    )
    loaded = parse_policy(text, "policy.yaml")

    def locate(index: int) -> tuple[str, str, int, int] | None:
        span = loaded.raw_span(("behavior", index, "rule"))
        return None if span is None else ("policy.yaml", *span)

    with pytest.raises(TemporalError) as caught:
        compile_behavior(loaded.policy.behavior, locate=locate)
    places = {(p.line, p.column) for p in caught.value.problems}
    # The atoms "transform = $x" (line 5, column 40) and "target = $y" (line 6, column 45).
    assert places == {(5, 40), (6, 45)}


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    deep = "always(" + "not (" * 500 + "action = a" + ")" * 501
    assert "nests deeper than 64 levels" in str(_error(deep))
    assert "nests deeper than 64 levels" in str(_error("abs(" + "(" * 100 + "action = a"))
    # 30 levels are fine, and both engines handle them (an even number of nots: "action = a").
    rule = "always(" + "not (" * 30 + "action = a" + ")" * 31
    behavior = compile_behavior([BehaviorStatement(id="deep", rule=rule)])
    trace = [Event(action="a"), Event(action="b")]
    for engine in ("incremental", "smt"):
        found = behavior.check_trace(trace, engine=engine)  # type: ignore[arg-type]
        assert [v.events for v in found] == [(2,)]


def test_a_quoted_name_may_be_a_word_of_the_language() -> None:
    statement = parse_statement('abs(action in {"in", "and"})')
    behavior = compile_behavior([BehaviorStatement(id="s", rule=statement.text)])
    assert behavior.check_trace([Event(action="in")])
    assert not behavior.check_trace([Event(action="inn")])
    assert "a name" in str(_error("abs(action = in)"))
