"""``callgate check``: text and JSON reports, engines, exit codes (0 safe, 1 unsafe, 2 error)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from callgate.cli._check import check_command

DATA = Path(__file__).parent.parent / "data" / "temporal"
POLICY = str(DATA / "dashcam_policy.yaml")


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(check_command, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("engine", ["incremental", "smt"])
def test_unsafe_trace_prints_statement_and_events_and_exits_1(engine: str) -> None:
    code, out, _ = _run("--policy", POLICY, str(DATA / "dashcam_unsafe.jsonl"),
                        "--engine", engine)
    assert code == 1
    assert "unsafe: 1 of 5" in out
    assert "validate-before-consume [block] events 5" in out


def test_json_report_has_verdict_and_violations() -> None:
    code, out, _ = _run("--policy", POLICY, str(DATA / "dashcam_unsafe.jsonl"), "--json")
    assert code == 1
    report = json.loads(out)
    assert report["verdict"] == "unsafe"
    assert [(v["statement"], v["events"]) for v in report["violations"]] == [
        ("validate-before-consume", [5])]


def test_safe_trace_exits_0() -> None:
    code, out, _ = _run("--policy", POLICY, str(DATA / "dashcam_safe.jsonl"), "--json")
    assert code == 0
    assert json.loads(out) == {"verdict": "safe", "violations": []}


def test_bad_trace_line_exits_2_naming_the_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"action": "a"}\nnot json\n', encoding="utf-8")
    code, _, err = _run("--policy", POLICY, str(trace))
    assert code == 2
    assert "t.jsonl:2: not valid JSON" in err


def test_bad_rule_exits_2_naming_file_line_and_column(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "name: p\nversion: 1\nbehavior:\n  - id: r\n    rule: prec(action = a, action = )\n",
        encoding="utf-8",
    )
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"action": "a"}\n', encoding="utf-8")
    code, _, err = _run("--policy", str(policy), str(trace))
    assert code == 2
    assert f"{policy}:5:37: expected a name" in err


def test_missing_policy_option_is_a_usage_error() -> None:
    code, _, _ = _run(str(DATA / "dashcam_safe.jsonl"))
    assert code == 2


def test_an_undecided_statement_is_reported_as_unsafe() -> None:
    from callgate.cli._check import report
    from callgate.temporal import Violation

    unknown = Violation("s", "block", (), "the solver returned unknown (timeout)", "unknown")
    text = report([unknown], [], statements=1, as_json=False)
    assert "s [undecided] events -: the solver returned unknown" in text
    assert json.loads(report([unknown], [], statements=1, as_json=True))["verdict"] == (
        "unsafe")
