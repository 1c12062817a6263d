"""The resident decision process of one state directory: hook events in over a Unix socket.

One per state directory (an exclusive lock on ``daemon.lock`` says which): it keeps the compiled
policy and the live sessions' kernels in memory, answers each event through ``HookService``, and
exits after ``idle_s`` seconds without an event. Sessions are stored after every event (see
``_sessions``), so stopping it at any moment loses nothing: the next hook starts a new one, which
restores each session from its row. The socket lives in a directory only this user can enter.

The audit log is ``STATE_DIR/audit.db``, or the PostgreSQL store named by ``CALLGATE_STORE`` in
the environment the hook started it with (never on its command line: a URL may hold a password).
An event whose hook names another store (by digest) is refused, not written elsewhere.

Run as ``python -m callgate.integrations.claude_code._server STATE_DIR [IDLE_SECONDS]``; the hook
starts it on demand.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from callgate.integrations.claude_code._client import (
    MAX_PAYLOAD_BYTES,
    STORE_ENV,
    private_dir,
    receive,
    send,
    socket_path,
    store_digest,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from callgate.integrations.claude_code._service import HookService

log = logging.getLogger("callgate.claude_code")

__all__ = ["DEFAULT_IDLE_S", "serve"]

#: Seconds without an event after which the process exits.
DEFAULT_IDLE_S = 1800.0


def _handle(conn: socket.socket, service: HookService, store: str | None) -> None:
    with conn:
        try:
            conn.settimeout(30.0)
            frame = receive(conn, MAX_PAYLOAD_BYTES + 65536 + 4096)
            head, _, payload = frame.partition(b"\n")
            header = json.loads(head)
            if not isinstance(header, dict) or header.get("v") != 1:
                from callgate.integrations.claude_code._service import Answer

                answer = Answer(stderr="callgate: a hook of another version spoke", exit=2)
            elif header.get("store") != store:
                from callgate.integrations.claude_code._service import Answer, pre_tool_answer

                reason = (f"callgate: the decision process of {service.state_dir} keeps its "
                          f"audit log in another store than this hook names; stop it (kill "
                          f"the pid in daemon.pid) and the next hook starts one for this store")
                answer = pre_tool_answer("deny", reason, exit_code=2)
            else:
                oversized = header.get("oversized")
                answer = service.answer(
                    payload, policy=str(header.get("policy")),
                    project=header.get("project") if isinstance(header.get("project"), str)
                    else None, defer_allowed=header.get("defer_allowed") is True,
                    oversized=oversized if isinstance(oversized, int) else None)
            send(conn, json.dumps(answer.as_json()).encode())
        except Exception:
            log.exception("a hook connection failed")  # the hook then fails closed


def serve(state_dir: str, idle_s: float = DEFAULT_IDLE_S, store: str | None = None) -> int:
    """Serve hook events for ``state_dir`` until idle; 0 at once if another process does.

    ``store`` is the PostgreSQL URL of the audit log (None: ``state_dir/audit.db``); it is
    opened with ``callgate.audit.open_store`` on the first event that writes.

    The lock is taken before the decision machinery is imported: hooks that find no process
    each start one, and those that lose the race must cost an interpreter start, not the
    second of imports that would starve the one that won.
    """
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = (state / "daemon.lock").open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another process serves this directory
    path = socket_path(str(state))
    private_dir(os.path.dirname(path))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    (state / "daemon.pid").write_text(f"{os.getpid()}\n", encoding="utf-8")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    # Listening before the service is built: hooks that connect now wait in the backlog
    # instead of finding no socket and starting more processes.
    listener.listen(128)
    listener.settimeout(1.0)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    service: HookService | None = None
    try:
        from callgate.integrations.claude_code._service import HookService

        service = HookService(state, store=store)
        last = time.monotonic()
        log.info("serving %s on %s, audit log in %s", state, path, service.audit_where)
        while not stop.is_set() and time.monotonic() - last < idle_s:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            last = time.monotonic()
            threading.Thread(target=_handle, args=(conn, service, store_digest(store)),
                             daemon=True).start()
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        if service is not None:
            service.close()
        lock.close()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    idle = float(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_IDLE_S
    sys.exit(serve(sys.argv[1], idle, os.environ.pop(STORE_ENV, None) or None))
