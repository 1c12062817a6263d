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
import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from callgate.sandbox._procfs import proc_hidden
from callgate.sandbox._spec import SandboxSpec, is_within

SANDBOX_UID = 65534
HOSTNAME = "callgate-sandbox"
#: Tasks bwrap keeps in the pids cgroup besides the tool: the launcher and the pid-1 reaper.
LAUNCHER_TASKS = 2
#: Stands for the seccomp descriptor in an argv built for display (bwrap refuses to start
#: with it, so such an argv never runs without its filter).
SECCOMP_FD_PLACEHOLDER = "<seccomp-fd>"


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


def _mounts(spec: SandboxSpec) -> list[tuple[str, list[str]]]:
    """(mount point, bwrap arguments), to be applied parents first."""
    items: list[tuple[str, list[str]]] = []
    for path in spec.runtime_roots:
        if os.path.islink(path):
            items.append((path, ["--symlink", os.readlink(path), path]))
        else:
            items.append((path, ["--ro-bind", path, path]))
    items += [(path, ["--ro-bind", path, path]) for path in spec.read_roots]
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
) -> list[str]:
    """The full bwrap command line that runs ``argv`` confined by ``spec``.

    ``seccomp_fd`` is the descriptor holding ``seccomp.sandbox_filter(network=...)`` in the
    process that starts the command (None writes ``SECCOMP_FD_PLACEHOLDER``).
    """
    out = [executable, "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    out += ["--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    out += ["--unshare-cgroup-try", "--hostname", HOSTNAME]
    if not spec.network:
        out.append("--unshare-net")
    out += ["--die-with-parent", "--new-session", "--clearenv"]
    for name, value in sorted(spec.env.items()):
        out += ["--setenv", name, value]
    for _, args in _mounts(spec):
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


@functools.cache
def bwrap_usable(path: str) -> str | None:
    """None when the bwrap at ``path`` can start a user-namespace sandbox here, else why not."""
    probe = [path, "--unshare-user", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/"]
    try:
        done = subprocess.run(
            [*probe, "--", "/bin/true"], capture_output=True, timeout=10, check=False, env={}
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot start: {exc}"
    if done.returncode != 0:
        return f"bwrap cannot start: {done.stderr.decode('utf-8', 'replace').strip()}"
    return None
