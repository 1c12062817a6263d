"""Resource limits that hold even when callgate runs as root.

Per-process limits (CPU seconds, address space, core size and, for a non-root caller, the
process count) bind the tool and everything it starts, not the process that launches it:

* under bubblewrap they are set from outside (``apply_rlimits``, the ``prlimit`` system call) on
  the sandbox's first process while it waits for its seccomp filter, before it starts anything
  (see ``_gate``): no helper program per run;
* under firejail and the unconfined backend, and in the argv ``Sandbox.command`` shows, the
  ``prlimit`` program sets them inside, just before the tool's command (``LimitPlan.prefix``).

``RLIMIT_NPROC`` is not checked for uid 0 in the initial user namespace, and a sandbox started
by root keeps kernel uid 0 even inside its own user namespace. So for root the process count is
enforced with a **pids cgroup** instead: a fresh cgroup per run with ``pids.max`` set, entered
before anything of the tool starts, emptied (every task killed) and removed when the run ends.
cgroup v1 (``/sys/fs/cgroup/pids``) and a delegated cgroup v2 subtree with the ``pids``
controller enabled are both used when writable. Root without either cannot bound processes: a
policy that declares ``processes`` is then refused rather than run unbounded.

How a run gets into its cgroup matters for start-up time. Moving a *process* into a cgroup
(writing its pid to ``cgroup.procs``) takes the kernel's cgroup threadgroup lock for writing,
which first waits for an RCU grace period: 5 to 15 ms whenever no other move happened in the
last few milliseconds, i.e. on almost every call of an agent. A thread moving *only itself*
(``0`` written to a cgroup v1 ``tasks`` file) needs no such lock. So under bubblewrap on cgroup
v1 the calling thread steps into the run's cgroup, starts bwrap there — a child is born in its
parent thread's cgroup, so bwrap and everything it starts are inside from their first
instruction — and steps back out before the sandbox is let go (``ThreadInside``). Elsewhere
(cgroup v2, where threads of a process cannot be split across domain cgroups) the waiting
sandbox process is moved in from outside; under firejail and the unconfined backend a shell
enters the cgroup and execs the launcher.

Wall time and output size are enforced by the runner (``_runner``), not by rlimits.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from callgate._errors import SandboxError
from callgate.policy._schema import Limits
from callgate.sandbox._credentials import is_within

CGROUP_V1_PIDS = "/sys/fs/cgroup/pids"
CGROUP_V2 = "/sys/fs/cgroup"
_GROUP_NAME = "callgate-sandbox"
_MIB = 1024 * 1024


def _v2_own_dir() -> str | None:
    try:
        with open("/proc/self/cgroup", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("0::"):
                    return os.path.join(CGROUP_V2, line[3:].strip().lstrip("/"))
    except OSError:
        return None
    return None


def pids_cgroup_base() -> str | None:
    """A directory under which this process may create pids cgroups, or None."""
    if os.access(os.path.join(CGROUP_V1_PIDS, "cgroup.procs"), os.W_OK):
        base = os.path.join(CGROUP_V1_PIDS, _GROUP_NAME)
        with contextlib.suppress(OSError):
            os.makedirs(base, exist_ok=True)
            return base
    own = _v2_own_dir()
    if own is None:
        return None
    try:
        with open(os.path.join(own, "cgroup.subtree_control"), encoding="ascii") as handle:
            delegated = "pids" in handle.read().split()
    except OSError:
        return None
    return own if delegated and os.access(own, os.W_OK) else None


class PidsCgroup:
    """One run's pids cgroup: bounded task count, observable limit hits, total cleanup."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls, base: str, max_tasks: int) -> PidsCgroup:
        """Make a fresh cgroup below ``base`` allowing at most ``max_tasks`` tasks."""
        path = os.path.join(base, f"run-{uuid.uuid4().hex[:16]}")
        try:
            os.mkdir(path)
            with open(os.path.join(path, "pids.max"), "w", encoding="ascii") as handle:
                handle.write(str(max_tasks))
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            raise SandboxError(f"cannot create pids cgroup {path}: {exc}") from exc
        return cls(path)

    @property
    def procs_file(self) -> str:
        """Writing a pid here moves that process (and its future children) into the group."""
        return os.path.join(self.path, "cgroup.procs")

    @property
    def tasks_file(self) -> str:
        """cgroup v1 only: writing ``0`` here moves the calling thread alone into the group."""
        return os.path.join(self.path, "tasks")

    def holds(self, pid: int) -> bool:
        """Whether process ``pid`` is in the group now."""
        return pid in self._pids()

    def add(self, pid: int) -> None:
        """Move process ``pid`` (and the children it starts from now on) into the group."""
        try:
            with open(self.procs_file, "w", encoding="ascii") as handle:
                handle.write(str(pid))
        except OSError as exc:
            raise SandboxError(f"cannot move process {pid} into {self.path}: {exc}") from exc

    def limit_hit(self) -> bool:
        """True when a fork failed because the group was full (``pids.events`` max > 0)."""
        try:
            with open(os.path.join(self.path, "pids.events"), encoding="ascii") as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "max":
                        return int(value) > 0
        except (OSError, ValueError):
            return False
        return False

    def _pids(self) -> list[int]:
        try:
            with open(self.procs_file, encoding="ascii") as handle:
                return [int(line) for line in handle if line.strip()]
        except (OSError, ValueError):
            return []

    def kill_all(self) -> None:
        """SIGKILL every task left in the group (a tool's escaped background children).

        Never this process: a thread of it is inside while it starts a run (``ThreadInside``).
        """
        own = os.getpid()
        for pid in self._pids():
            if pid != own:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        """Kill what is left and remove the group; a group that will not empty is left."""
        # Killed tasks leave the group a moment after they die: retry briefly (about 1 s).
        for attempt in range(200):
            self.kill_all()
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.0005 if attempt < 20 else 0.005)


def _thread_pids_group(mount: str = CGROUP_V1_PIDS) -> str | None:
    """The directory of the calling thread's cgroup in the v1 pids hierarchy at ``mount``."""
    try:
        with open("/proc/thread-self/cgroup", encoding="utf-8") as handle:
            for line in handle:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if "pids" in controllers.split(","):
                    return os.path.normpath(os.path.join(mount, path.lstrip("/")))
    except (OSError, ValueError):
        return None
    return None


def _move_this_thread(tasks_file: str) -> None:
    """Move the calling thread alone into the cgroup of ``tasks_file`` (cgroup v1)."""
    fd = os.open(tasks_file, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, b"0")  # 0: the writing thread itself, so no threadgroup lock is taken
    finally:
        os.close(fd)


def threads_can_enter(base: str) -> bool:
    """Whether runs' cgroups below ``base`` can be entered by a thread (``ThreadInside``): a
    cgroup v1 pids hierarchy whose ``tasks`` files this process may write."""
    if not is_within(base, CGROUP_V1_PIDS):
        return False
    own = _thread_pids_group()
    return (
        own is not None
        and all(os.access(os.path.join(path, "tasks"), os.W_OK)
                for path in (base, own, CGROUP_V1_PIDS))
    )


class ThreadInside:
    """The calling thread inside a run's pids cgroup (v1) while it starts the run's launcher.

    A child is born in the cgroup of the thread that forks it, so the launcher and everything
    it starts are inside from their first instruction, with no process ever moved (see the
    module's docstring). ``leave`` takes the thread back where it was — or, if that cgroup is
    gone, to the hierarchy's root — before the sandbox is let go, so the thread is never
    counted against the tool; ``SandboxError`` if it cannot.
    """

    def __init__(self, cgroup: PidsCgroup) -> None:
        origin = _thread_pids_group()
        if origin is None:
            raise SandboxError("cannot tell which pids cgroup this thread is in")
        try:
            _move_this_thread(cgroup.tasks_file)
        except OSError as exc:
            raise SandboxError(f"cannot start the run inside {cgroup.path}: {exc}") from exc
        self._origin: str | None = origin
        self.cgroup = cgroup

    @property
    def inside(self) -> bool:
        """Whether the thread is still inside the run's cgroup."""
        return self._origin is not None

    def leave(self) -> None:
        """Take the thread back out (once; later calls do nothing)."""
        origin, self._origin = self._origin, None
        if origin is None:
            return
        problem: OSError | None = None
        for place in dict.fromkeys((origin, CGROUP_V1_PIDS)):
            try:
                _move_this_thread(os.path.join(place, "tasks"))
                return
            except OSError as exc:
                problem = problem or exc
        raise SandboxError(f"cannot take this thread out of {self.cgroup.path}: {problem}")


#: One per-process limit: (``resource.RLIMIT_*``, soft, hard).
Rlimit = tuple[int, int, int]


@dataclass(frozen=True)
class LimitPlan:
    """How a policy's limits will be enforced for one backend.

    ``rlimits`` and ``prefix`` say the same per-process limits twice: as values to set from
    outside (``apply_rlimits``), and as the ``prlimit`` command that sets them inside.
    """

    prefix: tuple[str, ...]
    cgroup_base: str | None
    max_tasks: int | None
    rlimits: tuple[Rlimit, ...] = ()


def plan_limits(
    limits: Limits, *, euid: int, cgroup_base: str | None, launcher_tasks: int
) -> LimitPlan:
    """Choose the mechanism for each limit; refuse what cannot be enforced.

    ``launcher_tasks`` is how many tasks the backend itself keeps in the group besides the
    tool: bwrap's init when only the sandbox is moved in (a gated run), the launcher too when
    it enters the group itself (``prlimit``'s own exec does not count twice: it execs the tool).
    """
    rlimits: list[Rlimit] = [(resource.RLIMIT_CORE, 0, 0)]
    if limits.cpu_seconds is not None:
        # Soft limit sends SIGXCPU (the signal the classifier reports); hard kills one later.
        rlimits.append((resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1))
    if limits.memory_mb is not None:
        rlimits.append((resource.RLIMIT_AS, limits.memory_mb * _MIB, limits.memory_mb * _MIB))
    max_tasks: int | None = None
    base: str | None = None
    if limits.processes is not None:
        if cgroup_base is not None:
            base, max_tasks = cgroup_base, limits.processes + launcher_tasks
        elif euid != 0:
            rlimits.append((resource.RLIMIT_NPROC, limits.processes + 1, limits.processes + 1))
        else:
            raise SandboxError(
                "the policy limits processes but callgate runs as root and no pids cgroup is "
                "writable (RLIMIT_NPROC does not apply to uid 0); run as a non-root user or "
                "make a pids cgroup available"
            )
    prlimit = _prlimit()
    if prlimit is None:
        raise SandboxError("prlimit (util-linux) is needed to set resource limits")
    options = [_PRLIMIT_OPTIONS[kind](soft, hard) for kind, soft, hard in rlimits]
    return LimitPlan(prefix=(prlimit, *options, "--"), cgroup_base=base, max_tasks=max_tasks,
                     rlimits=tuple(rlimits))


#: How ``prlimit`` spells each limit (a single value sets soft and hard).
_PRLIMIT_OPTIONS = {
    resource.RLIMIT_CORE: lambda soft, hard: f"--core={soft}",
    resource.RLIMIT_CPU: lambda soft, hard: f"--cpu={soft}:{hard}",
    resource.RLIMIT_AS: lambda soft, hard: f"--as={soft}",
    resource.RLIMIT_NPROC: lambda soft, hard: f"--nproc={soft}",
}
_PRLIMIT_DIRS = "/usr/bin:/bin"
#: Where ``prlimit`` was found, by search path.
_PRLIMIT_FOUND: dict[str, str] = {}


def _prlimit() -> str | None:
    """Where the ``prlimit`` program is (found once; looked up again if it is gone)."""
    found = _PRLIMIT_FOUND.get(_PRLIMIT_DIRS)
    if found is None or not os.access(found, os.X_OK):
        found = shutil.which("prlimit", path=_PRLIMIT_DIRS)
        if found is None:
            return None
        _PRLIMIT_FOUND[_PRLIMIT_DIRS] = found
    return found


def apply_rlimits(pid: int, rlimits: Sequence[Rlimit]) -> None:
    """Set ``rlimits`` on process ``pid`` (inherited by what it starts); ``SandboxError`` if
    any cannot be set, so a run never goes on with a limit missing."""
    for kind, soft, hard in rlimits:
        try:
            resource.prlimit(pid, kind, (soft, hard))
        except (OSError, ValueError) as exc:
            raise SandboxError(f"cannot set resource limit {kind} on process {pid}: {exc}") from exc


def enter_cgroup_argv(cgroup: PidsCgroup, argv: list[str]) -> list[str]:
    """Wrap ``argv`` so it joins ``cgroup`` before it starts (no fork can escape the count)."""
    script = 'echo $$ > "$0" && exec "$@"'
    return ["/bin/sh", "-c", script, cgroup.procs_file, *argv]
