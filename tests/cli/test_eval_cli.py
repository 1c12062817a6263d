"""``callgate eval agentdojo`` as users run it: a real process over both sample variants."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.evaluation.conftest import DEV, LATER, run

CALLGATE = str(Path(sys.executable).parent / "callgate")


def _eval(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CALLGATE, "eval", "agentdojo", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def test_both_variants_are_scored_in_one_process_with_json_markdown_and_plots(
        tmp_path: Path) -> None:
    out, report = tmp_path / "result.json", tmp_path / "report"
    done = _eval(str(DEV), str(LATER), "--pack", "agentdojo", "--json", str(out),
                 "--report", str(report))
    assert done.returncode == 0, done.stderr
    assert "dev-sample.jsonl" in done.stdout and "v1_2-sample.jsonl.gz" in done.stdout
    result = json.loads(out.read_text())
    for scope in (result["overall"], *result["suites"].values(), *result["files"].values()):
        for key in ("tp", "fp", "fn", "tn", "precision", "recall", "f1",
                    "no_attack_flagged_rate"):
            assert key in scope
        assert all(0.0 <= scope[k] <= 1.0 for k in ("precision", "recall", "f1"))
    assert set(result["suites"]) == {"banking", "slack", "travel", "workspace"}
    assert result["overall"]["runs"] == 24
    assert result["overall"]["tp"] == 8 and result["overall"]["fn"] == 0
    flagged = result["flagged"]
    assert flagged and all(f["statement"] and f["call"] and f["message"] for f in flagged)
    for name in ("report.md", "flagged.md", "scores.png", "outcomes.png", "time.png"):
        assert (report / name).stat().st_size > 0
    assert "## Per statement" in (report / "report.md").read_text()


def test_the_smt_engine_gives_the_same_counts(tmp_path: Path) -> None:
    outs = []
    for engine in ("incremental", "smt"):
        out = tmp_path / f"{engine}.json"
        assert _eval(str(DEV), "--engine", engine, "--json", str(out)).returncode == 0
        outs.append(json.loads(out.read_text())["overall"])
    keys = ("tp", "fp", "fn", "tn")
    assert [outs[0][k] for k in keys] == [outs[1][k] for k in keys]


def test_malformed_input_exits_2_naming_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(run()) + "\n" + json.dumps({**run(), "surprise": 1}) + "\n")
    done = _eval(str(bad))
    assert done.returncode == 2
    assert f"{bad}:2" in done.stderr and "surprise" in done.stderr


def test_a_suite_without_a_policy_is_an_error_naming_the_run(tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(run(suite="shopping")) + "\n")
    done = _eval(str(other))
    assert done.returncode == 2 and "no policy for suite 'shopping'" in done.stderr
    assert f"{other}:1" in done.stderr


def test_a_policy_dir_replaces_the_pack_and_its_errors_name_their_place(
        tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "banking.yaml").write_text("name: b\nversion: 1\nbehavior:\n  - id: x\n"
                                           "    rule: abs(action = )\n")
    sample = tmp_path / "bank.jsonl"
    sample.write_text(json.dumps(run()) + "\n")
    done = _eval(str(sample), "--policy-dir", str(policies))
    assert done.returncode == 2 and "banking.yaml:5" in done.stderr


@pytest.mark.parametrize("flags", [["--pack", "agentdojo", "--policy-dir", "."],
                                   ["--pack", "nosuch"]])
def test_bad_options_are_refused(flags: list[str]) -> None:
    done = _eval(str(DEV), *flags)
    assert done.returncode == 2


def test_files_of_the_same_name_are_told_apart(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "runs.jsonl").write_text(json.dumps(run()) + "\n")
    out = tmp_path / "r.json"
    done = _eval(str(tmp_path / "a" / "runs.jsonl"), str(tmp_path / "b" / "runs.jsonl"),
                 "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert "a/runs.jsonl" in done.stdout and "b/runs.jsonl" in done.stdout
    assert len(json.loads(out.read_text())["files"]) == 2


def test_report_without_matplotlib_is_refused_before_judging(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from click.testing import CliRunner

    from callgate.cli._eval import eval_group

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else found(name, *a))
    result = CliRunner().invoke(eval_group, ["agentdojo", str(DEV), "--report",
                                             str(tmp_path / "r")])
    assert result.exit_code == 2 and "callgate[eval]" in result.output
    assert not (tmp_path / "r").exists()
