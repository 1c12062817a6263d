"""Drafting with a model (``_draft``) behind the real scripted server: how an answer is read,
what is refused and reported per requirement, and what the response cache keys on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.compile import ResponseCache, Signature, provider_from, signature_of_tools
from callgate.compile._draft import MAX_PER_REQUIREMENT, MAX_RULE_CHARS, Drafted, draft_with_model
from callgate.compile._providers import Provider
from callgate.compile._spec import Requirement
from tests.compile.model_server import ModelServer, Raw

TOOLS = {"tools": [
    {"name": "delete_file", "description": "Deletes one file.",
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "hand_off", "inputSchema": {"type": "object", "properties": {
        "file": {"type": "string"}}}},
    {"name": "validate_output", "inputSchema": {"type": "object", "properties": {
        "target": {"type": "string"}}}},
]}
NEVER_DELETE = Requirement("Never delete the source video.", 2)
VALIDATE_FIRST = Requirement("Validate the output before you hand it off.", 3)
GOOD = "abs(action = delete_file)"
ALSO_GOOD = "prec(action = hand_off, action = validate_output)"
UNKNOWN = "abs(action = nope)"
SPEC_SHA = "5" * 64


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running
        assert not running.errors


def signature(tmp_path: Path, tools: dict[str, object] = TOOLS, name: str = "tools.json",
              ) -> Signature:
    path = tmp_path / name
    path.write_text(json.dumps(tools))
    return signature_of_tools(path)


def provider(server: ModelServer) -> Provider:
    return provider_from("openai:scripted", base_url=server.openai_url, environ={})


def answer(*statements: tuple[object, str], unsupported: tuple[tuple[int, str], ...] = ()) -> str:
    return json.dumps({"statements": [{"requirement": n, "rule": r} for n, r in statements],
                       "unsupported": [{"requirement": n, "why": w} for n, w in unsupported]})


def draft(server: ModelServer, tmp_path: Path, *replies: str | Raw,
          requirements: tuple[Requirement, ...] = (NEVER_DELETE,),
          cache: ResponseCache | None = None) -> list[Drafted]:
    server.script(*replies)
    return draft_with_model(list(requirements), signature(tmp_path), provider(server),
                            spec_sha256=SPEC_SHA, cache=cache)


# -- reading the answer ---------------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [
    "{}",
    "```json\n{}\n```",
    "Here is the translation:\n\n```json\n{}\n```\n\nEvery requirement is covered.",
    "Sure. {} Hope this helps.",
])
def test_json_in_a_code_fence_or_among_prose_is_read(
        server: ModelServer, tmp_path: Path, wrap: str) -> None:
    [drafted] = draft(server, tmp_path, wrap.replace("{}", answer((1, GOOD))))
    assert drafted.rules == (GOOD,)
    assert len(server.requests) == 1


def test_an_answer_of_a_megabyte_and_a_half_of_braces_is_read_in_linear_time(
        server: ModelServer, tmp_path: Path) -> None:
    # a regex searching for "{.*}" backtracked quadratically: 76 s of CPU for 500 KB, about ten
    # minutes an attempt for this (the answer is under the providers' 2 MiB)
    hostile = "{" * 1_500_000
    [drafted] = draft(server, tmp_path, hostile, hostile)
    assert drafted.rules == ()
    assert drafted.why_not is not None and "holds no JSON object" in drafted.why_not


@pytest.mark.parametrize("number", [True, False, 0, -1, 2, "1", 1.0, None])
def test_a_requirement_number_that_is_not_one_of_the_numbers_given_is_refused(
        server: ModelServer, tmp_path: Path, number: object) -> None:
    bad = answer((number, GOOD))
    [drafted] = draft(server, tmp_path, bad, bad)
    assert drafted.rules == ()
    assert drafted.why_not is not None and "could not be read" in drafted.why_not
    assert "could not be read" in json.dumps(server.requests[1].json)


def test_a_requirement_number_true_in_the_unsupported_list_is_ignored(
        server: ModelServer, tmp_path: Path) -> None:
    said = json.dumps({"unsupported": [{"requirement": True, "why": "for number true"}]})
    [drafted] = draft(server, tmp_path, said, said)
    assert drafted.why_not == "the model gave no statement for it"


def test_an_object_that_is_neither_list_is_not_the_answer_asked_for(
        server: ModelServer, tmp_path: Path) -> None:
    stray = json.dumps({"requirement": 1, "rule": GOOD})
    [drafted] = draft(server, tmp_path, stray, stray)
    assert drafted.rules == ()
    assert drafted.why_not is not None and "is not {" in drafted.why_not


def test_a_statement_given_twice_is_kept_once(server: ModelServer, tmp_path: Path) -> None:
    [drafted] = draft(server, tmp_path, answer((1, GOOD), (1, f"  {GOOD}\n"), (1, GOOD)))
    assert drafted.rules == (GOOD,)


def test_a_requirement_given_more_than_four_statements_keeps_none_and_says_so(
        server: ModelServer, tmp_path: Path) -> None:
    five = [(1, f'abs(action = delete_file and path = "/v{i}")') for i in range(5)]
    assert len(five) == MAX_PER_REQUIREMENT + 1
    [drafted] = draft(server, tmp_path, answer(*five), answer(*five))
    assert drafted.rules == ()
    assert drafted.why_not is not None
    assert f"more than {MAX_PER_REQUIREMENT} statements for it (5)" in drafted.why_not
    retry = json.dumps(server.requests[1].json)
    assert f"at most {MAX_PER_REQUIREMENT}" in retry


def test_four_statements_are_kept(server: ModelServer, tmp_path: Path) -> None:
    four = [(1, f'abs(action = delete_file and path = "/v{i}")') for i in range(4)]
    [drafted] = draft(server, tmp_path, answer(*four))
    assert drafted.rules == tuple(rule for _, rule in four)


def test_a_statement_over_the_length_limit_is_refused_unparsed(
        server: ModelServer, tmp_path: Path) -> None:
    # valid, and slow to parse: 60,000 atoms would take the parser most of a minute
    long = "abs(" + " and ".join(["action = delete_file"] * 60_000) + ")"
    [drafted] = draft(server, tmp_path, answer((1, long)), answer((1, long)))
    assert drafted.rules == ()
    assert drafted.why_not is not None
    assert f"over the {MAX_RULE_CHARS} a statement may be" in drafted.why_not
    assert len(drafted.why_not) < 2_000  # the statement is quoted in part


def test_a_lone_surrogate_is_refused_in_a_statement_and_replaced_in_a_reason(
        server: ModelServer, tmp_path: Path) -> None:
    # a JSON escape the policy file (UTF-8) cannot carry
    bad = answer((1, 'abs(action = delete_file and path = "x\ud800")'),
                 unsupported=((2, "cannot \udc00 say"),))
    drafted = draft(server, tmp_path, bad, bad, requirements=(NEVER_DELETE, VALIDATE_FIRST))
    assert [d.rules for d in drafted] == [(), ()]
    assert drafted[0].why_not is not None and "lone surrogate" in drafted[0].why_not
    assert drafted[1].why_not == "cannot ? say"
    for why in (d.why_not or "" for d in drafted):
        why.encode("utf-8")


# -- what is reported when nothing is kept -----------------------------------------------------


def test_a_retry_that_gives_nothing_keeps_the_first_attempts_problems(
        server: ModelServer, tmp_path: Path) -> None:
    [drafted] = draft(server, tmp_path, answer((1, UNKNOWN)), answer())
    assert drafted.rules == ()
    assert drafted.why_not is not None
    assert drafted.why_not.startswith("the model's statement was refused: 'abs(action = nope)'")
    assert "action 'nope' is not in the signature" in drafted.why_not


def test_a_retry_that_gives_nothing_after_an_unreadable_answer_says_it_was_unreadable(
        server: ModelServer, tmp_path: Path) -> None:
    [drafted] = draft(server, tmp_path, "I would rather not.", answer())
    assert drafted.why_not == ("the model's answer could not be read: the answer holds no JSON "
                               "object")


def test_a_retry_that_fails_keeps_the_first_attempts_problems_too(
        server: ModelServer, tmp_path: Path) -> None:
    [drafted] = draft(server, tmp_path, answer((1, UNKNOWN)), Raw(503, b"overloaded"))
    assert drafted.why_not is not None
    assert "action 'nope' is not in the signature" in drafted.why_not
    assert "the model service failed" in drafted.why_not and "503" in drafted.why_not


def test_the_models_reason_is_reported_when_a_retry_gives_nothing(
        server: ModelServer, tmp_path: Path) -> None:
    drafted = draft(server, tmp_path, answer((2, UNKNOWN), unsupported=((1, "no such step"),)),
                    answer(), requirements=(NEVER_DELETE, VALIDATE_FIRST))
    assert drafted[0].why_not == "no such step"
    assert drafted[1].why_not is not None and "'nope'" in drafted[1].why_not


def test_what_was_kept_on_the_first_attempt_stays_when_the_retry_fails(
        server: ModelServer, tmp_path: Path) -> None:
    drafted = draft(server, tmp_path, answer((1, GOOD), (2, UNKNOWN)), Raw(500, b"down"),
                    requirements=(NEVER_DELETE, VALIDATE_FIRST))
    assert drafted[0].rules == (GOOD,) and drafted[0].why_not is None
    assert drafted[1].rules == ()
    assert drafted[1].why_not is not None and "'nope'" in drafted[1].why_not


# -- the response cache ---------------------------------------------------------------------------


def test_two_services_serving_the_same_model_name_do_not_share_answers(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    sig = signature(tmp_path)
    with ModelServer() as first, ModelServer() as second:
        first.script(answer((1, GOOD)))
        second.script(answer((1, ALSO_GOOD)))
        drafts = [draft_with_model([NEVER_DELETE], sig, provider(each), spec_sha256=SPEC_SHA,
                                   cache=cache)[0].rules for each in (first, second)]
        asked = [len(first.requests), len(second.requests)]
    assert drafts == [(GOOD,), (ALSO_GOOD,)]
    assert asked == [1, 1]


def test_the_same_service_is_asked_once_however_its_credentials_are_given(
        server: ModelServer, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    sig = signature(tmp_path)
    server.script(answer((1, GOOD)))
    for base in (server.openai_url, server.openai_url + "/",
                 server.openai_url.replace("http://", "http://user:hunter2pass@")):
        asked = provider_from("openai:scripted", base_url=base, environ={})
        [drafted] = draft_with_model([NEVER_DELETE], sig, asked, spec_sha256=SPEC_SHA,
                                     cache=cache)
        assert drafted.rules == (GOOD,)
    assert len(server.requests) == 1
    stored = "".join(path.read_text() for path in (tmp_path / "cache").iterdir())
    assert "hunter2pass" not in stored


def test_a_tool_description_the_prompt_carries_is_in_the_cache_key(
        server: ModelServer, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    described = json.loads(json.dumps(TOOLS))
    described["tools"][0]["description"] = "Deletes one file. Never the source video."
    plain, other = signature(tmp_path), signature(tmp_path, described, "described.json")
    assert plain.sha256() == other.sha256()  # Σ's digest leaves descriptions out
    server.script(answer((1, GOOD)), answer((1, ALSO_GOOD)))
    drafts = [draft_with_model([NEVER_DELETE], sig, provider(server), spec_sha256=SPEC_SHA,
                               cache=cache)[0].rules for sig in (plain, other)]
    assert drafts == [(GOOD,), (ALSO_GOOD,)]
    assert len(server.requests) == 2


def test_an_answer_for_other_requirements_of_the_same_spec_is_not_reused(
        server: ModelServer, tmp_path: Path) -> None:
    # the requirements left to the model changed (another version of the phrasing rules):
    # requirement 1 now names another sentence, so the cached answer must not be read for it
    cache = ResponseCache(tmp_path / "cache")
    sig = signature(tmp_path)
    server.script(answer((1, GOOD)), answer((1, ALSO_GOOD)))
    before = draft_with_model([NEVER_DELETE], sig, provider(server), spec_sha256=SPEC_SHA,
                              cache=cache)
    after = draft_with_model([VALIDATE_FIRST], sig, provider(server), spec_sha256=SPEC_SHA,
                             cache=cache)
    assert [before[0].rules, after[0].rules] == [(GOOD,), (ALSO_GOOD,)]
    assert len(server.requests) == 2


def test_a_model_answer_with_a_lone_surrogate_is_cached(
        server: ModelServer, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    content = "\ud800" + answer((1, GOOD))  # UTF-8 cannot encode it; the entry is ASCII JSON
    reply = Raw(200, json.dumps({"choices": [{"message": {"content": content}}]}).encode())
    first = draft(server, tmp_path, reply, cache=cache)
    again = draft_with_model([NEVER_DELETE], signature(tmp_path), provider(server),
                             spec_sha256=SPEC_SHA, cache=cache)
    assert first == again and first[0].rules == (GOOD,)
    assert len(server.requests) == 1
