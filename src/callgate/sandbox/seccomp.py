"""The seccomp filter that keeps a tool with ``network: deny`` away from host sockets.

A network namespace isolates internet and abstract Unix sockets, but not Unix sockets that
have a path: a socket file inside a visible root (a project's ``agent.sock``, ``docker.sock``)
is reached through the filesystem. ``connect`` cannot be filtered by path, so the filter
refuses to *create* the sockets that could reach one:

* ``socket(domain, …)`` succeeds only for ``AF_INET``, ``AF_INET6`` (isolated by the network
  namespace: loopback of its own) and ``AF_NETLINK`` (also per namespace; ``getifaddrs`` needs
  it); every other family fails with ``EAFNOSUPPORT`` — ``AF_UNIX`` by path, and ``AF_VSOCK``,
  which reaches the hypervisor whatever the namespace. ``socketpair`` stays allowed: its
  sockets have no address and connect only to each other;
* ``io_uring_setup`` / ``io_uring_enter`` / ``io_uring_register`` fail with ``ENOSYS`` (an
  io_uring ``SOCKET`` operation would create a socket without the ``socket`` system call;
  libraries fall back to plain system calls on ``ENOSYS``);
* a system call made through another ABI — the i386 ``int 0x80`` entry (``socketcall``,
  whose arguments a filter cannot read) or the x32 numbers on x86-64 — kills the process.

The program is classic BPF, assembled here (a few instructions; no library needed), for
x86-64 and aarch64; on any other machine a tool that declares ``network: deny`` is refused
(``SandboxError``) rather than run without the filter.
"""

from __future__ import annotations

import functools
import os
import socket
import struct
from dataclasses import dataclass

from callgate._errors import SandboxError

__all__ = ["socket_filter"]

# Classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
# Offsets in struct seccomp_data: nr, arch, then args[0] (its low word on little-endian).
_NR, _ARCH, _ARG0_LOW = 0, 4, 16
_X32_SYSCALL_BIT = 0x40000000
_AF_NETLINK = 16
_EAFNOSUPPORT = 97
_ENOSYS = 38
_IO_URING = (425, 426, 427)  # the same numbers on every architecture


@dataclass(frozen=True)
class _Machine:
    audit_arch: int
    socket_nr: int
    has_x32: bool


_MACHINES = {
    "x86_64": _Machine(audit_arch=0xC000003E, socket_nr=41, has_x32=True),
    "aarch64": _Machine(audit_arch=0xC00000B7, socket_nr=198, has_x32=False),
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


def _program(machine: _Machine) -> bytes:
    body: list[tuple[int, int, str | None, str | None]] = [
        (_LD_W_ABS, _ARCH, None, None),
        (_JEQ_K, machine.audit_arch, None, "kill"),
        (_LD_W_ABS, _NR, None, None),
    ]
    if machine.has_x32:
        body.append((_JGE_K, _X32_SYSCALL_BIT, "kill", None))
    body += [(_JEQ_K, nr, "nosys", None) for nr in _IO_URING]
    body += [(_JEQ_K, machine.socket_nr, None, "allow"), (_LD_W_ABS, _ARG0_LOW, None, None)]
    body += [(_JEQ_K, family, "allow", None) for family in _ALLOWED_FAMILIES]
    body.append((_RET_K, _RET_ERRNO | _EAFNOSUPPORT, None, None))
    labels = {"allow": len(body), "nosys": len(body) + 1, "kill": len(body) + 2}
    body += [
        (_RET_K, _RET_ALLOW, None, None),
        (_RET_K, _RET_ERRNO | _ENOSYS, None, None),
        (_RET_K, _RET_KILL_PROCESS, None, None),
    ]
    return _assemble(body, labels)


@functools.cache
def socket_filter(machine: str | None = None) -> bytes:
    """The filter program for ``machine`` (default: this kernel's), as bwrap's ``--seccomp``
    reads it; ``SandboxError`` on a machine it is not written for."""
    name = os.uname().machine if machine is None else machine
    found = _MACHINES.get(name)
    if found is None:
        raise SandboxError(
            f"network: deny needs a seccomp filter against host Unix sockets, and callgate "
            f"builds it for {', '.join(sorted(_MACHINES))} only, not {name}; declare "
            f"network: allow to run this tool here"
        )
    return _program(found)


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
