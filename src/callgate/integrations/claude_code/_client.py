"""``callgate hook claude-code``: the process Claude Code starts for every hook event.

It is kept to the standard library so that it starts in a few tens of milliseconds: it reads the
event, hands it to the resident decision process of its state directory over a Unix socket
(starting that process when none answers), and prints the answer. Everything that decides lives
in the resident process (``_server``), which keeps the compiled policy and the sessions' kernels
in memory.

The audit log is the state directory's ``audit.db`` unless a PostgreSQL store is named, by
``--store URL`` or the ``CALLGATE_STORE`` environment variable (the flag wins). The URL reaches
the resident process through its environment, never its command line, and the header of every
event carries only a digest of it: a process serving another store refuses the event.

It fails closed: when no answer comes before its deadline (the resident process cannot start, is
stuck, or replies with garbage), a ``PreToolUse`` is denied (JSON ``deny`` and exit code 2, so
the call is blocked whichever of the two Claude Code reads), a prompt or a tool result is refused
with exit code 2, and the other events report the failure (exit 1).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import struct
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing itself costs milliseconds at every hook start
    from typing import Any

__all__ = ["STORE_ENV", "main", "socket_path", "store_digest"]

#: A payload longer than this is not sent; the resident process refuses it, audited.
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
#: Seconds the hook waits for an answer, daemon start included (below the hook's timeout).
DEFAULT_DEADLINE_S = 20.0
_HEADER = struct.Struct(">I")
#: The environment variable naming the PostgreSQL audit store when ``--store`` is not given.
STORE_ENV = "CALLGATE_STORE"
_USAGE = ("usage: callgate hook claude-code --policy FILE [--state DIR] [--dir PROJECT] "
          "[--store URL] [--defer-allowed] [--deadline SECONDS]")


def socket_path(state_dir: str) -> str:
    """Where the resident process of ``state_dir`` listens (a private per-user directory)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/callgate-{os.getuid()}"
    digest = hashlib.sha256(os.path.realpath(state_dir).encode()).hexdigest()[:24]
    return os.path.join(base, f"hook-{digest}.sock")


def store_digest(store: str | None) -> str | None:
    """What the hook tells the resident process of its store: a digest, never the URL."""
    return None if not store else hashlib.sha256(store.encode()).hexdigest()


def private_dir(path: str) -> None:
    """Make the socket's directory, owned by this user and closed to others; refuse otherwise."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or not os.path.isdir(path):
        raise OSError(errno.EPERM, f"{path} is not a private directory of this user")


def send(conn: socket.socket, body: bytes) -> None:
    conn.sendall(_HEADER.pack(len(body)) + body)


def receive(conn: socket.socket, limit: int) -> bytes:
    size = _HEADER.unpack(_exactly(conn, _HEADER.size))[0]
    if size > limit:
        raise ValueError(f"a frame of {size} bytes is over the limit of {limit}")
    return _exactly(conn, size)


def _exactly(conn: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the connection closed early")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _options(argv: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {"policy": None, "state": None, "dir": None, "defer_allowed": False,
                            "deadline": DEFAULT_DEADLINE_S,
                            "store": os.environ.get(STORE_ENV) or None}
    it = iter(argv)
    for arg in it:
        if arg == "--defer-allowed":
            opts["defer_allowed"] = True
        elif arg in ("--policy", "--state", "--dir", "--deadline", "--store"):
            value = next(it, None)
            if value is None:
                raise ValueError(f"{arg} needs a value")
            if arg == "--store":
                opts["store"] = value
            else:
                opts[arg[2:]] = float(value) if arg == "--deadline" else os.path.abspath(value)
        else:
            raise ValueError(f"unknown option {arg!r}")
    if opts["policy"] is None:
        raise ValueError("--policy is required")
    if opts["store"] is not None and not opts["store"].startswith(("postgresql://",
                                                                   "postgres://")):
        raise ValueError("--store (or CALLGATE_STORE) must be a postgresql:// URL")
    if opts["state"] is None:
        opts["state"] = os.path.join(opts["dir"] or os.getcwd(), ".callgate")
    return opts


def _event_of(payload: bytes) -> str:
    try:
        name = json.loads(payload).get("hook_event_name")
    except Exception:
        return "unknown"
    return name if isinstance(name, str) else "unknown"


def refusal(event: str, reason: str) -> dict[str, Any]:
    """The fail-closed answer for ``event`` when no decision could be had."""
    if event in ("PreToolUse", "unknown"):
        body = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                       "permissionDecisionReason": reason}}
        return {"stdout": json.dumps(body), "stderr": reason, "exit": 2}
    if event in ("Stop", "SubagentStop", "SessionStart", "SessionEnd"):
        return {"stdout": "", "stderr": reason, "exit": 1}
    return {"stdout": "", "stderr": reason, "exit": 2}


def _start_server(state_dir: str, store: str | None) -> None:
    import subprocess  # only on the cold path

    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != STORE_ENV}
    if store:  # in the environment, which only this user can read, not in the process title
        env[STORE_ENV] = store
    with open(os.path.join(state_dir, "hook.log"), "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "callgate.integrations.claude_code._server", state_dir,
             os.environ.get("CALLGATE_HOOK_IDLE_S", "1800")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            close_fds=True, cwd="/", env=env)


def ask(state_dir: str, header: dict[str, Any], payload: bytes, deadline_s: float,
        store: str | None = None) -> dict[str, Any]:
    """The resident process's answer; starts it when none listens. Raises on failure."""
    path = socket_path(state_dir)
    private_dir(os.path.dirname(path))  # never speak to a socket another user could have made
    until = time.monotonic() + deadline_s
    next_start = 0.0
    body = json.dumps(header).encode() + b"\n" + payload
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(max(0.05, until - time.monotonic()))
        try:
            conn.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            conn.close()
            if time.monotonic() >= until:
                raise TimeoutError("the callgate decision process did not start in time"
                                   ) from None
            if time.monotonic() >= next_start:  # again each second: one may have been exiting
                _start_server(state_dir, store)
                next_start = time.monotonic() + 1.0
            time.sleep(0.02)
            continue
        try:
            send(conn, body)
            reply = json.loads(receive(conn, 64 * 1024 * 1024))
        finally:
            conn.close()
        if not (isinstance(reply, dict) and isinstance(reply.get("stdout"), str)
                and isinstance(reply.get("stderr"), str) and isinstance(reply.get("exit"), int)):
            raise ValueError("the callgate decision process gave a malformed answer")
        return reply


def main(argv: list[str]) -> int:
    """Run one hook event: stdin in, the answer on stdout/stderr, its exit code returned."""
    payload = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
    oversized = None
    if len(payload) > MAX_PAYLOAD_BYTES:
        total = len(payload)
        while chunk := sys.stdin.buffer.read(1 << 20):
            total += len(chunk)
        oversized, payload = total, payload[:65536]
    # the event's name is read only when callgate must answer without its decision process
    event = "unknown" if oversized is not None else None
    try:
        opts = _options(argv)
    except ValueError as exc:
        reply = refusal(event or _event_of(payload), f"callgate hook: {exc}; {_USAGE}")
    else:
        header = {"v": 1, "policy": opts["policy"], "project": opts["dir"],
                  "defer_allowed": opts["defer_allowed"], "oversized": oversized,
                  "store": store_digest(opts["store"])}
        try:
            reply = ask(opts["state"], header, payload, opts["deadline"], opts["store"])
        except Exception as exc:
            reply = refusal(event or _event_of(payload),
                            f"callgate could not decide ({type(exc).__name__}: {exc}); "
                            f"refused. See {opts['state']}/hook.log")
    if reply["stdout"]:
        sys.stdout.write(reply["stdout"] + "\n")
    if reply["stderr"]:
        sys.stderr.write(reply["stderr"] + "\n")
    sys.stdout.flush()
    return int(reply["exit"])
