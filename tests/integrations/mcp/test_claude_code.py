"""The real Claude Code CLI with `--mcp-config` pointing at `callgate mcp proxy` in front of the
real filesystem server; a scripted model on 127.0.0.1 asks for the calls."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.integrations.claude_code._model import ScriptedModel, say, tool
from tests.integrations.claude_code.conftest import CLAUDE
from tests.integrations.mcp.conftest import CALLGATE, Gw

pytestmark = pytest.mark.slow


def test_claude_code_reads_through_the_proxy_and_sees_the_denial_with_its_rule(
        gw: Gw, fs_server: Path) -> None:
    if not CLAUDE.exists():
        pytest.skip("the Claude Code CLI is not installed (`make claude-code`)")
    root = gw.tmp / "files"
    root.mkdir()
    (root / "notes.txt").write_text("meeting at noon\n")
    project = gw.tmp / "project"
    project.mkdir()
    gw.write_policy(f"""\
tools:
  mcp__fs__read_text_file:
    filesystem: {{read: ["{root}/**"]}}
    path_params: [path]
""")
    config = gw.tmp / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"fs": {"command": str(CALLGATE), "args": [
        "mcp", "proxy", "--policy", str(gw.policy), "--name", "fs", "--audit", str(gw.audit),
        "--pins", str(gw.pins), "--", str(fs_server), str(root)]}}}))
    model = ScriptedModel([
        tool("mcp__fs__read_text_file", path="/etc/passwd"),
        tool("mcp__fs__read_text_file", path=str(root / "notes.txt")),
        say("done"),
    ])
    env = {**gw.env(), "PATH": f"{CLAUDE.parent}:{Path(sys.executable).parent}:/usr/bin:/bin",
           "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "sk-test",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    try:
        done = subprocess.run(
            [str(CLAUDE), "-p", "read the notes", "--output-format", "json", "--mcp-config",
             str(config), "--strict-mcp-config", "--allowedTools", "mcp__fs"],
            cwd=project, env=env, capture_output=True, text=True, timeout=180, check=False)
    finally:
        model.close()
    results = list(model.tool_results())
    assert len(results) == 2, (done.stdout, done.stderr)
    assert "[tool.filesystem]" in results[0] and "/etc/passwd" in results[0]
    assert "root:" not in results[0]
    assert "meeting at noon" in results[1]
    verdicts = [(d["call"]["tool"], d["decision"]["verdict"]) for d in gw.decisions()]
    assert verdicts == [("mcp__fs__read_text_file", "deny"), ("mcp__fs__read_text_file",
                                                             "allow")]
