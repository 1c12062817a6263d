"""The typed-event ``check`` command exits 2 with a message on a trace line nested too deep."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from callgate.cli._check import check_command

DATA = Path(__file__).parent.parent / "data" / "temporal"


def test_a_line_nested_too_deep_is_an_error_exit_not_a_crash(tmp_path: Path) -> None:
    trace = tmp_path / "deep.jsonl"
    trace.write_text('{"action": "a"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    result = CliRunner().invoke(check_command, ["--policy", str(DATA / "dashcam_policy.yaml"),
                                                str(trace)])
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "deep.jsonl:2: not valid JSON: nests deeper than 64 levels" in result.stderr
