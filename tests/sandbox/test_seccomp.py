"""The socket filter's program, read back instruction by instruction and run by an interpreter."""

from __future__ import annotations

import os
import socket
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from callgate import SandboxError
from callgate.sandbox._seccomp import filter_fd, sandbox_filter, socket_filter

ALLOW, KILL = 0x7FFF0000, 0x80000000
X86_64, AARCH64, I386 = 0xC000003E, 0xC00000B7, 0x40000003


def run(program: bytes, *, nr: int, arch: int, arg0: int = 0, args: tuple[int, ...] = ()
        ) -> int:
    """Classic-BPF interpreter for the opcodes the filter uses, over one seccomp_data."""
    full = ((*args, 0, 0, 0, 0, 0, 0)[:6]) if args else (arg0, 0, 0, 0, 0, 0)
    data = struct.pack("<iIQ6Q", nr, arch, 0, *full)
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
        elif code in (0x15, 0x35, 0x45):
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
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
    with pytest.raises(SandboxError, match="riscv64"):
        socket_filter("riscv64")
    with pytest.raises(SandboxError, match="riscv64"):
        sandbox_filter("riscv64", network=True)


def test_filter_descriptor_reads_back_the_program_from_its_start():
    program = socket_filter("x86_64")
    fd = filter_fd(program)
    try:
        assert os.read(fd, 4096) == program
    finally:
        os.close(fd)


EPERM = 1
#: (machine, arch, [(name, nr, mode argument, flags argument or None)]).
MODE_CALLS = [
    ("x86_64", X86_64, [("open", 2, 2, 1), ("openat", 257, 3, 2), ("creat", 85, 1, None),
                        ("chmod", 90, 1, None), ("fchmod", 91, 1, None),
                        ("fchmodat", 268, 2, None), ("fchmodat2", 452, 2, None),
                        ("mkdir", 83, 1, None), ("mkdirat", 258, 2, None),
                        ("mknod", 133, 1, None), ("mknodat", 259, 2, None)]),
    ("aarch64", AARCH64, [("openat", 56, 3, 2), ("fchmod", 52, 1, None),
                          ("fchmodat", 53, 2, None), ("fchmodat2", 452, 2, None),
                          ("mkdirat", 34, 2, None), ("mknodat", 33, 2, None)]),
]


def call_args(mode_arg: int, mode: int, flags_arg: int | None, flags: int) -> tuple[int, ...]:
    args = [0] * 6
    args[mode_arg] = mode
    if flags_arg is not None:
        args[flags_arg] = flags
    return tuple(args)


@pytest.mark.parametrize("network", [True, False])
@pytest.mark.parametrize(("machine", "arch", "calls"), MODE_CALLS)
@given(mode=st.integers(min_value=0, max_value=2**64 - 1))
def test_setuid_and_setgid_modes_are_refused_whatever_the_network(
    machine: str, arch: int, calls: list[tuple[str, int, int, int | None]], network: bool,
    mode: int
):
    program = sandbox_filter(machine, network=network)
    creating = 0o100  # O_CREAT
    for name, nr, mode_arg, flags_arg in calls:
        action = run(program, nr=nr, arch=arch,
                     args=call_args(mode_arg, mode, flags_arg, creating))
        if mode & 0o6000:  # the kernel reads the mode as an int: the low word counts
            assert errno_of(action) == EPERM, name
        else:
            assert action == ALLOW, name


@pytest.mark.parametrize(("machine", "arch", "calls"), MODE_CALLS)
def test_opening_without_creating_ignores_the_mode_argument_and_tmpfile_counts(
    machine: str, arch: int, calls: list[tuple[str, int, int, int | None]]
):
    program = sandbox_filter(machine, network=True)
    for name, nr, mode_arg, flags_arg in calls:
        if flags_arg is None:
            continue
        plain = run(program, nr=nr, arch=arch, args=call_args(mode_arg, 0o4755, flags_arg, 2))
        assert plain == ALLOW, name  # O_RDWR: the mode register is not a mode
        tmpfile = call_args(mode_arg, 0o4755, flags_arg, 0o20000000 | 0o200000 | 2)
        assert errno_of(run(program, nr=nr, arch=arch, args=tmpfile)) == EPERM, name


@pytest.mark.parametrize(("machine", "arch"), [("x86_64", X86_64), ("aarch64", AARCH64)])
def test_with_the_network_allowed_sockets_pass_and_openat2_io_uring_and_abis_still_fail(
    machine: str, arch: int
):
    program = sandbox_filter(machine, network=True)
    socket_nr = 41 if machine == "x86_64" else 198
    assert run(program, nr=socket_nr, arch=arch, arg0=socket.AF_UNIX) == ALLOW
    for nr in (425, 426, 427, 437):  # io_uring_*, openat2
        assert errno_of(run(program, nr=nr, arch=arch)) == 38
    assert run(program, nr=socket_nr, arch=I386) == KILL
    if machine == "x86_64":
        assert run(program, nr=41 | 0x40000000, arch=X86_64) == KILL


@pytest.mark.parametrize("network", [True, False])
@pytest.mark.parametrize(("machine", "arch", "numbers"), [
    ("x86_64", X86_64, (248, 249, 250)), ("aarch64", AARCH64, (217, 218, 219))])
def test_the_kernel_keyrings_are_refused_whatever_the_network(
    machine: str, arch: int, numbers: tuple[int, ...], network: bool
):
    program = sandbox_filter(machine, network=network)
    for nr in numbers:  # add_key, request_key, keyctl
        assert errno_of(run(program, nr=nr, arch=arch, arg0=11)) == 38
