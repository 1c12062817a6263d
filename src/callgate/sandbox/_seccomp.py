"""The seccomp filter every bubblewrap sandbox runs under.

**Always** — whatever the network — the filter refuses to make a file setuid or setgid
(``EPERM``), as systemd's ``RestrictSUIDSGID=`` does. A sandbox started by root runs the tool
as kernel uid 0, so a file it creates in a write root is owned by root on the host; with the
set-user-ID bit, any host user who runs it becomes root (and under a non-root caller, becomes
that caller). Refused: ``chmod``, ``fchmod``, ``fchmodat``, ``fchmodat2``, ``mkdir``,
``mkdirat``, ``mknod`` and ``mknodat`` with ``S_ISUID`` or ``S_ISGID`` in the mode, and
``open``, ``openat`` and ``creat`` creating a file (``O_CREAT`` or ``O_TMPFILE``) with either
bit. ``openat2`` (whose mode is behind a pointer a filter cannot read) and io_uring (whose
``OPENAT`` and ``SOCKET`` operations bypass the system calls above) fail with ``ENOSYS``; C
libraries fall back to plain system calls on ``ENOSYS``. The kernel keyrings (``add_key``,
``request_key``, ``keyctl``) fail with ``ENOSYS`` too: the tool would otherwise read the keys
of the caller's session keyring, which it inherits (Kerberos tickets, tokens a keyring library
stored), as container runtimes' default filters refuse them. A system call made through another
ABI — the i386 ``int 0x80`` entry or the x32 numbers on x86-64 — kills the process, as its
numbers and arguments are not the ones checked here.

**With the network denied**, it also keeps the tool away from host sockets. A network
namespace isolates internet and abstract Unix sockets, but not Unix sockets that have a path:
a socket file inside a visible root (a project's ``agent.sock``, ``docker.sock``) is reached
through the filesystem. ``connect`` cannot be filtered by path, so the filter refuses to
*create* the sockets that could reach one: ``socket(domain, …)`` succeeds only for
``AF_INET``, ``AF_INET6`` (isolated by the network namespace: loopback of its own) and
``AF_NETLINK`` (also per namespace; ``getifaddrs`` needs it); every other family fails with
``EAFNOSUPPORT`` — ``AF_UNIX`` by path, and ``AF_VSOCK``, which reaches the hypervisor
whatever the namespace. ``socketpair`` stays allowed: its sockets have no address and connect
only to each other. The kernel reads the family, flags and modes as ``int``s: the filter
compares the low 32 bits of each argument, as the kernel uses them.

The program is classic BPF, assembled here (a few dozen instructions; no library needed), for
x86-64 and aarch64; on any other machine bwrap is refused (``SandboxError``) rather than run
without the filter.
"""

from __future__ import annotations

import functools
import os
import socket
import struct
from dataclasses import dataclass

from callgate._errors import SandboxError

__all__ = ["sandbox_filter", "socket_filter"]

# Classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
# Offsets in struct seccomp_data: nr, arch, then args[i] (its low word on little-endian).
_NR, _ARCH = 0, 4
_X32_SYSCALL_BIT = 0x40000000
_AF_NETLINK = 16
_EPERM = 1
_EAFNOSUPPORT = 97
_ENOSYS = 38
_IO_URING = (425, 426, 427)  # the same numbers on every architecture
_OPENAT2 = 437  # the same number on every architecture
_S_ISUID_OR_GID = 0o6000
_CREATES = 0o100 | 0o20000000  # O_CREAT | __O_TMPFILE, the same on x86-64 and aarch64


def _arg_low(index: int) -> int:
    return 16 + 8 * index


@dataclass(frozen=True)
class _ModeCall:
    """A system call that sets a file mode: its number, the mode's argument and, for the
    opening calls, the flags' argument (the mode only counts when they create a file)."""

    nr: int
    mode_arg: int
    flags_arg: int | None = None


@dataclass(frozen=True)
class _Machine:
    audit_arch: int
    socket_nr: int
    has_x32: bool
    mode_calls: tuple[_ModeCall, ...]
    keyring_calls: tuple[int, ...]  # add_key, request_key, keyctl


_MACHINES = {
    "x86_64": _Machine(audit_arch=0xC000003E, socket_nr=41, has_x32=True, mode_calls=(
        _ModeCall(2, 2, 1),      # open(path, flags, mode)
        _ModeCall(257, 3, 2),    # openat(dirfd, path, flags, mode)
        _ModeCall(85, 1),        # creat(path, mode)
        _ModeCall(90, 1),        # chmod
        _ModeCall(91, 1),        # fchmod
        _ModeCall(268, 2),       # fchmodat
        _ModeCall(452, 2),       # fchmodat2
        _ModeCall(83, 1),        # mkdir
        _ModeCall(258, 2),       # mkdirat
        _ModeCall(133, 1),       # mknod
        _ModeCall(259, 2),       # mknodat
    ), keyring_calls=(248, 249, 250)),
    "aarch64": _Machine(audit_arch=0xC00000B7, socket_nr=198, has_x32=False, mode_calls=(
        _ModeCall(56, 3, 2),     # openat
        _ModeCall(52, 1),        # fchmod
        _ModeCall(53, 2),        # fchmodat
        _ModeCall(452, 2),       # fchmodat2
        _ModeCall(34, 2),        # mkdirat
        _ModeCall(33, 2),        # mknodat
    ), keyring_calls=(217, 218, 219)),
}
_ALLOWED_FAMILIES = (int(socket.AF_INET), int(socket.AF_INET6), _AF_NETLINK)


def _assemble(program: list[tuple[int, int, str | None, str | None]], labels: dict[str, int]
              ) -> bytes:
    """Encode ``(code, k, jump-if-true label, jump-if-false label)`` as ``sock_filter``s."""
    out = bytearray()
    for index, (code, k, true, false) in enumerate(program):
        jt = 0 if true is None else labels[true] - index - 1
        jf = 0 if false is None else labels[false] - index - 1
        out += struct.pack("<HBBI", code, jt, jf, k)
    return bytes(out)


_Insn = tuple[int, int, str | None, str | None]


def _program(machine: _Machine, network: bool) -> bytes:
    body: list[_Insn] = [
        (_LD_W_ABS, _ARCH, None, None),
        (_JEQ_K, machine.audit_arch, None, "kill"),
        (_LD_W_ABS, _NR, None, None),
    ]
    if machine.has_x32:
        body.append((_JGE_K, _X32_SYSCALL_BIT, "kill", None))
    refused = (*_IO_URING, _OPENAT2, *machine.keyring_calls)
    body += [(_JEQ_K, nr, "nosys", None) for nr in refused]
    body += [(_JEQ_K, call.nr, f"mode{i}", None) for i, call in enumerate(machine.mode_calls)]
    if not network:
        body += [(_JEQ_K, machine.socket_nr, "socket", None)]
    body.append((_RET_K, _RET_ALLOW, None, None))
    labels: dict[str, int] = {}
    for i, call in enumerate(machine.mode_calls):
        labels[f"mode{i}"] = len(body)
        if call.flags_arg is not None:
            body += [(_LD_W_ABS, _arg_low(call.flags_arg), None, None),
                     (_JSET_K, _CREATES, None, "allow")]
        body += [(_LD_W_ABS, _arg_low(call.mode_arg), None, None),
                 (_JSET_K, _S_ISUID_OR_GID, "eperm", "allow")]
    if not network:
        labels["socket"] = len(body)
        body.append((_LD_W_ABS, _arg_low(0), None, None))
        body += [(_JEQ_K, family, "allow", None) for family in _ALLOWED_FAMILIES]
        body.append((_RET_K, _RET_ERRNO | _EAFNOSUPPORT, None, None))
    labels.update(allow=len(body), nosys=len(body) + 1, kill=len(body) + 2,
                  eperm=len(body) + 3)
    body += [
        (_RET_K, _RET_ALLOW, None, None),
        (_RET_K, _RET_ERRNO | _ENOSYS, None, None),
        (_RET_K, _RET_KILL_PROCESS, None, None),
        (_RET_K, _RET_ERRNO | _EPERM, None, None),
    ]
    return _assemble(body, labels)


@functools.cache
def sandbox_filter(machine: str | None = None, *, network: bool) -> bytes:
    """The filter program for ``machine`` (default: this kernel's), as bwrap's ``--seccomp``
    reads it: setuid/setgid modes refused always, sockets that could reach a host Unix socket
    refused unless ``network``; ``SandboxError`` on a machine it is not written for."""
    name = os.uname().machine if machine is None else machine
    found = _MACHINES.get(name)
    if found is None:
        raise SandboxError(
            f"the bwrap sandbox needs a seccomp filter (no setuid files; with the network "
            f"denied, no host Unix sockets), and callgate builds it for "
            f"{', '.join(sorted(_MACHINES))} only, not {name}; use firejail here"
        )
    return _program(found, network)


def socket_filter(machine: str | None = None) -> bytes:
    """The filter for a tool with the network denied (``sandbox_filter(network=False)``)."""
    return sandbox_filter(machine, network=False)


def filter_fd(program: bytes) -> int:
    """A descriptor positioned at the start of ``program`` (an anonymous memory file)."""
    fd = os.memfd_create("callgate-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
