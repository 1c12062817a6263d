"""How a bubblewrap run starts: the seccomp filter is the gate the tool waits behind.

bwrap reads its seccomp program from a descriptor after it has built the sandbox and before it
starts anything in it (the sandbox's init, then the tool). Here that descriptor is a pipe, and
the program is written only once the sandbox's first process has been bounded from outside:

1. bwrap starts with ``--json-status-fd`` and ``--seccomp`` on two pipes — on cgroup v1 from
   a thread standing in the run's pids cgroup, so bwrap is born there (``ThreadInside``; the
   thread steps back out in 3);
2. it reports the host pid of the sandbox's first process (``"child-pid"``), which then builds
   the sandbox and waits on the empty filter pipe;
3. that process is checked to be bwrap's child, and gets the run's resource limits
   (``prlimit(2)``, inherited by everything it starts); when there is a pids cgroup it is
   checked to be inside (born there) or moved in;
4. the filter is written in one piece (at most ``PIPE_BUF`` bytes, so it arrives whole or not at
   all) and the pipe closed: the sandbox goes on, and the tool starts already bounded.

So no helper program runs per run (no ``prlimit`` exec inside, no shell to enter the cgroup).
It fails closed: if anything in 3 fails the run is killed, and if callgate itself dies before
4, bwrap reads an empty program, which the kernel refuses (``EINVAL``): bwrap exits and the tool
never starts.

bwrap's monitor exits as soon as the sandbox's init reports the tool's exit status, without
reaping that init: it is orphaned, and would stay a zombie under a process that reaps orphans
(pid 1 of a container, a child subreaper) and does not know it. ``finish`` therefore waits for
the init (through a pidfd opened while it was known to be bwrap's child) — by then the whole
pid namespace is gone — and reaps it when it was handed to this process.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

from callgate._errors import SandboxError
from callgate.sandbox import _seccomp as seccomp
from callgate.sandbox._bwrap import Copy
from callgate.sandbox._limits import PidsCgroup, Rlimit, ThreadInside, apply_rlimits
from callgate.sandbox._runner import SETTLE_SECONDS, pidfd, wait_readable

#: How long bwrap may take to report the sandbox's first process.
STARTUP_SECONDS = 30.0


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return stat[stat.rindex(b")") + 2 :].split()
    except (OSError, ValueError):
        return None


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid`` (from ``/proc``), or None when it cannot be read."""
    return _parent_and_start(pid)[0]


def _parent_and_start(pid: int) -> tuple[int | None, int | None]:
    """(parent pid, start time in clock ticks since boot if it has not exited) of ``pid``."""
    fields = _stat_fields(pid)
    try:
        if fields is None:
            return None, None
        running = fields[0] not in (b"Z", b"X", b"x")
        return int(fields[1]), int(fields[19]) if running else None
    except (ValueError, IndexError):
        return None, None


def _running_since(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot) if it has not exited, else None."""
    return _parent_and_start(pid)[1]


def child_pid(status: bytes) -> int | None:
    """The ``child-pid`` of bwrap's first status line, or None when there is none."""
    try:
        pid = json.loads(status.split(b"\n", 1)[0])["child-pid"]
    except (ValueError, KeyError, TypeError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def reap_orphaned_init(status: bytes) -> None:
    """After an ungated run (bwrap reaped): reap the sandbox's init if it was handed to this
    process. A zombie child keeps its pid, so the parent check cannot name another process."""
    pid = child_pid(status)
    if pid is not None and parent_of(pid) == os.getpid():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


class BwrapGate:
    """The descriptors of one bwrap run and the hand-over that bounds it before it starts."""

    def __init__(self, *, network: bool, rlimits: Sequence[Rlimit],
                 cgroup: PidsCgroup | None) -> None:
        self._program = seccomp.sandbox_filter(network=network)
        if len(self._program) > select.PIPE_BUF:
            raise SandboxError("the seccomp filter is too long to be handed over in one write")
        self._rlimits = tuple(rlimits)
        self._cgroup = cgroup
        self._inside: ThreadInside | None = None
        self._fds: dict[str, int] = {}
        self._copies: list[Copy] = []
        self.status = b""
        self.child: int | None = None
        self._child_fd: int | None = None
        self._child_since: int | None = None
        self._fds["status_r"], self._fds["status_w"] = os.pipe()
        self._fds["filter_r"], self._fds["filter_w"] = os.pipe()

    @property
    def status_fd(self) -> int:
        """The descriptor bwrap writes its JSON status to (``--json-status-fd``)."""
        return self._fds["status_w"]

    @property
    def filter_fd(self) -> int:
        """The descriptor bwrap reads the seccomp program from (``--seccomp``)."""
        return self._fds["filter_r"]

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """The descriptors bwrap inherits."""
        copied = tuple(fd for copy in self._copies for _, fd in copy.files)
        return (self.status_fd, self.filter_fd, *copied)

    def adopt(self, copies: Mapping[str, Copy]) -> Mapping[str, Copy]:
        """Hand ``copies`` to bwrap with this run, and close them once it has started."""
        self._copies.extend(copies.values())
        return copies

    def enter(self) -> None:
        """Step the calling thread into the run's pids cgroup, so that the launcher it starts
        next is born there (cgroup v1 only; ``start`` steps back out)."""
        if self._cgroup is not None and self._inside is None:
            self._inside = ThreadInside(self._cgroup)

    def _leave(self) -> None:
        if self._inside is not None:
            self._inside.leave()

    def _close(self, name: str) -> None:
        fd = self._fds.pop(name, -1)
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def start(self, proc: subprocess.Popen[bytes]) -> None:
        """Bound the sandbox's first process, then let it go on (``run_process``'s on_start)."""
        self._leave()  # before anything can fork in the group: the thread is not the tool's
        self._close("status_w")  # bwrap holds its own copies now
        self._close("filter_r")
        self._close_copies()
        child = self._child_pid()
        if child is None:  # bwrap ended before starting the sandbox: nothing to let through
            self._close("filter_w")
            return
        self._child_fd = pidfd(child)
        parent, since = _parent_and_start(child)
        if parent is None or since is None:  # it ended: bwrap failed, and says why on stderr
            self._close("filter_w")
            return
        if parent != proc.pid:
            raise SandboxError(f"bwrap reported process {child}, which is not its child")
        self.child = child
        self._child_since = since
        apply_rlimits(child, self._rlimits)
        if self._cgroup is not None and not self._cgroup.holds(child):
            self._cgroup.add(child)  # not born inside: moved in (waits for the threadgroup lock)
        written = os.write(self._fds["filter_w"], self._program)
        if written != len(self._program):
            raise SandboxError("the seccomp filter could not be handed over whole")
        self._close("filter_w")

    def _child_pid(self) -> int | None:
        """The ``child-pid`` of bwrap's first status line; None when bwrap ended without one."""
        fd = self._fds["status_r"]
        while not self.status.endswith(b"\n"):
            if not wait_readable(fd, STARTUP_SECONDS):
                raise SandboxError(f"bwrap did not start the sandbox in {STARTUP_SECONDS:.0f} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            self.status += chunk
        pid = child_pid(self.status)
        if pid is None:
            raise SandboxError(f"bwrap reported no sandbox process: {self.status!r}")
        return pid

    def finish(self) -> None:
        """Wait for the sandbox's init to be gone, and reap it if it was handed to this process
        (``run_process``'s on_exit, after bwrap's monitor was reaped)."""
        fd = self._child_fd
        if fd is None:
            self._finish_without_pidfd()
            return
        if not wait_readable(fd, SETTLE_SECONDS):
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            wait_readable(fd, SETTLE_SECONDS)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG)

    def _finish_without_pidfd(self) -> None:
        """``finish`` on a kernel without pidfds: poll ``/proc`` for the init, known by its
        start time (a pid used again by another process is not it)."""
        child, since = self.child, self._child_since
        if child is None or since is None:
            return
        end = time.monotonic() + SETTLE_SECONDS
        while _running_since(child) == since and time.monotonic() < end:
            time.sleep(0.0005)
        if _running_since(child) == since:
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
        if parent_of(child) == os.getpid():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child, 0)  # it was handed to this process, and has ended

    def started(self) -> bool:
        """bwrap reports the tool's exit code only if it got to run it."""
        fd = self._fds.get("status_r", -1)
        if fd >= 0:
            os.set_blocking(fd, False)
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(fd, 4096):
                    self.status += chunk
        return b'"exit-code"' in self.status

    def _close_copies(self) -> None:
        for copy in self._copies:
            copy.close()
        self._copies.clear()

    def close(self) -> None:
        """Close every descriptor still open (the pidfd included); take the thread out of the
        run's cgroup if it is still inside."""
        self._leave()
        self._close_copies()
        for name in list(self._fds):
            self._close(name)
        if self._child_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._child_fd)
            self._child_fd = None
