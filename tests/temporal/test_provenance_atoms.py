"""The atoms added for provenance and identifiers: ARG from S, links(ARG), any/all, ~*, and
identifiers compared in their normal form, in both engines."""

from __future__ import annotations

from typing import Any

import pytest

from callgate import TemporalError
from callgate._model import Event
from callgate.policy._schema import BehaviorStatement
from callgate.temporal import compile_behavior, parse_statement
from callgate.temporal._patterns import CompiledPattern

WEB, CHAT, USER = frozenset({"web"}), frozenset({"chat"}), frozenset({"user-provided"})


def _holds(pattern: str, ev: Event) -> bool:
    st_ = parse_statement(f"abs({pattern})")
    return CompiledPattern(st_.patterns[0], (), binding=True).ground(ev)


def _ev(provenance: dict[str, tuple[frozenset[str], ...]] | None = None, source: frozenset[str]
        = frozenset(), **args: Any) -> Event:
    return Event(action="send", args=args, provenance=provenance or {}, source=source)


def test_from_holds_when_some_piece_came_from_a_named_source() -> None:
    two = _ev({"to": (USER, WEB)}, to=["a@x.io", "b@y.io"])
    assert _holds("to from web", two) and _holds("to from {email, web}", two)
    assert not _holds("to from email", two)


def test_not_from_holds_when_some_piece_came_from_none_of_the_sources() -> None:
    two = _ev({"to": (USER, WEB)}, to=["a@x.io", "b@y.io"])
    assert _holds("to not from user-provided", two)       # b@y.io is not the user's
    assert not _holds("to not from {user-provided, web}", two)
    assert not _holds("to not from user-provided", _ev({"to": (USER,)}, to="a@x.io"))


def test_an_argument_with_nothing_to_trace_satisfies_neither_from_nor_not_from() -> None:
    for event in (_ev({"flag": ()}, flag=True), _ev({}, other=1)):
        for atom in ("flag from web", "flag not from web"):
            assert not _holds(atom, event)


def test_output_from_reads_the_events_own_source() -> None:
    assert _holds("output from web", _ev(source=WEB))
    assert _holds("output not from {email}", _ev(source=WEB))
    assert not _holds("output from email", _ev(source=WEB))


def test_links_reads_the_identifiers_inside_an_argument() -> None:
    ev = _ev({"body": (CHAT, WEB), "links(body)": (WEB,)},
             body="see WWW.Evil.example/x and tell Bob")
    assert _holds("links(body) from web", ev) and not _holds("links(body) from chat", ev)
    assert _holds('any links(body) = "www.evil.example/x"', ev)
    assert _holds('all links(body) ~ "*.example*"', ev)
    assert not _holds("links(body) from web", _ev({"body": (WEB,)}, body="no links here"))


def test_any_and_all_range_over_the_elements_of_a_list() -> None:
    ev = _ev(to=["a@corp.example", "mallory@evil.example"])
    assert _holds('any to ~ "*@evil.example"', ev)
    assert not _holds('all to ~ "*@corp.example"', ev)
    assert _holds('all to ~ "*.example"', ev)
    assert _holds('any to in {"a@corp.example"}', ev)
    assert _holds('all n > 2', _ev(n=[3, 4])) and not _holds("all n > 3", _ev(n=[3, 4]))
    assert not _holds('all to ~ "*"', _ev(to=[]))  # nothing satisfies an empty all
    assert _holds('any to = "x@y.io"', _ev(to="x@y.io"))  # a single value is one element


def test_tilde_star_matches_ignoring_case() -> None:
    assert _holds('text ~* "*RESERVE*"', _ev(text="please reserve a room"))
    assert not _holds('text ~ "*RESERVE*"', _ev(text="please reserve a room"))
    assert _holds('text !~* "*book*"', _ev(text="reserve"))


def test_identifiers_compare_in_their_normal_form() -> None:
    assert _holds('url = "www.shop.example"', _ev(url="HTTPS://WWW.Shop.example/"))
    assert _holds('to in {"Bob@Corp.example"}', _ev(to="bob@corp.example"))
    assert not _holds('name = "Bob"', _ev(name="bob"))  # ordinary text keeps its case


@pytest.mark.parametrize("engine", ["incremental", "smt"])
def test_both_engines_compare_variables_and_contains_by_normal_form(engine: str) -> None:
    behavior = compile_behavior([
        BehaviorStatement(id="to-given", rule=(
            "prec(action = send and to = $t, action = user_prompt and text contains $t)")),
        BehaviorStatement(id="same-host", rule=(
            "prec(action = post and url = $u, action = fetch and url = $u)"))])
    trace = [Event("user_prompt", {"text": "mail Bob@Corp.example"}, seq=1),
             Event("fetch", {"url": "https://www.x.example/"}, seq=2),
             Event("send", {"to": "bob@corp.example"}, seq=3),
             Event("post", {"url": "www.x.example"}, seq=4),
             Event("send", {"to": "eve@corp.example"}, seq=5)]
    found = {(v.statement, v.events) for v in behavior.check_trace(trace, engine=engine)}
    assert found == {("to-given", (5,))}


@pytest.mark.parametrize(("rule", "words"), [
    ("abs(links(action) from web)", "an argument name inside links"),
    ("abs(any action = a)", "an argument name after any"),
    ("prec(links(b) = $x, c = $x)", "is not compared with variables"),
    ("abs(x from)", "a name"),
])
def test_misuse_is_refused_at_its_place(rule: str, words: str) -> None:
    with pytest.raises(TemporalError) as caught:
        parse_statement(rule, source="p.yaml", line=3, column=7)
    assert words in str(caught.value) and caught.value.problems[0].line == 3
