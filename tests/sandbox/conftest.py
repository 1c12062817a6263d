"""Fixtures for the sandbox tests: a project tree, a fake home with credentials, a server."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from callgate.policy._schema import ToolPolicy
from callgate.sandbox import SandboxOutcome

#: A PATH that finds the system's programs without leaking this machine's layout.
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class Project:
    """A working directory with sources, a fake home and an undeclared directory beside it."""

    root: Path
    home: Path
    secret_dir: Path

    @property
    def environ(self) -> dict[str, str]:
        return {
            "PATH": SYSTEM_PATH,
            "HOME": str(self.home),
            "SECRET_TOKEN": "s3cret-token-value",
        }


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.txt").write_text("hello from the sources\n")
    (root / ".env").write_text("DB_PASSWORD=hunter2\n")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN FAKE PRIVATE KEY-----\n")
    (home / "notes.txt").write_text("ordinary notes\n")
    secret_dir = tmp_path / "undeclared"
    secret_dir.mkdir()
    (secret_dir / "data.txt").write_text("not for the tool\n")
    return Project(root=root, home=home, secret_dir=secret_dir)


#: The issue's example tool, with the working directory's ./src and ./build.
BUILDER: dict[str, Any] = {
    "risk": "high",
    "filesystem": {"read": ["./src/**"], "write": ["./build/**"]},
    "network": "deny",
    "environment": {"allow": ["PATH", "HOME"]},
    "exec": "allow",
}


def assert_denied(outcome: SandboxOutcome, reason_id: str) -> None:
    """The sandbox stopped something, and says what."""
    assert outcome.confined, outcome
    assert outcome.reason_id == reason_id, outcome
    assert outcome.reason


def connect_code(port: int) -> str:
    """Python source that connects to 127.0.0.1:port and prints what the server says."""
    return (
        f"import socket; s = socket.create_connection(('127.0.0.1', {port}), timeout=2); "
        "print(s.recv(4).decode())"
    )


def policy(**fields: object) -> ToolPolicy:
    """A tool policy from keyword fields, validated like a policy file's entry."""
    return ToolPolicy.model_validate(fields)


@dataclass(frozen=True)
class Server:
    """A TCP server on 127.0.0.1 that answers every connection with ``pong``."""

    port: int
    hits: list[int]


@contextlib.contextmanager
def answering_pong(listener: socket.socket) -> Iterator[list[int]]:
    """Accept connections on a listening socket in a thread, answer ``pong``, count them."""
    listener.settimeout(0.2)
    hits: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                hits.append(1)
                conn.sendall(b"pong")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield hits
    finally:
        stop.set()
        thread.join(timeout=2)
        listener.close()


@pytest.fixture
def server() -> Iterator[Server]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    with answering_pong(listener) as hits:
        yield Server(port=listener.getsockname()[1], hits=hits)


#: This checkout's package sources.
SRC = Path(__file__).resolve().parents[2] / "src"


def readable_copy_of_the_package(top: Path) -> str:
    """A copy of ``src/callgate`` and the installed packages it imports (pydantic, …) under
    ``top``, readable by every uid; its import path."""
    where = top / "pkg"
    shutil.copytree(SRC / "callgate", where / "callgate",
                    ignore=shutil.ignore_patterns("__pycache__"))
    site = {Path(p).resolve() for p in sys.path if p.endswith("site-packages")}
    for name, module in list(sys.modules.items()):
        origin = Path(getattr(module, "__file__", None) or "/").resolve()
        if "." in name or not any(origin.is_relative_to(s) for s in site):
            continue
        source = origin.parent if origin.name == "__init__.py" else origin
        target = where / source.name
        if not target.exists():
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, target)
    for path in (where, *where.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return str(where)


_SIGKILL_BIT = 1 << (9 - 1)


def gone(pid: int) -> bool:
    """True when ``pid`` no longer exists, is a zombie, or has SIGKILL pending."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    pending = int(fields["ShdPnd"], 16) | int(fields["SigPnd"], 16)
    return fields["State"].startswith(("Z", "X")) or bool(pending & _SIGKILL_BIT)


def running_with(marker: str) -> list[int]:
    """Host pids of processes that are not gone and whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmdline and not gone(int(name)):
            found.append(int(name))
    return found
