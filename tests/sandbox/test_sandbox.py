"""The facade: exports, backend choice, and the outcome the kernel records."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import socket
import textwrap
from collections.abc import Iterator

import pytest

import callgate.sandbox as sandbox_module
from callgate import SandboxError
from callgate.sandbox import Sandbox, SandboxOutcome, available_backends

from .conftest import BUILDER, Project, answering_pong, policy


def test_all_lists_exactly_the_public_names():
    public = {name for name in dir(sandbox_module) if not name.startswith("_")}
    exported = set(sandbox_module.__all__)
    assert exported <= public
    assert {"Sandbox", "SandboxOutcome", "available_backends"} <= exported
    assert sorted(sandbox_module.__all__) == sandbox_module.__all__


def test_outcome_is_a_frozen_value_with_the_agreed_fields():
    fields = [f.name for f in dataclasses.fields(SandboxOutcome)]
    assert fields == [
        "argv", "backend", "exit_code", "stdout", "stderr", "confined", "reason", "reason_id",
        "duration_ms",
    ]
    outcome = SandboxOutcome(("x",), "bwrap", 0, b"", b"", False, None, None, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.confined = True  # type: ignore[misc]


def test_auto_prefers_bwrap_then_firejail(project: Project):
    backends = available_backends()
    if not backends:
        pytest.skip("no sandbox backend can start on this host")
    box = Sandbox.for_policy(policy(**BUILDER), working_dir=str(project.root))
    assert box.backend == backends[0]
    assert backends == [b for b in ("bwrap", "firejail") if b in backends]


def test_unenforceable_policy_is_refused_before_choosing_a_backend(project: Project):
    hosts = {"hosts": ["pypi.org"], "proxy": "http://127.0.0.1:3128"}
    with pytest.raises(SandboxError, match="egress proxy"):
        Sandbox.for_policy(policy(network=hosts), working_dir=str(project.root))


def test_empty_command_is_refused(project: Project):
    if not available_backends():
        pytest.skip("no sandbox backend can start on this host")
    box = Sandbox.for_policy(policy(**BUILDER), working_dir=str(project.root))
    with pytest.raises(SandboxError, match="empty command"):
        box.run([])


def test_denial_is_the_reason_the_kernel_records():
    stopped = SandboxOutcome(
        ("x",), "bwrap", 1, b"", b"", True, "write outside declared roots blocked (EROFS): /etc/x",
        "sandbox.write", 1.0,
    )
    reason = stopped.denial()
    assert reason is not None
    assert (reason.id, reason.check) == ("sandbox.write", "sandbox")
    assert reason.message.endswith("/etc/x")
    clean = SandboxOutcome(("x",), "bwrap", 0, b"", b"", False, None, None, 1.0)
    assert clean.denial() is None


def test_a_foreign_error_during_a_run_becomes_a_sandbox_error(project: Project):
    if not available_backends():
        pytest.skip("no sandbox backend can start on this host")
    box = Sandbox.for_policy(policy(**BUILDER), working_dir=str(project.root))
    with pytest.raises(SandboxError, match="sandbox failed"):
        box.run(["/bin/cat"], stdin="text, not bytes")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- attacks, per backend

BACKENDS = [
    pytest.param(name, marks=pytest.mark.skipif(
        name not in available_backends(), reason=f"{name} cannot start on this host"))
    for name in ("bwrap", "firejail")
]


def confined(project: Project, backend: str, **fields: object) -> Sandbox:
    return Sandbox.for_policy(
        policy(**{**BUILDER, **fields}), working_dir=str(project.root),
        backend=backend, environ=project.environ,  # type: ignore[arg-type]
    )


def python(box: Sandbox, code: str) -> SandboxOutcome:
    return box.run(["python3", "-c", textwrap.dedent(code)])


#: Opens every file under /proc for writing (opening writes nothing) and prints those that open.
WRITABLE_PROC = """
    import os
    opened = []
    for top, dirs, files in os.walk("/proc"):
        for name in files:
            path = os.path.join(top, name)
            if os.path.islink(path):
                continue
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                continue
            opened.append(path)
    print(len(opened), *opened[:20])
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the hole is specific to a root caller")
@pytest.mark.parametrize("backend", BACKENDS)
def test_root_caller_tool_can_open_no_proc_file_for_writing(project: Project, backend: str):
    outcome = python(confined(project, backend), WRITABLE_PROC)
    assert outcome.exit_code == 0, outcome
    assert outcome.stdout.split()[0] == b"0", outcome.stdout[:2000]


@pytest.mark.skipif(os.geteuid() != 0, reason="the hole is specific to a root caller")
@pytest.mark.parametrize("backend", BACKENDS)
def test_root_caller_tool_still_writes_into_a_root_owned_write_root(
    project: Project, backend: str
):
    box = confined(project, backend)
    build = project.root / "build"
    build.mkdir()
    os.chown(build, 0, 0)
    os.chmod(build, 0o755)
    assert not python(box, "open('build/out', 'w').write('made')").confined
    assert (build / "out").read_text() == "made"


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernel_state_files_under_proc_cannot_be_read(project: Project, backend: str):
    outcome = python(confined(project, backend), """
        for path in ("/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/kcore"):
            try:
                with open(path, "rb") as handle:
                    print(path, len(handle.read(4096)))
            except OSError as exc:
                print(path, "refused", exc.errno)
    """)
    for line in outcome.stdout.decode().splitlines():
        assert line.endswith(("refused 13", "refused 2", " 0")), line


UNIX_CLIENT = """
    import socket
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(2)
        client.connect({path!r})
        print(client.recv(4).decode())
    except OSError as exc:
        raise SystemExit(f"connect: {{exc}}")
"""


@pytest.fixture
def unix_server(project: Project) -> Iterator[tuple[str, list[int]]]:
    """A root-owned, mode-0600 Unix socket inside the declared ./src, answering ``pong``."""
    path = str(project.root / "src" / "agent.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(4)
    with answering_pong(listener) as hits:
        yield path, hits


@pytest.mark.parametrize("backend", BACKENDS)
def test_network_deny_refuses_a_root_owned_unix_socket_in_a_read_root(
    project: Project, backend: str, unix_server: tuple[str, list[int]]
):
    path, hits = unix_server
    outcome = python(confined(project, backend, network="deny"), UNIX_CLIENT.format(path=path))
    assert b"pong" not in outcome.stdout
    assert hits == []
    assert outcome.reason_id == "sandbox.network", outcome


@pytest.mark.parametrize("backend", BACKENDS)
def test_network_allow_keeps_unix_sockets_working(
    project: Project, backend: str, unix_server: tuple[str, list[int]]
):
    path, hits = unix_server
    outcome = python(confined(project, backend, network="allow"), UNIX_CLIENT.format(path=path))
    assert outcome.stdout == b"pong\n", outcome
    assert hits == [1]


#: socket(AF_UNIX, SOCK_STREAM, 0) through the i386 entry (int 0x80, number 359), then a plain
#: connect with the descriptor it returned.
I386_SOCKET = """
    import ctypes, mmap, socket
    code = bytes([0x53, 0xB8, 0x67, 0x01, 0, 0, 0xBB, 1, 0, 0, 0, 0xB9, 1, 0, 0, 0, 0x31, 0xD2,
                  0xCD, 0x80, 0x5B, 0x48, 0x63, 0xC0, 0xC3])
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    fd = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()
    print("fd", fd, flush=True)
    client = socket.socket(fileno=fd)
    client.settimeout(2)
    client.connect({path!r})
    print(client.recv(4).decode())
"""
#: The same through the x32 system call numbers, and an io_uring instance (whose SOCKET
#: operation would create a socket without the socket system call).
X32_AND_IO_URING = """
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    print("x32", libc.syscall(0x40000000 | 41, 1, 1, 0), flush=True)
    print("io_uring", libc.syscall(425, 4, ctypes.create_string_buffer(120)), flush=True)
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the i386 entry is x86-64's")
@pytest.mark.parametrize("backend", BACKENDS)
def test_network_deny_holds_through_the_i386_system_call_entry(
    project: Project, backend: str, unix_server: tuple[str, list[int]]
):
    path, hits = unix_server
    outcome = python(confined(project, backend), I386_SOCKET.format(path=path))
    assert b"pong" not in outcome.stdout
    assert hits == []
    fd_line = [line for line in outcome.stdout.split(b"\n") if line.startswith(b"fd ")]
    assert not fd_line or int(fd_line[0].split()[1]) < 0, outcome


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x32 is x86-64's")
@pytest.mark.parametrize("backend", BACKENDS)
def test_network_deny_refuses_x32_sockets_and_io_uring(project: Project, backend: str):
    outcome = python(confined(project, backend), X32_AND_IO_URING)
    results = dict(line.split() for line in outcome.stdout.decode().splitlines())
    assert results.get("x32", "-1") == "-1", outcome
    assert results.get("io_uring", "-1") == "-1", outcome


#: Tries to read and to run every shell the host knows; prints those that work.
SHELLS_REACHABLE = """
    import os, subprocess
    names = {line.strip() for line in open("/etc/shells") if line.startswith("/")}
    names |= {"/bin/sh", "/bin/bash", "/bin/dash", "/usr/bin/sh", "/bin/rbash"}
    reached = []
    for path in sorted(names):
        if not os.path.lexists(path):
            continue
        try:
            with open(path, "rb") as handle:
                if handle.read(4):  # firejail shows a hidden file to root as empty
                    reached.append("read:" + path)
        except OSError:
            pass
        try:
            subprocess.run([path, "-c", "exit 0"], check=True, timeout=5)
            reached.append("ran:" + path)
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        subprocess.run("true", shell=True, check=True)
        reached.append("shell=True")
    except (OSError, subprocess.SubprocessError):
        pass
    print(" ".join(reached) or "none")
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_shells_are_absent_for_a_command_that_is_not_one(project: Project, backend: str):
    if not os.path.exists("/etc/shells"):
        pytest.skip("this host lists no shells")
    box = confined(project, backend, filesystem={"read": ["./src/**", "/etc/shells"]})
    outcome = python(box, SHELLS_REACHABLE)
    assert outcome.stdout == b"none\n", outcome


@pytest.mark.parametrize("backend", BACKENDS)
def test_shell_declared_by_name_or_run_as_the_command_stays_usable(
    project: Project, backend: str
):
    # /bin/sh is a symlink on most hosts: declaring it needs follow_symlinks (or its target).
    read = {"read": ["./src/**", "/bin/sh"], "follow_symlinks": ["/bin/sh"]}
    declared = confined(project, backend, filesystem=read)
    assert python(declared, "import subprocess; subprocess.run('echo ok', shell=True)"
                  ).stdout == b"ok\n"
    assert confined(project, backend).run(["/bin/sh", "-c", "echo ok"]).stdout == b"ok\n"


@pytest.mark.parametrize("backend", BACKENDS)
def test_running_a_hidden_shell_is_reported_as_a_denial(project: Project, backend: str):
    outcome = python(confined(project, backend),
                     "import subprocess; subprocess.run(['/bin/sh', '-c', 'true'])")
    assert outcome.reason_id == "sandbox.exec", outcome


@pytest.mark.parametrize("backend", BACKENDS)
def test_symlinked_roots_that_lead_out_are_refused_before_anything_runs(
    project: Project, backend: str, tmp_path
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project.root / "out").symlink_to(elsewhere)
    (project.root / "etc").symlink_to("/etc")
    writes = {"read": ["./src/**"], "write": ["./out/**"]}
    with pytest.raises(SandboxError, match="symlink"):
        confined(project, backend, filesystem=writes).run(["python3", "-c",
                                                           "open('out/x', 'w')"])
    assert list(elsewhere.iterdir()) == []
    with pytest.raises(SandboxError, match="symlink"):
        confined(project, backend, filesystem={"read": ["./etc/**"]}).run(["true"])
    followed = {"read": ["./src/**"], "write": ["./out/**"], "follow_symlinks": ["./out/**"]}
    box = confined(project, backend, filesystem=followed)
    # A followed root is bound where it really is.
    assert not box.run(["python3", "-c", f"open('{elsewhere}/x', 'w').write('y')"]).confined
    assert (elsewhere / "x").read_text() == "y"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_wildcard_match_that_leads_out_through_a_symlink_is_refused(
    project: Project, backend: str
):
    (project.root / "srv" / "a" / "out").mkdir(parents=True)
    (project.root / "srv" / "b").symlink_to("/etc")
    with pytest.raises(SandboxError, match="symlink"):
        confined(project, backend, filesystem={"read": ["./srv/*/**"]}).run(["true"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_dotenv_deeper_than_any_fixed_depth_is_hidden(project: Project, backend: str):
    deep = project.root / "src" / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    (deep / ".env").write_text("API_KEY=deep-secret\n")
    outcome = confined(project, backend).run(["cat", str(deep / ".env")])
    assert b"deep-secret" not in outcome.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_credential_scan_that_cannot_finish_refuses_to_start_the_tool(
    project: Project, backend: str
):
    crowded = project.root / "src" / "a-crowded"
    crowded.mkdir()
    for index in range(300):
        (crowded / f"f{index}").touch()
    (project.root / "src" / "z-late").mkdir()
    (project.root / "src" / "z-late" / ".env").write_text("TOKEN=late-secret\n")
    box = Sandbox.for_policy(
        policy(**BUILDER), working_dir=str(project.root), backend=backend,  # type: ignore[arg-type]
        environ=project.environ, scan_limit=200,
    )
    with pytest.raises(SandboxError, match="src"):
        box.run(["cat", str(project.root / "src" / "z-late" / ".env")])


#: Tries the host's device nodes and /dev/shm; prints what it reached.
HOST_DEVICES = """
    import os, sys
    reached = []
    for name in ("kmsg", "console", "tty0", "vcs", "kvm", "fuse", "loop-control", "vsock"):
        try:
            os.close(os.open("/dev/" + name, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY))
        except OSError:
            continue
        reached.append(name)
    try:
        with open("/dev/shm/" + sys.argv[1], "w") as handle:
            handle.write("planted")
    except OSError:
        pass
    print("reached", *reached)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_host_devices_and_host_shm_are_out_of_reach(project: Project, backend: str):
    probe = f"callgate-shm-{os.getpid()}-{backend}"
    box = confined(project, backend)
    try:
        outcome = box.run(["python3", "-c", textwrap.dedent(HOST_DEVICES), probe])
        assert outcome.stdout == b"reached\n", outcome
        assert not os.path.exists(f"/dev/shm/{probe}")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"/dev/shm/{probe}")


TLS_FILES = """
    import os, ssl
    try:
        found = os.stat("/etc/ssl/private")
        print("private", found.st_dev, found.st_ino)
    except OSError as exc:
        print("private absent", exc.errno)
    paths = ssl.get_default_verify_paths()
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=paths.cafile, capath=paths.capath)
    print("trusted", context.cert_store_stats()["x509_ca"] > 0)
"""


@pytest.mark.skipif(not os.path.isdir("/etc/ssl/private") or not os.path.isdir("/etc/ssl/certs"),
                    reason="this host keeps no TLS private key directory at /etc/ssl/private")
@pytest.mark.parametrize("backend", BACKENDS)
def test_network_allow_shows_the_trusted_certificates_but_not_the_hosts_private_keys(
    project: Project, backend: str
):
    host = os.stat("/etc/ssl/private")
    outcome = python(confined(project, backend, network="allow"), TLS_FILES)
    lines = outcome.stdout.decode().splitlines()
    # Absent (bwrap) or covered by an empty directory (firejail): never the host's directory.
    assert lines[0] != f"private {host.st_dev} {host.st_ino}", outcome
    assert lines[0].startswith("private "), outcome
    assert lines[1] == "trusted True", outcome


#: Every way to give a file in the write root a set-user-ID or set-group-ID bit; prints what
#: each attempt got, then the mode bits that ended up on disk.
SETUID_FILES = """
    import os, stat, shutil
    os.chdir("build")
    shutil.copy("/usr/bin/true", "plain")
    attempts = {
        "chmod": lambda: os.chmod("plain", 0o4755),
        "chmod-gid": lambda: os.chmod("plain", 0o2755),
        "fchmod": lambda: os.fchmod(os.open("plain", os.O_RDONLY), 0o6755),
        "open": lambda: os.close(os.open("made", os.O_CREAT | os.O_WRONLY, 0o4755)),
        "mknod": lambda: os.mknod("node", stat.S_IFREG | 0o4755),
        "mkdir": lambda: os.mkdir("dir", 0o2755),
    }
    for name, attempt in attempts.items():
        try:
            attempt()
            print(name, "done")
        except OSError as exc:
            print(name, "refused", exc.errno)
    os.chmod("plain", 0o755)
    print("plain chmod", oct(os.stat("plain").st_mode & 0o7777))
"""


@pytest.mark.parametrize("network", ["deny", "allow"])
@pytest.mark.skipif("bwrap" not in available_backends(), reason="bwrap cannot start here")
def test_a_tool_cannot_leave_a_setuid_or_setgid_file_in_its_write_root(
    project: Project, network: str
):
    outcome = python(confined(project, "bwrap", network=network), SETUID_FILES)
    lines = outcome.stdout.decode().splitlines()
    assert lines[:-1] == [f"{name} refused 1" for name in
                          ("chmod", "chmod-gid", "fchmod", "open", "mknod", "mkdir")], outcome
    assert lines[-1] == "plain chmod 0o755"
    for top, dirs, files in os.walk(project.root / "build"):
        for name in dirs + files:
            assert not os.lstat(os.path.join(top, name)).st_mode & 0o6000, name


KEYRING_READER = """
    import ctypes, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    keyctl = {"x86_64": 250, "aarch64": 219}[__import__("os").uname().machine]
    buffer = ctypes.create_string_buffer(256)
    got = libc.syscall(keyctl, 11, ctypes.c_long(int(sys.argv[1])), buffer, 256)  # KEYCTL_READ
    print("read", buffer.raw[:got] if got > 0 else ctypes.get_errno())
"""


@pytest.fixture
def session_key() -> Iterator[int]:
    """A key in a fresh session keyring of this process (as a login's Kerberos ticket is)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    numbers = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(os.uname().machine)
    if numbers is None:
        pytest.skip("keyring system call numbers are written here for x86-64 and aarch64 only")
    add_key, keyctl = numbers
    if libc.syscall(keyctl, 1, None) < 0:  # KEYCTL_JOIN_SESSION_KEYRING, anonymous
        pytest.skip("this process cannot join a session keyring")
    key = libc.syscall(add_key, b"user", b"callgate-test", b"keyring-secret", 14,
                       ctypes.c_long(-3))  # KEY_SPEC_SESSION_KEYRING
    assert key > 0, ctypes.get_errno()
    try:
        yield key
    finally:
        libc.syscall(keyctl, 3, ctypes.c_long(key))  # KEYCTL_REVOKE


@pytest.mark.parametrize("network", ["deny", "allow"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tool_cannot_read_the_callers_session_keyring(
    project: Project, backend: str, network: str, session_key: int
):
    box = confined(project, backend, network=network)
    outcome = box.run(["python3", "-c", textwrap.dedent(KEYRING_READER), str(session_key)])
    assert outcome.stdout.startswith(b"read "), outcome
    assert b"keyring-secret" not in outcome.stdout
