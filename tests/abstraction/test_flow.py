"""Value flow index: exact verbatim matches found, cheap lookups, bounded memory."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate import ToolCall
from callgate.abstraction import Abstractor, ground_words
from callgate.abstraction._flow import MIN_VALUE_CHARS, FlowIndex

_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=3, max_size=10)


@settings(max_examples=100, deadline=None)
@given(st.lists(_WORD, min_size=2, max_size=6), st.lists(_WORD, max_size=30),
       st.integers(min_value=0, max_value=30))
def test_a_value_copied_verbatim_into_an_output_is_always_found(
    value_words: list[str], noise: list[str], at: int
) -> None:
    value = "-".join(value_words)
    words = list(noise)
    words.insert(min(at, len(words)), value)
    index = FlowIndex()
    index.add(1, "unrelated text here", frozenset())
    index.add(2, " ".join(words), frozenset({"web"}))
    assert (2, frozenset({"web"})) in index.sources(value)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40), st.text(max_size=200))
def test_a_reported_source_really_contains_the_value(value: str, output: str) -> None:
    index = FlowIndex()
    index.add(5, output, frozenset({"email"}))
    words = re.findall(r"\w+", value)
    output_words = re.findall(r"\w+", output.casefold())
    spaced = " " + " ".join(output_words) + " "
    for seq, _ in index.sources(value):
        assert seq == 5
        # verbatim, or the value's own words (long enough to be one) in order
        assert value.strip() in output or (
            sum(map(len, words)) >= MIN_VALUE_CHARS
            and f" {' '.join(w.casefold() for w in words)} " in spaced)


def test_values_shorter_than_the_minimum_never_flow() -> None:
    index = FlowIndex()
    index.add(1, "abcde abcde abcde", frozenset({"web"}))
    assert index.sources("abcde") == []
    assert MIN_VALUE_CHARS == 6


def test_the_index_budget_drops_the_oldest_outputs() -> None:
    index = FlowIndex(budget_chars=100)
    index.add(1, "first-output-token " * 4, frozenset())
    index.add(2, "second-output-token " * 4, frozenset())
    assert index.sources("first-output-token") == []
    assert index.sources("second-output-token") == [(2, frozenset())]


def test_a_kernel_tool_call_dump_abstracts_with_its_taint() -> None:
    call = ToolCall(tool="fetch", tool_class="http", action="get",
                    parameters={"url": "https://a.io/x"}, taint=({"source": "email"},))
    [event] = Abstractor().abstract(call.model_dump())
    assert event.action == "fetch"
    assert event.args["tool_class"] == "http" and event.args["tool_action"] == "get"
    assert event.args["host"] == "a.io"
    assert event.taint == {"email", "web"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=12))
def test_grounding_any_words_never_raises(words: list[str]) -> None:
    for program in ("curl", "tar", "git", "find", "python", words[0] or "x"):
        action, args = ground_words([program, *words])
        assert action
        assert isinstance(args["flags"], list) and isinstance(args["positionals"], list)


def test_an_index_without_provenance_finds_flows_but_reads_no_identifier(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from callgate.abstraction import _flow

    def forbidden(text: str) -> list[str]:
        raise AssertionError("an index without provenance looked for identifiers")

    monkeypatch.setattr(_flow, "identifiers", forbidden)
    index = FlowIndex(provenance=False)
    index.add(3, "write to alice@example.org about invoice-2024-001 now", frozenset({"email"}))
    assert (3, frozenset({"email"})) in index.sources("invoice-2024-001")
    with pytest.raises(ValueError, match="without provenance"):
        index.origins("alice@example.org")


def test_an_index_with_provenance_remembers_where_an_identifier_first_appeared() -> None:
    index = FlowIndex()
    index.add(3, "write to alice@example.org", frozenset({"email"}))
    index.add(4, "alice@example.org again", frozenset({"web"}))
    assert index.origins("alice@example.org")[0] == (frozenset({"email"}),)


@given(st.text(max_size=60) | st.text(alphabet="AbZz09_ -.İß\u212a", max_size=60))
def test_words_are_folded_as_they_would_be_one_by_one(text: str) -> None:
    from callgate.abstraction._flow import _folded_tokens

    assert _folded_tokens(text) == [t.casefold() for t in re.findall(r"\w+", text)]
