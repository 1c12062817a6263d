"""The OS sandbox for subprocess tools, derived from the tool's declared policy.

``Sandbox.for_policy`` picks a backend (bubblewrap, then firejail) and refuses to build one
when neither can start, unless the caller opts out explicitly with ``allow_unconfined=True``;
the unconfined backend then warns on every run. ``Sandbox.run`` returns a ``SandboxOutcome``:
when the sandbox stopped something (a write, a read, a connection, a withheld variable, a
limit) ``confined`` is True and ``reason_id`` / ``reason`` say what, so the kernel records the
call as a denial rather than as a successful call with an error string.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from callgate._errors import CallgateError, SandboxError
from callgate._model import Reason
from callgate.policy._schema import ToolPolicy
from callgate.sandbox import _bwrap as bwrap
from callgate.sandbox import _firejail as firejail
from callgate.sandbox import _seccomp as seccomp
from callgate.sandbox._classify import classify as _classify_outcome
from callgate.sandbox._gate import BwrapGate, reap_orphaned_init
from callgate.sandbox._limits import (
    LimitPlan,
    PidsCgroup,
    enter_cgroup_argv,
    pids_cgroup_base,
    plan_limits,
    threads_can_enter,
)
from callgate.sandbox._none import none_argv, warn_unconfined
from callgate.sandbox._runner import RawRun, run_process
from callgate.sandbox._spec import SCAN_LIMIT, SandboxSpec, build_spec, check_supported

__all__ = ["BackendName", "Sandbox", "SandboxOutcome", "available_backends", "probe_ahead"]

BackendName = Literal["auto", "bwrap", "firejail", "none"]


@dataclass(frozen=True)
class SandboxOutcome:
    """What a sandboxed run did, and whether the sandbox stopped something.

    ``confined`` is True when the sandbox stopped a write, read, connection, withheld variable
    or limit; the kernel then records a deny with ``reason_id`` and ``reason``.
    ``exit_code`` is None when the run was killed for a wall-time or output limit.
    """

    argv: tuple[str, ...]
    backend: str
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    confined: bool
    reason: str | None
    reason_id: str | None
    duration_ms: float

    def denial(self) -> Reason | None:
        """The reason the kernel records with its deny when the sandbox stopped something."""
        if not self.confined or self.reason_id is None:
            return None
        return Reason(id=self.reason_id, check="sandbox", message=self.reason or self.reason_id)


def _locate(name: str, search_path: str | None) -> tuple[str | None, str]:
    """(absolute path of a backend that can start, or None; why not)."""
    path = _executable(name, search_path)
    if path is None:
        return None, f"{name} is not installed"
    problem = bwrap.bwrap_usable(path) if name == "bwrap" else firejail.firejail_usable(path)
    return (None, problem) if problem else (path, "")


def probe_ahead(backend: BackendName = "auto", *, search_path: str | None = None) -> None:
    """Start checking now, in a child process, whether bwrap can start here when ``backend``
    may choose it: the check starts a whole sandbox, which then runs while the caller decides
    the call, and ``Sandbox.for_policy`` takes its answer. Changes nothing else."""
    if backend in ("auto", "bwrap") and (path := _executable("bwrap", search_path)) is not None:
        bwrap.probe_ahead(path)


def _executable(name: str, search_path: str | None) -> str | None:
    """The absolute path of the program ``name`` on ``search_path`` (default ``PATH``)."""
    found = shutil.which(name, path=search_path)
    return None if found is None else os.path.abspath(found)


def available_backends(*, search_path: str | None = None) -> list[str]:
    """The confining backends that can start on this host, best first ("none" is not one).

    ``search_path`` is the ``PATH`` to look for ``bwrap`` and ``firejail`` in (default: this
    process's ``PATH``).
    """
    return [name for name in ("bwrap", "firejail") if _locate(name, search_path)[0]]


def _choose(
    backend: BackendName, allow_unconfined: bool, search_path: str | None
) -> tuple[str, str]:
    """(backend name, its executable) or SandboxError; never unconfined unless asked."""
    if backend == "none":
        if not allow_unconfined:
            raise SandboxError("backend 'none' runs unconfined; it needs allow_unconfined=True")
        return "none", ""
    names = ("bwrap", "firejail") if backend == "auto" else (backend,)
    problems = []
    for name in names:
        path, problem = _locate(name, search_path)
        if path is not None:
            return name, path
        problems.append(problem)
    if backend == "auto" and allow_unconfined:
        return "none", ""
    raise SandboxError("no usable sandbox backend: " + "; ".join(problems))


def _can_gate(executable: str) -> bool:
    """Whether ``run`` may bound bwrap's sandbox from outside: not for a non-root caller of a
    setuid bwrap, whose sandbox process runs with root's credentials until it drops them."""
    if os.geteuid() == 0:
        return True
    try:
        return not os.stat(executable).st_mode & stat.S_ISUID
    except OSError:
        return False


class Sandbox:
    """A sandbox for one tool: build it with ``for_policy``, then ``run`` commands in it.

    ``gated`` (bwrap only): ``run`` bounds the sandbox's first process from outside before the
    tool starts (``_gate``) instead of running ``prlimit`` and a cgroup-entering shell in the
    argv. It needs ``prlimit(2)`` on that process, which a non-root caller of a setuid bwrap
    does not have; ``for_policy`` decides. ``born_inside`` (gated runs with a pids cgroup):
    the launcher is started by a thread standing in the run's cgroup (cgroup v1, see
    ``_limits.ThreadInside``), so it is counted there besides the sandbox's init.
    """

    def __init__(
        self,
        policy: ToolPolicy,
        *,
        working_dir: str,
        backend: str,
        executable: str,
        environ: Mapping[str, str],
        plan: LimitPlan,
        scan_limit: int = SCAN_LIMIT,
        gated: bool = False,
        born_inside: bool = False,
    ) -> None:
        self.policy = policy
        self.scan_limit = scan_limit
        self.working_dir = working_dir
        self.backend = backend
        self.executable = executable
        self.environ = dict(environ)
        self.plan = plan
        self.gated = gated and backend == "bwrap"
        self.born_inside = born_inside and self.gated

    @classmethod
    def for_policy(
        cls,
        policy: ToolPolicy,
        *,
        working_dir: str,
        backend: BackendName = "auto",
        allow_unconfined: bool = False,
        environ: Mapping[str, str] | None = None,
        search_path: str | None = None,
        scan_limit: int = SCAN_LIMIT,
    ) -> Sandbox:
        """A sandbox enforcing ``policy``; raises ``SandboxError`` when it cannot be enforced.

        ``environ`` is the environment declared variables are taken from (default: this
        process's environment, read now); ``search_path`` is where to look for the backends'
        executables (default: ``PATH``). Relative globs resolve against ``working_dir``.
        ``scan_limit`` bounds the directory entries the credential scan visits per run; a run
        whose roots hold more is refused (``SandboxError``), never run with masks missing.
        """
        check_supported(policy)
        chosen, executable = _choose(backend, allow_unconfined, search_path)
        if chosen == "bwrap":
            # Refuse now on a machine the filter is not written for.
            seccomp.sandbox_filter(network=policy.network == "allow")
        gated = chosen == "bwrap" and _can_gate(executable)
        base = pids_cgroup_base() if policy.limits.processes is not None else None
        born_inside = gated and base is not None and threads_can_enter(base)
        # bwrap counts its launcher when it enters the group (born there, or by the shell of
        # an ungated argv), and only the sandbox's init when that init is moved in alone.
        launcher = {"bwrap": bwrap.GATED_TASKS if gated and not born_inside
                    else bwrap.LAUNCHER_TASKS,
                    "firejail": firejail.LAUNCHER_TASKS}
        plan = plan_limits(
            policy.limits,
            euid=os.geteuid(),
            cgroup_base=base,
            launcher_tasks=launcher.get(chosen, 0),
        )
        env = dict(os.environ) if environ is None else dict(environ)
        return cls(
            policy,
            working_dir=os.path.abspath(working_dir),
            backend=chosen,
            executable=executable,
            environ=env,
            plan=plan,
            scan_limit=scan_limit,
            gated=gated,
            born_inside=born_inside,
        )

    def _spec(self, argv: Sequence[str]) -> SandboxSpec:
        return build_spec(
            self.policy,
            working_dir=self.working_dir,
            environ=self.environ,
            command=argv,
            scan_limit=self.scan_limit,
        )

    def _wrap(
        self,
        spec: SandboxSpec,
        argv: Sequence[str],
        *,
        status_fd: int | None,
        procs: str | None,
        seccomp_fd: int | None = None,
        prefix: Sequence[str] | None = None,
        copies: Mapping[str, bwrap.Copy] | None = None,
    ) -> list[str]:
        if not argv:
            raise SandboxError("an empty command cannot run")
        prefix = self.plan.prefix if prefix is None else prefix
        if self.backend == "bwrap":
            wrapped = bwrap.bwrap_argv(
                spec,
                argv,
                prefix=prefix,
                status_fd=status_fd,
                seccomp_fd=seccomp_fd,
                executable=self.executable,
                copies=copies,
            )
        elif self.backend == "firejail":
            wrapped = firejail.firejail_argv(
                spec, argv, prefix=prefix, executable=self.executable
            )
        else:
            wrapped = none_argv(argv, prefix=prefix)
        if procs is not None:
            wrapped = enter_cgroup_argv(PidsCgroup(os.path.dirname(procs)), wrapped)
        return wrapped

    def command(self, argv: Sequence[str], *, seccomp_fd: int | None = None) -> list[str]:
        """A wrapped argv that confines ``argv`` on its own (its cgroup name is a placeholder).

        It applies the same confinement as ``run``, with the limits set inside (``prlimit``
        before the tool, a shell entering the pids cgroup); a gated ``run`` sets them from
        outside before the tool starts instead (see ``_gate``). For bwrap, ``seccomp_fd`` is
        the descriptor that will hold ``seccomp.sandbox_filter(network=...)`` when the argv
        starts (see ``seccomp.filter_fd``); without it the argv names a placeholder that bwrap
        refuses.
        """
        base = self.plan.cgroup_base
        procs = None if base is None else os.path.join(base, "run-<id>", "cgroup.procs")
        try:
            spec = self._spec(argv)
            return self._wrap(spec, argv, status_fd=None, procs=procs, seccomp_fd=seccomp_fd)
        except CallgateError:
            raise
        except Exception as exc:
            raise SandboxError(f"cannot build the {self.backend} command: {exc!r}") from exc

    def run(self, argv: Sequence[str], *, stdin: bytes | None = None) -> SandboxOutcome:
        """Run ``argv`` confined; the outcome says whether the sandbox stopped something.

        Raises ``SandboxError`` when the sandbox cannot be set up or cannot start; the
        command has then not run (or was killed before doing anything).
        """
        if not argv:
            raise SandboxError("an empty command cannot run")
        if self.backend == "none":
            warn_unconfined(argv)
        try:
            spec = self._spec(argv)
            raw, pids_hit = self._launch(spec, argv, stdin)
        except CallgateError:
            raise
        except Exception as exc:  # fail closed: an unexpected error is a refusal to run
            raise SandboxError(f"the {self.backend} sandbox failed: {exc!r}") from exc
        return self._outcome(argv, spec, raw, pids_hit)

    def _launch(
        self, spec: SandboxSpec, argv: Sequence[str], stdin: bytes | None
    ) -> tuple[RawRun, bool]:
        """Start the wrapped command in its cgroup (if any); remove the cgroup after."""
        cgroup = None
        if self.plan.cgroup_base is not None and self.plan.max_tasks is not None:
            cgroup = PidsCgroup.create(self.plan.cgroup_base, self.plan.max_tasks)
        try:
            if self.gated:
                raw, started = self._launch_gated(spec, argv, stdin, cgroup)
            else:
                raw, started = self._launch_inline(spec, argv, stdin, cgroup)
            pids_hit = cgroup.limit_hit() if cgroup else False
        finally:
            if cgroup is not None:
                cgroup.remove()
        if not started:
            message = raw.stderr.decode("utf-8", "replace").strip()
            raise SandboxError(f"the {self.backend} sandbox could not start: {message}")
        return raw, pids_hit

    def _launch_gated(
        self, spec: SandboxSpec, argv: Sequence[str], stdin: bytes | None,
        cgroup: PidsCgroup | None,
    ) -> tuple[RawRun, bool]:
        """bwrap, bounded from outside before the tool starts (see ``_gate``)."""
        gate = BwrapGate(network=spec.network, rlimits=self.plan.rlimits, cgroup=cgroup)
        try:
            copies = gate.adopt(bwrap.open_copies(spec))
            wrapped = self._wrap(spec, argv, status_fd=gate.status_fd, procs=None,
                                 seccomp_fd=gate.filter_fd, prefix=(), copies=copies)
            if self.born_inside:
                gate.enter()  # nothing forks between here and bwrap's start
            raw = self._execute(spec, wrapped, stdin, gate.pass_fds, cgroup,
                                on_start=gate.start, on_exit=gate.finish)
            return raw, raw.killed_for is not None or gate.started()
        finally:
            gate.close()

    def _launch_inline(
        self, spec: SandboxSpec, argv: Sequence[str], stdin: bytes | None,
        cgroup: PidsCgroup | None,
    ) -> tuple[RawRun, bool]:
        """The argv applies the limits itself (``prlimit``, a shell entering the cgroup)."""
        status_r, status_w = os.pipe() if self.backend == "bwrap" else (-1, -1)
        filter_fd = -1
        try:
            if self.backend == "bwrap":
                filter_fd = seccomp.filter_fd(seccomp.sandbox_filter(network=spec.network))
            wrapped = self._wrap(
                spec,
                argv,
                status_fd=status_w if status_w >= 0 else None,
                procs=cgroup.procs_file if cgroup else None,
                seccomp_fd=filter_fd if filter_fd >= 0 else None,
            )
            passed = tuple(fd for fd in (status_w, filter_fd) if fd >= 0)
            raw = self._execute(spec, wrapped, stdin, passed, cgroup)
            if status_w >= 0:
                os.close(status_w)  # our copy: the status pipe reads to EOF once bwrap exits
                status_w = -1
            return raw, self._started(raw, status_r)
        finally:
            for fd in (status_r, status_w, filter_fd):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)

    def _execute(
        self,
        spec: SandboxSpec,
        wrapped: list[str],
        stdin: bytes | None,
        pass_fds: tuple[int, ...],
        cgroup: PidsCgroup | None,
        *,
        on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
        on_exit: Callable[[], None] | None = None,
    ) -> RawRun:
        limits = spec.limits
        return run_process(
            wrapped,
            stdin=stdin,
            wall_seconds=limits.wall_seconds,
            output_limit=None if limits.output_kb is None else limits.output_kb * 1024,
            cwd=None if self.backend == "bwrap" else spec.working_dir,
            env=dict(spec.env) if self.backend == "none" else {},
            pass_fds=pass_fds,
            kill_extra=cgroup.kill_all if cgroup else None,
            on_start=on_start,
            on_exit=on_exit,
        )

    def _started(self, raw: RawRun, status_r: int) -> bool:
        """bwrap reports the command's exit code on its status fd only if it got to run it."""
        if self.backend != "bwrap":
            return True
        os.set_blocking(status_r, False)
        status = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(status_r, 4096):
                status += chunk
        reap_orphaned_init(status)
        return raw.killed_for is not None or b'"exit-code"' in status

    def _outcome(
        self, argv: Sequence[str], spec: SandboxSpec, raw: RawRun, pids_hit: bool
    ) -> SandboxOutcome:
        found = _classify_outcome(
            exit_code=raw.exit_code,
            stderr=raw.stderr,
            killed_for=raw.killed_for,
            pids_limit_hit=pids_hit,
            spec=spec,
        )
        return SandboxOutcome(
            argv=tuple(argv),
            backend=self.backend,
            exit_code=raw.exit_code,
            stdout=raw.stdout,
            stderr=raw.stderr,
            confined=found is not None,
            reason=None if found is None else found.reason,
            reason_id=None if found is None else found.reason_id,
            duration_ms=raw.duration_ms,
        )
