"""The real Claude Code CLI against a scripted model, in a fresh project with a temporary HOME."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from callgate.integrations.claude_code import install
from tests.integrations.claude_code._model import ScriptedModel, Turn

ROOT = Path(__file__).resolve().parents[3]
CLAUDE = ROOT / ".cache" / "claude-code" / "node_modules" / ".bin" / "claude"
CALLGATE = Path(sys.executable).parent / "callgate"


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    if not CLAUDE.exists():
        if os.environ.get("CI"):
            pytest.fail("the Claude Code CLI is missing: `make claude-code` installs it")
        pytest.skip("the Claude Code CLI is not installed (`make claude-code`)")
    return CLAUDE


@dataclass
class Session:
    """What one `claude -p` run gave."""

    result: dict[str, Any]
    stdout: str
    stderr: str
    model: ScriptedModel

    @property
    def denials(self) -> list[dict[str, Any]]:
        return list(self.result.get("permission_denials", []))


@dataclass
class Project:
    """A project with callgate installed, and how to run Claude Code in it."""

    root: Path
    home: Path
    claude: Path

    @property
    def state(self) -> Path:
        return self.root / ".callgate"

    def env(self, model_url: str) -> dict[str, str]:
        path = f"{self.claude.parent}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
        return {"HOME": str(self.home), "PATH": path, "ANTHROPIC_BASE_URL": model_url,
                "ANTHROPIC_API_KEY": "sk-test", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1", "CALLGATE_HOOK_IDLE_S": "120",
                "XDG_RUNTIME_DIR": str(self.home / "run"), "GIT_AUTHOR_NAME": "t",
                "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@example.com"}

    def callgate(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**self.env("http://127.0.0.1:9"), "XDG_RUNTIME_DIR": str(self.home / "run")}
        return subprocess.run([str(CALLGATE), *args], cwd=self.root, env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    def settings(self, **extra: Any) -> None:
        """Add keys to the project's .claude/settings.json (next to the hooks)."""
        path = self.root / ".claude" / "settings.json"
        data = json.loads(path.read_text())
        data.update(extra)
        path.write_text(json.dumps(data, indent=2))

    def run(self, turns: list[Turn], prompt: str = "go", *, timeout: float = 180) -> Session:
        model = ScriptedModel(turns)
        try:
            done = subprocess.run(
                [str(self.claude), "-p", prompt, "--output-format", "json"], cwd=self.root,
                env=self.env(model.url), capture_output=True, text=True, timeout=timeout,
                check=False)
        finally:
            model.close()
        try:
            result = json.loads(done.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"claude printed no JSON result:\n{done.stdout}\n{done.stderr}")
        return Session(result, done.stdout, done.stderr, model)

    def stop_daemon(self) -> None:
        pid_file = self.state / "daemon.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)


@pytest.fixture
def project(tmp_path: Path, claude_bin: Path) -> Iterator[Project]:
    root, home = tmp_path / "proj", tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / "run").mkdir(mode=0o700)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nSECRETKEYMATERIAL"
                                          "b3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE "
                                          "KEY-----\n")
    root.mkdir()
    made = Project(root, home, claude_bin)
    done = made.callgate("init", "claude-code")
    assert done.returncode == 0, done.stderr
    yield made
    made.stop_daemon()
    shutil.rmtree(home / "run", ignore_errors=True)


@pytest.fixture
def proj(tmp_path: Path) -> Iterator[Path]:
    """A project with the hook installed (no policy: the default one); its resident process
    is stopped afterwards."""
    root = tmp_path / "proj"
    root.mkdir()
    install(root / ".claude" / "settings.json", root / ".callgate", root, policy=None)
    yield root
    pid = root / ".callgate" / "daemon.pid"
    if pid.exists():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid.read_text()), signal.SIGTERM)
