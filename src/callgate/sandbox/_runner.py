"""Run one wrapped command: feed stdin, collect output, enforce wall time and output size.

The process (the *launcher*: bwrap, firejail, or the tool itself when unconfined) starts in a
session of its own, so its whole process group can be killed at once. When the run ends,
nothing of it is left behind, running or as a zombie:

* the launcher is watched through a pidfd; once it has exited (and before it is reaped, so its
  process group id cannot have been reused) every process left in its group is killed — an
  unconfined tool's background children die with it, as a sandboxed tool's die with its pid
  namespace;
* a backend's ``on_exit`` hook then waits for what it started outside that group (bwrap's
  sandbox init, see ``_gate``);
* processes of the run that were orphaned and handed to this process (it is a child subreaper,
  or pid 1 of a container) are reaped: they are children of this process in the launcher's
  process group, found with ``waitid(P_PGID)`` and never confused with the host's own children.

The backends make sure the sandboxed tree dies with its launcher (``--die-with-parent``, a pid
namespace, and the pids cgroup sweep when there is one).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
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
#: How long the end of a run waits for killed processes to be gone (they were sent SIGKILL).
SETTLE_SECONDS = 5.0

log = logging.getLogger("callgate.sandbox")


@dataclass(frozen=True)
class RawRun:
    """What the process did, before any interpretation."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    killed_for: KillReason | None
    duration_ms: float


def pidfd(pid: int) -> int | None:
    """A pidfd for ``pid`` (readable once it has exited), or None where the kernel has none."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def wait_readable(fd: int, timeout: float | None) -> bool:
    """True once ``fd`` is readable (a pidfd: its process exited), False at the timeout."""
    poller = select.poll()  # no descriptor of its own, unlike an epoll selector
    poller.register(fd, select.POLLIN)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        wait = None if deadline is None else max(deadline - time.monotonic(), 0.0) * 1000
        if poller.poll(wait):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


class _Pump:
    """Shuttles bytes between the process's pipes and memory, counting output; notices the
    launcher's exit (its pidfd) and hands it to ``on_leader_exit``."""

    def __init__(self, proc: subprocess.Popen[bytes], stdin: bytes | None, limit: int | None,
                 leader_fd: int | None, on_leader_exit: Callable[[], None]):
        self.proc = proc
        self.pending = memoryview(stdin or b"")
        self.limit = limit
        self.leader_fd = leader_fd
        self.on_leader_exit = on_leader_exit
        self.buffers: dict[int, bytearray] = {}
        self.total = 0
        self.selector = selectors.DefaultSelector()
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None  # both are pipes by construction
            self.buffers[stream.fileno()] = bytearray()
            self.selector.register(stream, selectors.EVENT_READ)
        if leader_fd is not None:
            self.selector.register(leader_fd, selectors.EVENT_READ)
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
        """Move bytes until both outputs close and the launcher exits, the deadline passes or
        output overflows."""
        try:
            while self.selector.get_map():
                timeout = None if deadline is None else deadline - time.monotonic()
                if timeout is not None and timeout <= 0:
                    return "wall"
                for key, _ in self.selector.select(timeout):
                    if key.fileobj == self.leader_fd:
                        self.selector.unregister(key.fileobj)
                        self.on_leader_exit()
                        continue
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


def _leader_exited(proc: subprocess.Popen[bytes], leader_fd: int | None,
                   timeout: float | None) -> bool:
    """Wait until the launcher has exited, without reaping it; False at the timeout."""
    if leader_fd is not None:
        return wait_readable(leader_fd, timeout)
    end = None if timeout is None else time.monotonic() + timeout
    while True:  # no pidfd on this kernel: poll, leaving the zombie in place
        with contextlib.suppress(ChildProcessError):
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                return True
        if end is not None and time.monotonic() >= end:
            return False
        time.sleep(0.001)


def sweep_group(pgid: int, settle: float = SETTLE_SECONDS) -> None:
    """Reap this process's children in process group ``pgid``: a run's processes that were
    orphaned and handed to this process (it reaps orphans), all sent SIGKILL already. Waits
    for them at most ``settle`` seconds; orphans handed elsewhere are their reaper's."""
    end = time.monotonic() + settle
    while True:
        try:
            found = os.waitid(os.P_PGID, pgid, os.WEXITED | os.WNOHANG)
        except ChildProcessError:
            return  # no child of this process is left in the group
        if found is not None:
            continue  # reaped one; there may be more
        if time.monotonic() >= end:
            log.warning("processes of process group %d did not end within %.1f s", pgid, settle)
            return
        time.sleep(0.001)


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
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
    on_exit: Callable[[], None] | None = None,
) -> RawRun:
    """Run ``argv`` to completion or until a wall-time or output limit kills it.

    ``on_start`` runs once the launcher has started, before its output is read (raising kills
    the run); ``on_exit`` once it has been reaped. ``kill_extra`` is called with every kill
    (and once more at the end) to kill what the process group does not hold.
    """
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
    leader_fd = pidfd(proc.pid)  # our unreaped child: this pid is the launcher's
    try:
        with proc:
            raw = _supervise(proc, stdin=stdin, deadline=deadline, output_limit=output_limit,
                             leader_fd=leader_fd, kill_extra=kill_extra, on_start=on_start)
        if on_exit is not None:
            on_exit()
    finally:
        if leader_fd is not None:
            os.close(leader_fd)
        sweep_group(proc.pid)
    return RawRun(exit_code=raw[0], stdout=raw[1], stderr=raw[2], killed_for=raw[3],
                  duration_ms=(time.monotonic() - start) * 1000.0)


def _supervise(
    proc: subprocess.Popen[bytes],
    *,
    stdin: bytes | None,
    deadline: float | None,
    output_limit: int | None,
    leader_fd: int | None,
    kill_extra: Callable[[], None] | None,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None,
) -> tuple[int | None, bytes, bytes, KillReason | None]:
    """Pump until the end, kill what is left of the launcher's group, reap the launcher."""
    try:
        if on_start is not None:
            on_start(proc)
        pump = _Pump(proc, stdin, output_limit, leader_fd, lambda: _kill_group(proc, None))
        killed = pump.pump(deadline)
    except BaseException:
        # Never leave a tool running behind an error (Popen's exit would wait for it).
        _kill_group(proc, kill_extra)
        raise
    if killed is not None:
        _kill_group(proc, kill_extra)
    remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    if not _leader_exited(proc, leader_fd, None if killed else remaining):
        # Output closed but the launcher lingers (a child holding no pipe): same limit.
        killed = "wall"
        _kill_group(proc, kill_extra)
        _leader_exited(proc, leader_fd, None)
    # The launcher has exited but is not reaped, so its group id is still its own: whatever is
    # left in the group (an unconfined tool's background children) ends with the run.
    _kill_group(proc, kill_extra)
    code = proc.wait()
    return (None if killed else code, pump.output(proc.stdout), pump.output(proc.stderr),
            killed)
