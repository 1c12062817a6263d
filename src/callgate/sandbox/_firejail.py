"""The firejail backend, for hosts where bubblewrap cannot start (no user namespaces).

firejail is setuid, so it confines without unprivileged user namespaces: ``--read-only=/`` with
``--read-write`` for each write root, a read-only ``/proc``, a private ``/dev`` (the harmless
nodes and an empty ``/dev/shm`` of its own, as bwrap's ``--dev``), ``--blacklist`` for every
path that leads away from the visible roots, for credential paths, hidden shells and the
``/proc`` entries of ``procfs.PROC_HIDDEN`` (a hidden directory fails with ``EACCES``; a hidden
file reads as empty when the caller is root), ``--net=none`` unless the network is allowed,
with its socket filter (``protocol inet,inet6,netlink``: other families fail with
``EOPNOTSUPP``; io_uring and the secondary system call ABIs are refused), the kernel keyring
system calls dropped whatever the network (the caller's session keyring is inherited), a new
ipc namespace and hostname, no capabilities, no new privileges, no supplementary groups, and an
environment cleared with ``env -i``. The options go in a generated profile file, because
firejail caps its command line at 128 arguments.

Differences from bwrap, all documented in ``docs/sandbox.md``: the tool keeps the caller's uid,
``/run/firejail`` must stay visible for firejail itself, ``/tmp`` is read-only rather than
absent, and ``scratch`` (a private ``/tmp``) is refused when a declared root lies under ``/tmp``.
"""

from __future__ import annotations

import atexit
import functools
import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from callgate._errors import SandboxError
from callgate.sandbox._procfs import proc_hidden
from callgate.sandbox._spec import SandboxSpec, is_within, off_path

HOSTNAME = "callgate-sandbox"
#: firejail keeps its launcher and the sandbox monitor in the pids cgroup besides the tool.
LAUNCHER_TASKS = 2
#: Paths firejail needs to stay visible for itself.
_FIREJAIL_OWN = ("/proc", "/dev", "/run/firejail")
#: Always refused: the kernel keyrings (the tool would read the caller's session keyring).
_KEYRING_CALLS = ("add_key", "request_key", "keyctl")
#: With the network denied: the socket families left (as bwrap's filter), io_uring refused,
#: the i386 and x32 system call entries refused.
_SOCKET_FILTER = ("protocol inet,inet6,netlink", "seccomp.block-secondary")
_IO_URING_CALLS = ("io_uring_setup", "io_uring_enter", "io_uring_register")
#: ASCII characters a firejail profile path takes literally. Any other is a glob (``*?[]``),
#: a comment (``#``), a blank it trims or collapses, a character it rejects (``,'"{}&;``…) or
#: part of a macro (``${HOME}``); non-ASCII characters are taken literally.
_LITERAL = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._+-@=:~"
)


def _as_glob(path: str) -> str:
    """``path`` as a firejail glob that matches it: ``?`` for every character firejail
    would not take literally (an undecodable byte, kept as a surrogate, is one such)."""
    return "".join(
        ch if ch in _LITERAL or (ord(ch) > 0x7F and not 0xD800 <= ord(ch) <= 0xDFFF) else "?"
        for ch in path
    )


def _blacklist(path: str, visible: Sequence[str]) -> str:
    """The line hiding ``path``; a glob that would also hide a visible path is refused."""
    pattern = _as_glob(path)
    if pattern != path:
        for match in glob.glob(pattern):
            if any(is_within(keep, match) for keep in visible):
                raise SandboxError(
                    f"firejail cannot hide {path!r} by name without hiding {match!r}, which "
                    f"the tool must see; rename it or use bwrap"
                )
    return f"blacklist {pattern}"


def _read_write(path: str) -> str:
    """The line making ``path`` writable; refused when its glob would match anything else."""
    pattern = _as_glob(path)
    if pattern != path and glob.glob(pattern) != [path]:
        raise SandboxError(
            f"firejail cannot name the write root {path!r} without also making "
            f"{sorted(set(glob.glob(pattern)) - {path})!r} writable; rename it or use bwrap"
        )
    return f"read-write {pattern}"


def firejail_profile(spec: SandboxSpec) -> str:
    """The firejail profile text for ``spec`` (a file: the command line is capped at 128)."""
    lines = ["caps.drop all", "nonewprivs", "nogroups", "ipc-namespace"]
    # private-dev: a fresh /dev with the harmless nodes and a private /dev/shm, as bwrap's
    # --dev; the host's /dev holds kmsg, consoles, kvm, fuse, loop and a shared /dev/shm.
    lines += [f"hostname {HOSTNAME}", "private-dev", "read-only /", "read-only /proc"]
    dropped: tuple[str, ...] = _KEYRING_CALLS
    if not spec.network:
        lines += ["net none", *_SOCKET_FILTER]
        dropped += _IO_URING_CALLS
    lines.append("seccomp.drop " + ",".join(dropped))
    if spec.scratch:
        under_tmp = [root for root in spec.visible() if is_within(root, "/tmp")]
        if under_tmp:
            # firejail mounts the private /tmp last, over them; bwrap orders its mounts.
            raise SandboxError(
                f"firejail's private /tmp (scratch) would hide declared roots under /tmp: "
                f"{', '.join(under_tmp)}"
            )
        lines.append("private-tmp")
    lines += [_read_write(path) for path in spec.write_roots]
    visible = (*spec.visible(), *_FIREJAIL_OWN, spec.working_dir)
    hidden = (*off_path("/", visible), *spec.covered(), *proc_hidden())
    lines += [_blacklist(path, visible) for path in hidden]
    if any("\n" in line for line in lines):
        raise SandboxError("a path containing a newline cannot be written to a firejail profile")
    return "\n".join(lines) + "\n"


@functools.cache
def _profile_dir() -> str:
    base = tempfile.mkdtemp(prefix="callgate-firejail-")
    atexit.register(shutil.rmtree, base, True)
    return base


def write_profile(spec: SandboxSpec) -> str:
    """Write the profile for ``spec`` (named by its content) and return its path."""
    text = firejail_profile(spec)
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    path = os.path.join(_profile_dir(), f"{digest}.profile")
    if not os.path.exists(path):
        partial = f"{path}.{os.getpid()}.tmp"
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(partial, path)
    return path


def firejail_argv(
    spec: SandboxSpec,
    argv: Sequence[str],
    *,
    prefix: Sequence[str] = (),
    executable: str = "firejail",
) -> list[str]:
    """The full firejail command line that runs ``argv`` confined by ``spec``."""
    if argv and "=" in argv[0]:
        raise SandboxError("a command name containing '=' cannot be passed through env -i")
    profile = write_profile(spec)
    env = [f"{name}={value}" for name, value in sorted(spec.env.items())]
    head = [executable, "--quiet", f"--profile={profile}"]
    # No "--": with it, firejail runs the command through the caller's login shell
    # ("bash -c"), which needs a shell inside; without it, the first word that is not an
    # option (env) ends firejail's options and everything after it is passed as is.
    return [*head, "/usr/bin/env", "-i", *env, *prefix, *argv]


@functools.cache
def firejail_usable(path: str) -> str | None:
    """None when the firejail at ``path`` can start a sandbox here, else why not."""
    try:
        done = subprocess.run(
            [path, "--quiet", "--noprofile", "--net=none", "--", "/bin/true"],
            capture_output=True,
            timeout=20,
            check=False,
            env={},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"firejail cannot start: {exc}"
    if done.returncode != 0:
        return f"firejail cannot start: {done.stderr.decode('utf-8', 'replace').strip()}"
    return None
