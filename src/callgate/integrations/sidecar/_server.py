"""Running the sidecar under uvicorn, and stopping it without a run half-written.

On SIGTERM or SIGINT the server stops accepting connections, long polls return what they have
(their approvals stay pending), requests in flight finish (for at most ``graceful_s``
seconds), then every open run's state is written, the stop is recorded and the audit log
closed.
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from callgate._errors import CallgateError
from callgate.integrations.sidecar._app import build_app
from callgate.integrations.sidecar._keys import KeyRing
from callgate.integrations.sidecar._service import ExecutorFn, Sidecar
from callgate.policy import LoadedPolicy

__all__ = ["DEFAULT_LISTEN", "parse_listen", "serve"]

#: Where the sidecar listens unless told otherwise.
DEFAULT_LISTEN = "127.0.0.1:8787"


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as a host and a port."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535 or not host:
        raise CallgateError(f"--listen {listen!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(loaded: LoadedPolicy, *, policy_path: str, keys: str, listen: str | None = None,
          unix: str | None = None, audit: str | None = None, state_dir: str | None = None,
          working_dir: str | None = None, approval_ttl_s: float = 300.0,
          allow_remote: bool = False, graceful_s: float = 10.0,
          executors: Mapping[str, ExecutorFn] | None = None,
          otlp_endpoint: str | None = None, store: str | None = None,
          audit_key: str | None = None) -> int:
    """Serve until stopped; returns the exit status. ``executors`` run ``/v1/execute`` calls
    (``callgate serve`` builds them from the policy's grants); with ``otlp_endpoint`` every
    decided call is also sent there as an OpenTelemetry span (``callgate.audit._otel``). With
    ``store`` (``postgresql://…``) runs, approvals and the receipt key are shared with the other
    sidecars on that store (``_shared``)."""
    import uvicorn

    policy_bytes = Path(policy_path).read_bytes()
    state = Path(state_dir) if state_dir else (Path(audit + ".sidecar") if audit
                                                 else Path(".callgate-sidecar"))
    sidecar = Sidecar(loaded, policy_bytes=policy_bytes, keys=KeyRing(keys), state_dir=state,
                      audit=audit, working_dir=working_dir, approval_ttl_s=approval_ttl_s,
                      executors=executors, store=store, audit_key=audit_key)
    exporter = None
    if otlp_endpoint is not None:
        from callgate.audit._otel import OtlpExporter

        exporter = OtlpExporter(otlp_endpoint)
        sidecar.audit.add_observer(exporter)
    app = build_app(sidecar, policy_path=os.path.abspath(policy_path))
    options: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "on",
                               "timeout_graceful_shutdown": graceful_s}
    if unix is not None:
        options["uds"] = unix
    else:
        host, port = parse_listen(listen or DEFAULT_LISTEN)
        if not allow_remote and not _loopback(host):
            raise CallgateError(f"{host} is not a loopback address; pass --allow-remote to "
                                f"serve it anyway (behind TLS you terminate yourself)")
        options.update(host=host, port=port)

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            sidecar.stopping.set()  # long polls answer now, so in-flight requests finish
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                # stopped gracefully: exit 0 rather than die of the signal uvicorn re-raises
                captured = getattr(self, "_captured_signals", None)
                if isinstance(captured, list):
                    captured.clear()

    server = _Server(uvicorn.Config(app, **options))
    # What exists now (the policy, the models, the app) lives as long as the process: frozen
    # out of the collector's reach, a collection walks only what the requests made.
    gc.collect()
    gc.freeze()
    server.run()
    if exporter is not None:
        exporter.shutdown()
    if unix is not None:
        Path(unix).unlink(missing_ok=True)
    return 0
