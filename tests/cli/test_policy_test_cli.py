"""``callgate policy test``: exit codes, and --generate pinning a recorded run that then passes."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from callgate import Kernel, load_policy
from callgate.audit import AuditStore
from callgate.cli._policy import policy

POLICY = """name: t
version: 1
principal:
  name: a
  capabilities: [{tool_class: http, actions: [get]}]
rules:
  - {id: allow-get, match: {action: get}, decision: allow}
"""


def _files(tmp_path: Path, tests: str) -> tuple[str, str]:
    (tmp_path / "p.yaml").write_text(POLICY)
    (tmp_path / "t.yaml").write_text(tests)
    return str(tmp_path / "p.yaml"), str(tmp_path / "t.yaml")


def test_passing_failing_and_bad_test_files_exit_0_1_and_2(tmp_path: Path) -> None:
    call = "{tool: f, tool_class: http, action: get, parameters: {url: 'https://x.org/'}}"
    for verdict, code in (("allow", 0), ("deny", 1), ("maybe", 2)):
        case = f"{{name: c, call: {call}, expect: {{verdict: {verdict}}}}}"
        p, t = _files(tmp_path, f"cases: [{case}]\n")
        done = CliRunner().invoke(policy, ["test", p, t])
        assert done.exit_code == code, done.output


def test_generate_pins_a_recorded_run_that_then_passes(tmp_path: Path) -> None:
    p, _ = _files(tmp_path, "")
    audit = str(tmp_path / "a.db")
    with Kernel(load_policy(p), audit=audit, working_dir=tmp_path) as kernel:
        got = kernel.check({"tool": "f", "tool_class": "http", "action": "get",
                            "parameters": {"url": "https://x.org/"}})
        kernel.report(got.call_id, output="page")
        kernel.check({"tool": "f", "tool_class": "http", "action": "post",
                      "parameters": {"url": "https://x.org/"}})
        run_id = kernel.run_id
    out = str(tmp_path / "pinned.yaml")
    done = CliRunner().invoke(policy, ["test", p, "--generate", "--audit", audit, "--run", run_id,
                                       "-o", out])
    assert done.exit_code == 0, done.output
    text = Path(out).read_text()
    assert "capability.missing" in text and "output: page" in text
    done = CliRunner().invoke(policy, ["test", p, out])
    assert done.exit_code == 0, done.output
    assert "1 passed, 0 failed" in done.output


def test_generate_from_an_unknown_run_is_bad_input(tmp_path: Path) -> None:
    p, _ = _files(tmp_path, "")
    audit = str(tmp_path / "a.db")
    Kernel(load_policy(p), audit=audit).close()
    done = CliRunner().invoke(policy, ["test", p, "--generate", "--audit", audit, "--run", "nope"])
    assert done.exit_code == 2


def test_generate_needs_no_policy_works_on_the_demo_log_and_refuses_a_tampered_one(
        tmp_path: Path) -> None:
    from callgate.cli import main

    db = tmp_path / "demo.db"
    assert CliRunner().invoke(main, ["demo", "--audit", str(db)]).exit_code == 0
    with AuditStore.open(db, read_only=True) as store:
        (run_id,) = store.run_ids()
    out = tmp_path / "pinned.yaml"
    done = CliRunner().invoke(policy, ["test", "--generate", "--audit", str(db), "--run", run_id,
                                       "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert out.read_text().count("verdict:") == 8
    segment = tmp_path / "demo.db.log"
    segment.write_text(segment.read_text().replace('"verdict":"deny"', '"verdict":"ALOW"', 1))
    refused = CliRunner().invoke(policy, ["test", "--generate", "--audit", str(db), "--run",
                                          run_id])
    assert refused.exit_code == 2 and "does not verify" in refused.output
