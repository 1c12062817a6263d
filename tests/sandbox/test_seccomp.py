"""The socket filter's program, read back instruction by instruction and run by an interpreter."""

from __future__ import annotations

import os
import socket
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from callgate import SandboxError
from callgate.sandbox.seccomp import filter_fd, socket_filter

ALLOW, KILL = 0x7FFF0000, 0x80000000
X86_64, AARCH64, I386 = 0xC000003E, 0xC00000B7, 0x40000003


def run(program: bytes, *, nr: int, arch: int, arg0: int = 0) -> int:
    """Classic-BPF interpreter for the opcodes the filter uses, over one seccomp_data."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
        elif code in (0x15, 0x35):
            taken = acc == k if code == 0x15 else acc >= k
            pc += jt if taken else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")
        pc += 1


def errno_of(action: int) -> int | None:
    return action & 0xFFFF if action & 0xFFFF0000 == 0x00050000 else None


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_socket_is_allowed_only_for_inet_inet6_and_netlink(family: int):
    action = run(socket_filter("x86_64"), nr=41, arch=X86_64, arg0=family)
    if family in (socket.AF_INET, socket.AF_INET6, 16):
        assert action == ALLOW
    else:
        assert errno_of(action) == 97  # EAFNOSUPPORT


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_high_bits_of_the_family_argument_do_not_change_the_verdict(high: int):
    # The kernel reads the family as an int: only the low word counts, as in the filter.
    action = run(socket_filter("x86_64"), nr=41, arch=X86_64, arg0=(high << 32) | 1)
    assert errno_of(action) == 97


@pytest.mark.parametrize(("machine", "arch", "socket_nr"), [
    ("x86_64", X86_64, 41), ("aarch64", AARCH64, 198)])
def test_io_uring_is_refused_and_other_calls_pass(machine: str, arch: int, socket_nr: int):
    program = socket_filter(machine)
    for nr in (425, 426, 427):
        assert errno_of(run(program, nr=nr, arch=arch)) == 38  # ENOSYS
    for nr in (0, 1, 59, 53, 200, 424, 428):  # read, write, execve, socketpair ...
        assert run(program, nr=nr, arch=arch) == ALLOW
    assert errno_of(run(program, nr=socket_nr, arch=arch, arg0=socket.AF_UNIX)) == 97


@given(st.integers(min_value=0, max_value=2**30))
def test_x32_numbers_and_foreign_abis_kill(nr: int):
    program = socket_filter("x86_64")
    assert run(program, nr=nr | 0x40000000, arch=X86_64) == KILL
    assert run(program, nr=nr, arch=I386) == KILL


def test_an_unsupported_machine_is_refused_rather_than_run_unfiltered():
    with pytest.raises(SandboxError, match="network: allow"):
        socket_filter("riscv64")


def test_filter_descriptor_reads_back_the_program_from_its_start():
    program = socket_filter("x86_64")
    fd = filter_fd(program)
    try:
        assert os.read(fd, 4096) == program
    finally:
        os.close(fd)
