"""Example in-process tools declared in code with ``callgate.declare``.

Each tool's policy says what its body may touch; ``callgate lint-tools examples/tools_module.py``
checks that the bodies do no more, and ``callgate manifest generate examples/tools_module.py``
writes the reviewable manifest of all three.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import callgate
from callgate import ToolPolicy


def _report_path(name: str) -> Path:
    return Path("out") / f"{name}.md"


def _save(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


@callgate.declare(
    ToolPolicy(risk="medium", filesystem={"read": [], "write": ["./out/**"]}, network="deny",
               environment="deny", exec="deny", constraints={"max_invocations": 3}),
    tool_class="file", action="write",
)
def write_report(name: str, text: str) -> str:
    """Write a Markdown report under ./out and return its path."""
    path = _report_path(name)
    _save(path, text)
    return str(path)


@callgate.declare(
    ToolPolicy(risk="low", filesystem={"read": ["./data/**"], "write": []}, network="deny",
               environment="deny", exec="deny"),
    tool_class="file", action="read",
)
def read_notes(name: str) -> str:
    """Read a note from ./data."""
    with open(Path("data") / name, encoding="utf-8") as handle:
        return handle.read()


@callgate.declare(
    ToolPolicy(risk="high", filesystem={"read": ["./**"], "write": []}, network="deny",
               environment={"allow": ["PATH"]}, exec="allow",
               limits={"cpu_seconds": 10, "wall_seconds": 30}),
    name="git_status", tool_class="shell", action="exec",
)
def git_status() -> str:
    """The working tree's ``git status --short``."""
    done = subprocess.run(["git", "status", "--short"], capture_output=True, text=True,
                          env={"PATH": os.environ.get("PATH", "")}, check=False)
    return done.stdout
