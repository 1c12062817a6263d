"""The bubblewrap backend: a fresh mount namespace built only from what the policy declares.

The root is an empty tmpfs that is remounted read-only once the mounts are in place, so
everything outside the write roots is read-only or absent, ``/tmp`` included (``scratch``
gives a private, empty, writable ``/tmp``). The runtime directories (``/usr``, ``/lib`` …) are
bound read-only; declared read roots read-only; declared write roots read-write, exactly.
Credential paths inside a visible root, the host's shells (unless the tool needs one, see
``shells``) and the ``/proc`` entries that expose kernel state (``PROC_HIDDEN``) are covered
by an empty mode-000 file or directory, so reading them fails with ``EACCES``. ``/proc`` is the
tool's own and **read-only as a whole**: a sandbox started by root runs the tool as kernel uid
0 (as uid 65534 of its user namespace), and ``/proc/sys`` files are writable by uid 0 whatever
the capabilities; bwrap's own read-only cover of ``/proc/sys`` is skipped when its directory
probe says it is not writable, which is what it says for uid 0. The tool runs as uid/gid 65534
in its own user, pid, ipc, uts, cgroup and (unless the network is allowed) network
namespaces, with no capabilities, in a new session, with a cleared environment, and dies with
its launcher, under the ``seccomp`` filter (read from a descriptor): no setuid or setgid
file (a root-started tool's files belong to root on the host), and with the network denied no
socket that could reach a host Unix socket by path.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from callgate.sandbox._procfs import proc_hidden
from callgate.sandbox._spec import SandboxSpec, is_within

SANDBOX_UID = 65534
HOSTNAME = "callgate-sandbox"
#: Tasks bwrap keeps in the pids cgroup besides the tool when the launcher is in it (the argv
#: ``Sandbox.command`` shows, or a gated run started from inside the cgroup on cgroup v1): the
#: launcher and the pid-1 reaper.
LAUNCHER_TASKS = 2
#: The same for a gated run (``_gate``) whose sandbox process is moved in from outside: only
#: that process, the pid-1 reaper, is in the cgroup; the launcher starts nothing more.
GATED_TASKS = 1
#: Stands for the seccomp descriptor in an argv built for display (bwrap refuses to start
#: with it, so such an argv never runs without its filter).
SECCOMP_FD_PLACEHOLDER = "<seccomp-fd>"
#: How long the probe of whether bwrap can start here may take (seconds).
PROBE_TIMEOUT_S = 10
#: A runtime file this small, or a directory of at most ``COPY_MAX_ENTRIES`` such files, is
#: copied onto the sandbox's root (``--file``, read-only once the root is remounted) rather than
#: bound: each bind costs bwrap a mount and a pass over the whole mount table.
COPY_MAX_BYTES = 1 << 20
COPY_MAX_ENTRIES = 16


@dataclass(frozen=True)
class Copy:
    """A runtime root copied onto the sandbox's root: a file, or a directory of files, each
    with the descriptor bwrap reads it from."""

    root: str
    directory: bool
    files: tuple[tuple[str, int], ...]

    def args(self) -> list[str]:
        """The bwrap arguments that make it (parent directories are made by bwrap)."""
        out = ["--dir", self.root] if self.directory else []
        for path, fd in self.files:
            out += ["--file", str(fd), path]
        return out

    def close(self) -> None:
        """Close this process's descriptors (bwrap has its own once it started)."""
        for _, fd in self.files:
            with contextlib.suppress(OSError):
                os.close(fd)


@functools.cache
def mask_sources() -> tuple[str, str]:
    """An empty mode-000 directory and file to mount over hidden paths (made once)."""
    base = tempfile.mkdtemp(prefix="callgate-mask-")
    atexit.register(shutil.rmtree, base, True)
    directory, file = os.path.join(base, "d"), os.path.join(base, "f")
    os.mkdir(directory, 0o000)
    with open(file, "wb"):
        pass
    os.chmod(directory, 0o000)
    os.chmod(file, 0o000)
    return directory, file


def _depth(path: str) -> tuple[int, str]:
    return (0 if path == "/" else path.count("/"), path)


def _ancestors(path: str) -> list[str]:
    """Every directory above ``path``, ``/`` included."""
    found = []
    while path not in ("/", ""):
        path = os.path.dirname(path)
        found.append(path)
    return found


def _copyable(spec: SandboxSpec) -> list[str]:
    """Runtime roots that could be copied: on the sandbox's own root, below no other root (a
    copy inside another root would be written into that root, on the host; one inside a read
    root is not bound at all). A symlink is never copied (``_list_copy``)."""
    visible = set(spec.visible())
    return [path for path in spec.runtime_roots
            if not any(up in visible for up in _ancestors(path))]


def _list_copy(root: str, info: os.stat_result) -> tuple[bool, tuple[str, ...]] | None:
    """(is a directory, the files to copy) for ``root``; None when it is to be bound."""
    if stat.S_ISREG(info.st_mode):
        return False, (root,)
    if not stat.S_ISDIR(info.st_mode):
        return None
    with os.scandir(root) as entries:
        found: list[str] = []
        for entry in entries:
            if len(found) == COPY_MAX_ENTRIES or not entry.is_file(follow_symlinks=False):
                return None
            found.append(entry.path)
    return True, tuple(sorted(found))


#: What ``_list_copy`` said of a root, by path, with the root's stamp then.
_COPY_PLANS: dict[str, tuple[tuple[int, int, int, int], tuple[bool, tuple[str, ...]] | None]] = {}


def _copy_paths(root: str) -> tuple[bool, tuple[str, ...]] | None:
    """``_list_copy``, listed again only when the root's stamp changed (an entry added,
    removed or renamed changes a directory's ``st_mtime`` and ``st_ctime``). The files are
    opened and checked on every run anyway."""
    info = os.lstat(root)
    stamp = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
    kept = _COPY_PLANS.get(root)
    if kept is not None and kept[0] == stamp:
        return kept[1]
    plan = _list_copy(root, info)
    if len(_COPY_PLANS) > 64:
        _COPY_PLANS.clear()
    _COPY_PLANS[root] = (stamp, plan)
    return plan


def _open_copy(root: str) -> Copy | None:
    """``root`` opened for copying, or None when it is to be bound (too big, not plain files)."""
    opened: list[tuple[str, int]] = []
    plain = False
    try:
        found = _copy_paths(root)
        if found is None:
            return None
        for path in found[1]:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            opened.append((path, fd))
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > COPY_MAX_BYTES:
                return None
        plain = True
        return Copy(root, found[0], tuple(opened))
    except OSError:
        return None
    finally:
        if not plain:
            Copy(root, False, tuple(opened)).close()


def open_copies(spec: SandboxSpec) -> dict[str, Copy]:
    """The runtime roots to copy rather than bind for ``spec``, opened (the caller closes
    them with ``Copy.close`` once bwrap has started)."""
    copies: dict[str, Copy] = {}
    for root in _copyable(spec):
        found = _open_copy(root)
        if found is not None:
            copies[root] = found
    return copies


def _read_only_binds(spec: SandboxSpec) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """Symlinks for linked runtime roots, and the directories and files to bind read-only.

    Each bind costs bwrap a mount and a pass over the mount table, so a read-only root already
    shown, read-only and unchanged, by another is left out: a declared read root inside a
    runtime directory (``/usr/**``), a runtime root inside a declared read root (``/etc/**``
    holds ``/etc/ld.so.cache``). Roots inside a write root are bound as before (read-only over
    writable is a narrowing, not a duplicate).
    """
    links: list[tuple[str, list[str]]] = []
    runtime_dirs: list[str] = []
    for path in spec.runtime_roots:
        if os.path.islink(path):
            links.append((path, ["--symlink", os.readlink(path), path]))
        else:
            runtime_dirs.append(path)
    reads = [p for p in spec.read_roots if not any(is_within(p, r) for r in runtime_dirs)]
    runtime = [p for p in runtime_dirs
               if not any(is_within(p, r) for r in reads)
               or any(is_within(p, w) for w in spec.write_roots)]
    return links, runtime + reads


def _mounts(spec: SandboxSpec, copies: Mapping[str, Copy]) -> list[tuple[str, list[str]]]:
    """(mount point, bwrap arguments), to be applied parents first."""
    items, read_only = _read_only_binds(spec)
    items += [(path, copies[path].args() if path in copies else ["--ro-bind", path, path])
              for path in read_only]
    items += [(path, ["--bind", path, path]) for path in spec.write_roots]
    items += [("/proc", ["--proc", "/proc"]), ("/dev", ["--dev", "/dev"])]
    covered = spec.visible()
    if spec.scratch:
        items.append(("/tmp", ["--tmpfs", "/tmp"]))
    elif not any(is_within("/tmp", root) for root in covered):
        items.append(("/tmp", ["--dir", "/tmp"]))
    if not any(is_within(spec.working_dir, root) for root in covered):
        # The working directory exists (so chdir works) but shows nothing undeclared.
        items.append((spec.working_dir, ["--dir", spec.working_dir]))
    items.sort(key=lambda item: _depth(item[0]))
    return items


def _masks(spec: SandboxSpec) -> list[str]:
    covered = (*spec.covered(), *proc_hidden())
    empty_dir, empty_file = mask_sources()
    args: list[str] = []
    for path in covered:
        source = empty_dir if os.path.isdir(path) else empty_file
        args += ["--ro-bind", source, path]
    return args


def bwrap_argv(
    spec: SandboxSpec,
    argv: Sequence[str],
    *,
    prefix: Sequence[str] = (),
    status_fd: int | None = None,
    seccomp_fd: int | None = None,
    executable: str = "bwrap",
    copies: Mapping[str, Copy] | None = None,
) -> list[str]:
    """The full bwrap command line that runs ``argv`` confined by ``spec``.

    ``seccomp_fd`` is the descriptor holding ``seccomp.sandbox_filter(network=...)`` in the
    process that starts the command (None writes ``SECCOMP_FD_PLACEHOLDER``). ``copies``
    (from ``open_copies``) are runtime roots written onto the root instead of bound.
    """
    out = [executable, "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    out += ["--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    out += ["--unshare-cgroup-try", "--hostname", HOSTNAME]
    if not spec.network:
        out.append("--unshare-net")
    out += ["--die-with-parent", "--new-session", "--clearenv"]
    for name, value in sorted(spec.env.items()):
        out += ["--setenv", name, value]
    for _, args in _mounts(spec, copies or {}):
        out += args
    out += _masks(spec)
    out += ["--remount-ro", "/proc"]
    if "/" not in spec.write_roots:
        out += ["--remount-ro", "/"]
    out += ["--seccomp", SECCOMP_FD_PLACEHOLDER if seccomp_fd is None else str(seccomp_fd)]
    out += ["--chdir", spec.working_dir]
    if status_fd is not None:
        out += ["--json-status-fd", str(status_fd)]
    return [*out, "--", *prefix, *argv]


# The probe's answers by bwrap path, and probes started ahead (``probe_ahead``) not yet asked.
_answers: dict[str, str | None] = {}
_started: dict[str, subprocess.Popen[bytes] | OSError] = {}
_probing = threading.Lock()


def probe_ahead(path: str) -> None:
    """Start ``bwrap_usable``'s probe of the bwrap at ``path`` now, in a child process, so that
    its answer is ready when first asked: the probe starts a whole sandbox (a few
    milliseconds), which then runs while the caller does other work. Does nothing when the
    answer is known or the probe already started."""
    with _probing:
        if path not in _answers and path not in _started:
            _started[path] = _start_probe(path)


def bwrap_usable(path: str) -> str | None:
    """None when the bwrap at ``path`` can start a user-namespace sandbox here, else why not
    (asked once per process; a probe started ahead is waited for)."""
    with _probing:
        if path not in _answers:
            started = _started.pop(path, None)
            _answers[path] = _judge(_start_probe(path) if started is None else started)
        return _answers[path]


def _start_probe(path: str) -> subprocess.Popen[bytes] | OSError:
    # --as-pid-1: the command is the namespace's init, which bwrap's monitor reaps itself (its
    # own init would be left to this process's reaper, a zombie under a subreaper).
    probe = [path, "--unshare-user", "--unshare-pid", "--unshare-net", "--as-pid-1",
             "--ro-bind", "/", "/"]
    try:
        return subprocess.Popen([*probe, "--", "/bin/true"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={})
    except OSError as exc:
        return exc


def _judge(probe: subprocess.Popen[bytes] | OSError) -> str | None:
    if isinstance(probe, OSError):
        return f"bwrap cannot start: {probe}"
    try:
        _, stderr = probe.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        _stop(probe)
        return f"bwrap cannot start: {exc}"
    if probe.returncode != 0:
        return f"bwrap cannot start: {stderr.decode('utf-8', 'replace').strip()}"
    return None


def _stop(probe: subprocess.Popen[bytes]) -> None:
    """Kill a probe and reap it without reading its pipes: a bwrap killed while it sets up can
    leave its sandbox's first process holding them open (reading would wait for ever)."""
    probe.kill()
    probe.wait()
    for pipe in (probe.stdout, probe.stderr):
        if pipe is not None:
            pipe.close()


@atexit.register
def _reap_probes() -> None:
    """Probes started ahead and never asked about (the call was denied) are waited for at exit
    (they take milliseconds), and killed past the probe's timeout."""
    with _probing:
        for probe in _started.values():
            if isinstance(probe, OSError):
                continue
            try:
                probe.communicate(timeout=PROBE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                _stop(probe)
        _started.clear()
