"""Policy test cases run on a fresh kernel: verdicts, reasons, witnesses, obligations, diffs."""

from __future__ import annotations

from pathlib import Path

import pytest

from callgate import PolicyError
from callgate.policy import parse_policy
from callgate.policytest import parse_tests, render, run_tests

POLICY = parse_policy("""
name: t
version: 1
principal:
  name: a
  capabilities:
    - {tool_class: http, actions: [get]}
    - {tool_class: file, actions: [read]}
rules:
  - {id: allow-all, match: {}, decision: allow}
behavior:
  - id: no-fetch-after-read
    rule: always(not (action = fetch and once(action = read_file)))
  - id: ack-reads
    rule: resp(action = read_file, action = ack)
""")

FETCH = "{tool: fetch, tool_class: http, action: get, parameters: {url: 'https://x.org/'}}"
READ = "{tool: read_file, tool_class: file, action: read, parameters: {path: ./a.txt}}"


def _run(text: str, tmp_path: Path) -> list[str]:
    outcomes = run_tests(POLICY, parse_tests(text, "t.yaml", base_dir=tmp_path))
    return [render(o) for o in outcomes if not o.passed]


def test_a_case_that_holds_passes(tmp_path: Path) -> None:
    text = f"""
cases:
  - name: fetch then read, read left open
    steps:
      - call: {FETCH}
        expect: {{verdict: allow, reasons: [allow-all], witness: null}}
        result: {{output: hello}}
      - note: {{action: user_prompt, args: {{p: x}}, taint: [user-provided]}}
      - call: {READ}
        expect: {{verdict: allow}}
      - call: {FETCH}
        expect:
          verdict: deny
          reasons: [no-fetch-after-read]
          witness: {{statement: no-fetch-after-read, events: [4]}}
    obligations: [ack-reads]
"""
    assert _run(text, tmp_path) == []


def test_a_failed_case_names_the_case_step_and_expected_against_got(tmp_path: Path) -> None:
    text = f"""
cases:
  - name: wrong
    steps:
      - call: {READ}
        expect: {{verdict: allow}}
      - call: {FETCH}
        expect: {{verdict: allow, reasons: [allow-all]}}
    obligations: []
"""
    [failure] = _run(text, tmp_path)
    assert failure.splitlines() == [
        "FAIL wrong (t.yaml:3:5)",
        "  step 2: fetch (http.get)",
        "    verdict: expected allow, got deny",
        "    reasons: expected [allow-all], got [no-fetch-after-read]",
        "  end of case:",
        "    open obligations: expected [], got [ack-reads]",
    ]


def test_a_wrong_witness_event_fails(tmp_path: Path) -> None:
    text = f"""
cases:
  - name: witness
    steps:
      - call: {READ}
        expect: {{verdict: allow}}
      - call: {FETCH}
        expect: {{verdict: deny, witness: {{statement: no-fetch-after-read, events: [1]}}}}
"""
    [failure] = _run(text, tmp_path)
    assert ("witness: expected no-fetch-after-read at events [1], got no-fetch-after-read "
            "at events [2]") in failure


def test_a_reported_result_carries_its_taint_to_later_calls(tmp_path: Path) -> None:
    text = f"""
cases:
  - name: taint
    steps:
      - call: {FETCH}
        expect: {{verdict: allow}}
        result: {{output: page, taint: [email]}}
      - call: {FETCH}
        expect: {{verdict: allow}}
"""
    tests = parse_tests(text, "t.yaml", base_dir=tmp_path)
    assert run_tests(POLICY, tests)[0].passed


def test_every_problem_of_a_test_file_is_reported_at_its_place() -> None:
    text = """cases:
  - name: x
    call: {tool: f, tool_class: http, action: get, paramters: {}}
    expect: {verdict: alow}
  - name: y
    steps:
      - call: {tool: f, tool_class: http, action: get}
        expect: {verdict: deny}
        result: {output: 1}
  - name: z
    call: {tool: f, tool_class: http, action: get}
"""
    with pytest.raises(PolicyError) as raised:
        parse_tests(text, "t.yaml")
    assert [str(p) for p in raised.value.problems] == [
        "t.yaml:3:52: unknown key 'paramters'; did you mean 'parameters'? "
        "(cases[0].call.paramters)",
        "t.yaml:4:23: input should be 'allow', 'deny' or 'require-approval' (got 'alow') "
        "(cases[0].expect.verdict)",
        "t.yaml:7:9: a call expected to be denied has no result (cases[1].steps[0])",
        "t.yaml:10:5: a call step needs expect (at least its verdict) (cases[2])",
    ]


@pytest.mark.parametrize(("text", "message"), [
    ("", "the test file is empty"),
    ("cases: []\n", "a test file needs at least one case"),
    ("cases:\n  - {name: a, steps: []}\n", "a case's steps cannot be empty"),
    ("cases: [{name: a, call: {tool: f, tool_class: h, action: g}, expect: {verdict: deny}},"
     " {name: a, call: {tool: f, tool_class: h, action: g}, expect: {verdict: deny}}]\n",
     "duplicate case name 'a'"),
    ("cases:\n  - &x {name: a}\n  - *x\n", "aliases"),
])
def test_a_bad_test_file_is_refused(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_tests(text, "t.yaml")
