"""Helpers for benchmarks that measure the working tree next to a git revision in one run.

``worktree(rev)`` checks a revision out into a temporary ``git worktree`` (removed afterwards);
its ``src`` goes first on a child's ``PYTHONPATH``, so the child imports that revision's
``callgate`` instead of the editable install. ``native_build(tree, target)`` makes a tree's
compiled build (the modules mypyc compiles, as ``make native`` does) for a child to import the
same way. ``Worker`` is such a child, kept running: it
answers one JSON request per line on stdin with one JSON line on stdout, so measurements of two
trees can alternate without paying an interpreter start each time. A worker that dies is
reported as an error for the request it was given and started again for the next one.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]


def git(*args: str) -> str:
    """Output of a git command in the repository (stripped); raises on failure."""
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def describe(rev: str) -> dict[str, str]:
    """The full commit id and subject of ``rev``."""
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    subject = git("log", "-1", "--format=%s", sha)
    return {"rev": rev, "commit": sha, "subject": subject[:120]}


def working_tree_state() -> dict[str, Any]:
    """HEAD and the files under src/ that differ from it (others may be editing them)."""
    head = describe("HEAD")
    changed = git("status", "--porcelain", "--", "src").splitlines()
    return {**head, "rev": "working tree", "src_changes": [line.strip() for line in changed]}


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """A detached worktree of ``rev`` in a temporary directory, removed on exit."""
    target = Path(tempfile.mkdtemp(prefix="bench-worktree-"))
    try:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet",
                        str(target), rev], check=True, capture_output=True, text=True)
        yield target
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(target)],
                       check=False, capture_output=True)
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=False,
                       capture_output=True)


def native_build(tree: Path, target: Path) -> Path:
    """The compiled build of the tree at ``tree`` (its ``pyproject.toml``, ``README.md`` and
    ``src``), made as ``make native`` makes it, in ``target``: returns the directory to put
    first on ``PYTHONPATH``. Raises ``RuntimeError`` with the build's last lines on failure."""
    copy = target / "tree"
    copy.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(tree / name, copy / name)
    shutil.copytree(tree / "src", copy / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    env = {**os.environ, "HATCH_BUILD_HOOK_ENABLE_MYPYC": "true"}
    site, dist = target / "site", target / "dist"

    def run(*argv: str) -> None:
        done = subprocess.run([sys.executable, "-m", "pip", *argv], cwd=copy, env=env,
                              capture_output=True, text=True, check=False)
        if done.returncode:
            tail = (done.stdout + done.stderr).strip().splitlines()[-8:]
            raise RuntimeError("compiled build failed: " + " | ".join(tail))

    run("wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), ".")
    run("install", "-q", "--no-deps", "--target", str(site),
        *map(str, dist.glob("callgate-*.whl")))
    return site


def child_env(src: Path) -> dict[str, str]:
    """The environment of a child that must import ``callgate`` from ``src``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    old = os.environ.get("PYTHONPATH")
    env["PYTHONPATH"] = str(src) + (os.pathsep + old if old else "")
    env["PYTHONHASHSEED"] = "0"
    return env


class Worker:
    """A long-running child answering JSON requests, one line each way."""

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self._argv = list(argv)
        self._env = env
        self._cwd = cwd
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in close()
            self._proc = subprocess.Popen(self._argv, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=self._stderr,
                                          env=self._env, cwd=self._cwd, text=True, bufsize=1)
        return self._proc

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return " | ".join(self._stderr.read().strip().splitlines()[-3:])[-600:]

    def send(self, message: dict[str, Any]) -> str | None:
        """Send one request without waiting; the problem if it could not be sent."""
        proc = self._start()
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            tail = self._stderr_tail()
            self.close()
            return f"{self.name} worker died ({type(exc).__name__}): {tail}"
        return None

    def receive(self, timeout_s: float = 600.0) -> dict[str, Any]:
        """The answer to the request sent last, or ``{"error": ...}`` if it died or hung."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            return {"error": f"{self.name} worker is not running"}
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        if not ready:
            self.close()
            return {"error": f"{self.name} worker gave no answer in {timeout_s:.0f} s"}
        line = proc.stdout.readline()
        if not line:
            tail = self._stderr_tail()
            self.close()
            return {"error": f"{self.name} worker died: {tail}"}
        try:
            answer: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            return {"error": f"{self.name} worker printed something else: {line[:200]!r}"}
        return answer

    def request(self, message: dict[str, Any], timeout_s: float = 600.0) -> dict[str, Any]:
        """Send one request and wait for its answer (``{"error": ...}`` if the child failed)."""
        problem = self.send(message)
        if problem is not None:
            return {"error": problem}
        return self.receive(timeout_s)

    def close(self) -> None:
        """Stop the child (closing its stdin ends its loop) and forget it."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
