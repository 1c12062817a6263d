"""The manifest and lint-tools commands, run as real subprocesses the way CI runs them."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from callgate.manifest import manifest_of, render
from tests.conftest import EXAMPLE, ROOT
from tests.manifest.conftest import TOOLS_MODULE

CLI = [sys.executable, "-m", "callgate.manifest"]
HOOKS = ROOT / ".pre-commit-hooks.yaml"

POLICY = """\
name: agent
version: 1
tools:
  upload:
    risk: medium
    filesystem: {write: ["/srv/uploads/**"]}
    network: deny
    exec: deny
"""


def run(*args: str, cwd: Path | None = None, seed: str = "0") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=60, check=False)


def write_policy(tmp_path: Path, text: str, name: str = "policy.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_generate_prints_the_same_bytes_on_every_run(tmp_path: Path) -> None:
    first = run("generate", str(EXAMPLE), seed="1")
    second = run("generate", str(EXAMPLE), seed="2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert first.stdout == render(manifest_of(str(EXAMPLE)), "json")
    assert json.loads(first.stdout)["tools"]["write_report"]["network"] == {"mode": "deny"}


def test_generate_writes_yaml_by_extension_and_verify_passes_against_itself(
        tmp_path: Path) -> None:
    policy = write_policy(tmp_path, POLICY)
    baseline = tmp_path / "manifest.yaml"
    done = run("generate", str(policy), "--out", str(baseline))
    assert done.returncode == 0, done.stderr
    assert "\ncallgate_manifest: 1\n" in baseline.read_text()
    check = run("verify", "--baseline", str(baseline), str(policy))
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout == ""
    assert "no widening" in check.stderr


def test_verify_exits_one_with_one_line_per_widening(tmp_path: Path) -> None:
    baseline = tmp_path / "manifest.json"
    assert run("generate", str(write_policy(tmp_path, POLICY)), "--out",
               str(baseline)).returncode == 0
    widened = write_policy(tmp_path, POLICY.replace('"/srv/uploads/**"', '"/**"')
                           .replace("exec: deny", "exec: allow") + "  shell:\n    risk: high\n",
                           "widened.yaml")
    check = run("verify", "--baseline", str(baseline), str(widened))
    assert check.returncode == 1
    assert check.stdout.splitlines() == [
        "[high] tool.added shell: new tool (risk high)",
        "[medium] tool.filesystem.write.widened upload: filesystem.write covers more than "
        "before: /**",
        "[medium] tool.exec.widened upload: exec opened from deny to allow",
    ]


def test_verify_passes_pure_narrowing(tmp_path: Path) -> None:
    baseline = tmp_path / "manifest.json"
    assert run("generate", str(write_policy(tmp_path, POLICY)), "--out",
               str(baseline)).returncode == 0
    narrowed = write_policy(tmp_path, POLICY.replace("/srv/uploads/**", "/srv/uploads/a/**")
                            .replace("risk: medium", "risk: low"), "narrowed.yaml")
    check = run("verify", "--baseline", str(baseline), str(narrowed))
    assert check.returncode == 0, check.stdout


def test_verify_accepts_a_generated_manifest_as_current(tmp_path: Path) -> None:
    baseline, current = tmp_path / "base.json", tmp_path / "current.yaml"
    assert run("generate", str(write_policy(tmp_path, POLICY)), "--out",
               str(baseline)).returncode == 0
    wide = write_policy(tmp_path, POLICY.replace("network: deny", "network: allow"), "w.yaml")
    assert run("generate", str(wide), "--out", str(current)).returncode == 0
    check = run("verify", "--baseline", str(baseline), str(current))
    assert check.returncode == 1
    assert "tool.network.widened upload" in check.stdout


def test_tampered_baseline_exits_two(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, POLICY)
    baseline = tmp_path / "manifest.json"
    assert run("generate", str(policy), "--out", str(baseline)).returncode == 0
    # Someone "approves" a wider stance by editing the reviewed file instead of regenerating.
    baseline.write_text(baseline.read_text().replace('"/srv/uploads/**"', '"/**"'))
    check = run("verify", "--baseline", str(baseline), str(policy))
    assert check.returncode == 2
    assert "hash mismatch" in check.stderr


def test_bad_inputs_exit_two(tmp_path: Path) -> None:
    broken = write_policy(tmp_path, "name: x\nversion: 1\nrules: 7\n", "broken.yaml")
    done = run("generate", str(broken))
    assert done.returncode == 2
    assert "broken.yaml:3" in done.stderr
    assert run("generate", "no_such_module_for_callgate").returncode == 2
    assert run("verify", "--baseline", str(tmp_path / "none.json"), str(EXAMPLE)).returncode == 2


def test_lint_tools_passes_the_example_and_fails_an_undeclared_use(tmp_path: Path) -> None:
    clean = run("lint-tools", str(TOOLS_MODULE))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    bad = tmp_path / "bad_tools.py"
    bad.write_text("import os\nfrom callgate import ToolPolicy, declare\n\n\n"
                   "@declare(ToolPolicy(exec='deny'))\ndef shell(cmd: str) -> int:\n"
                   "    return os.system(cmd)\n")
    failed = run("lint-tools", str(bad))
    assert failed.returncode == 1
    assert failed.stdout.startswith(f"[error] lint.exec shell: {bad}:7: os.system ")
    assert run("lint-tools", str(tmp_path / "missing.py")).returncode == 2


def test_commands_are_usable_from_the_exported_click_objects(tmp_path: Path) -> None:
    code = ("from callgate.cli._manifest import manifest_group; "
            f"manifest_group(['generate', '--format', 'yaml', {str(EXAMPLE)!r}])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "write_report:" in done.stdout
    code = ("from callgate.cli._manifest import lint_tools_command; "
            f"lint_tools_command([{str(TOOLS_MODULE)!r}])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_generate_check_fails_when_the_committed_manifest_is_stale(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, POLICY)
    committed = tmp_path / "manifest.json"
    assert run("generate", str(policy), "--out", str(committed)).returncode == 0
    assert run("generate", str(policy), "--out", str(committed), "--check").returncode == 0
    narrowed = write_policy(tmp_path, POLICY.replace("risk: medium", "risk: low"), "n.yaml")
    stale = run("generate", str(narrowed), "--out", str(committed), "--check")
    assert stale.returncode == 1
    assert "out of date" in stale.stderr
    assert committed.read_text() == render(manifest_of(str(policy)), "json")


CALLGATE = str(Path(sys.executable).with_name("callgate"))


def test_pre_commit_hooks_run_as_declared(tmp_path: Path) -> None:
    hooks = {h["id"]: h for h in yaml.safe_load(HOOKS.read_text())}
    assert set(hooks) == {"callgate-manifest-verify", "callgate-manifest-current",
                          "callgate-lint-tools"}
    policy = write_policy(tmp_path, POLICY)
    baseline = tmp_path / "manifest.json"
    assert run("generate", str(policy), "--out", str(baseline)).returncode == 0
    args = {
        "callgate-manifest-verify": ["--baseline", str(baseline), str(policy)],
        "callgate-manifest-current": [str(policy), "--out", str(baseline)],
        "callgate-lint-tools": [str(TOOLS_MODULE)],
    }
    for hook_id, hook in hooks.items():
        assert hook["language"] == "python" and hook["pass_filenames"] is False
        program, *rest = shlex.split(hook["entry"])
        assert program == "callgate"  # the console script pre-commit installs
        done = subprocess.run([CALLGATE, *rest, *args[hook_id]], capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, (hook_id, done.stdout, done.stderr)
    # And the verify hook fails the commit on a widening.
    policy.write_text(POLICY.replace("exec: deny", "exec: allow"))
    program, *rest = shlex.split(hooks["callgate-manifest-verify"]["entry"])
    done = subprocess.run([CALLGATE, *rest, *args["callgate-manifest-verify"]],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "tool.exec.widened upload" in done.stdout
