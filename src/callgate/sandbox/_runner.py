"""Run one wrapped command: feed stdin, collect output, enforce wall time and output size.

The process starts in its own session so the whole launcher group can be killed at once; the
backends make sure the sandboxed tree dies with its launcher (``--die-with-parent``, a pid
namespace, and the pids cgroup sweep when there is one).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Literal

from callgate._errors import SandboxError

KillReason = Literal["wall", "output"]
_CHUNK = 65536


@dataclass(frozen=True)
class RawRun:
    """What the process did, before any interpretation."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    killed_for: KillReason | None
    duration_ms: float


class _Pump:
    """Shuttles bytes between the process's pipes and memory, counting output."""

    def __init__(self, proc: subprocess.Popen[bytes], stdin: bytes | None, limit: int | None):
        self.proc = proc
        self.pending = memoryview(stdin or b"")
        self.limit = limit
        self.buffers: dict[int, bytearray] = {}
        self.total = 0
        self.selector = selectors.DefaultSelector()
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None  # both are pipes by construction
            self.buffers[stream.fileno()] = bytearray()
            self.selector.register(stream, selectors.EVENT_READ)
        if proc.stdin is not None:
            if self.pending:
                os.set_blocking(proc.stdin.fileno(), False)
                self.selector.register(proc.stdin, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()

    def _write(self, stream: IO[bytes]) -> None:
        try:
            written = os.write(stream.fileno(), self.pending[:_CHUNK])
        except (BrokenPipeError, BlockingIOError) as exc:
            if isinstance(exc, BlockingIOError):
                return
            written = len(self.pending)
        self.pending = self.pending[written:]
        if not self.pending:
            self.selector.unregister(stream)
            stream.close()

    def _read(self, stream: IO[bytes]) -> bool:
        """Read a chunk; False when the output limit is exceeded."""
        data = os.read(stream.fileno(), _CHUNK)
        if not data:
            self.selector.unregister(stream)
            return True
        self.total += len(data)
        self.buffers[stream.fileno()].extend(data)
        return self.limit is None or self.total <= self.limit

    def pump(self, deadline: float | None) -> KillReason | None:
        """Move bytes until both outputs close, the deadline passes or output overflows."""
        try:
            while self.selector.get_map():
                timeout = None if deadline is None else deadline - time.monotonic()
                if timeout is not None and timeout <= 0:
                    return "wall"
                for key, _ in self.selector.select(timeout):
                    stream: IO[bytes] = key.fileobj  # type: ignore[assignment]  # registered as IO streams; typeshed says FileDescriptorLike
                    if stream is self.proc.stdin:
                        self._write(stream)
                    elif not self._read(stream):
                        return "output"
            return None
        finally:
            self.selector.close()

    def output(self, stream: IO[bytes] | None) -> bytes:
        assert stream is not None
        data = bytes(self.buffers[stream.fileno()])
        return data if self.limit is None else data[: self.limit]


def _kill_group(proc: subprocess.Popen[bytes], extra: Callable[[], None] | None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if extra is not None:
        extra()


def run_process(
    argv: Sequence[str],
    *,
    stdin: bytes | None,
    wall_seconds: float | None,
    output_limit: int | None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    kill_extra: Callable[[], None] | None = None,
) -> RawRun:
    """Run ``argv`` to completion or until a wall-time or output limit kills it."""
    start = time.monotonic()
    deadline = None if wall_seconds is None else start + wall_seconds
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env if env is not None else {},
            pass_fds=tuple(pass_fds),
            start_new_session=True,
        )
    except OSError as exc:
        raise SandboxError(f"cannot start {argv[0]}: {exc}") from exc
    with proc:
        try:
            pump = _Pump(proc, stdin, output_limit)
            killed = pump.pump(deadline)
        except BaseException:
            # Never leave a tool running behind an error (Popen's exit would wait for it).
            _kill_group(proc, kill_extra)
            raise
        if killed is not None:
            _kill_group(proc, kill_extra)
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            code = proc.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            # Output closed but the launcher lingers (a child holding no pipe): same limit.
            killed = "wall"
            _kill_group(proc, kill_extra)
            code = proc.wait()
        stdout, stderr = pump.output(proc.stdout), pump.output(proc.stderr)
    return RawRun(
        exit_code=None if killed else code,
        stdout=stdout,
        stderr=stderr,
        killed_for=killed,
        duration_ms=(time.monotonic() - start) * 1000.0,
    )
