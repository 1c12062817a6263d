"""A real HTTP server on loopback for the executor tests (never any other address)."""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

GZIP_BOMB = gzip.compress(b"\0" * (20 * 2**20), compresslevel=9)


@dataclass
class Recorder:
    """Every request the server received, as (method, path, headers)."""

    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, method: str, path: str, headers: dict[str, str]) -> None:
        with self.lock:
            self.requests.append((method, path, headers))

    def paths(self) -> list[str]:
        with self.lock:
            return [path for _, path, _ in self.requests]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        """Keep test output quiet."""

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.recorder.add(self.command, self.path, dict(self.headers.items()))
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        route = getattr(self, "route_" + url.path.strip("/").replace("-", "_"), None)
        if route is None:
            self._send(404, b"not found")
            return
        route(query, body)

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = do_PATCH = do_OPTIONS = _handle  # noqa: N815 - http.server's names

    def route_echo(self, query: dict[str, str], body: bytes) -> None:
        payload = {
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("utf-8", "replace"),
        }
        self._send(200, json.dumps(payload).encode(), {"Content-Type": "application/json"})

    def route_big(self, query: dict[str, str], body: bytes) -> None:
        size = int(query.get("n", "0"))
        if query.get("undeclared"):
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"x" * size)
            self.close_connection = True
            return
        self._send(200, b"x" * size)

    def route_gzip(self, query: dict[str, str], body: bytes) -> None:
        data = GZIP_BOMB if query.get("bomb") else gzip.compress(b"small and compressed")
        self._send(200, data, {"Content-Encoding": "gzip"})

    def route_redirect(self, query: dict[str, str], body: bytes) -> None:
        status = int(query.get("code", "302"))
        self._send(status, b"", {"Location": query["to"]})

    def route_chain(self, query: dict[str, str], body: bytes) -> None:
        left = int(query.get("n", "0"))
        if left <= 0:
            self._send(200, b"end of chain")
        else:
            self._send(302, b"", {"Location": f"/chain?n={left - 1}"})

    def route_slow(self, query: dict[str, str], body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "40")
        self.end_headers()
        for _ in range(40):
            try:
                self.wfile.write(b"s")
                self.wfile.flush()
            except OSError:
                return
            time.sleep(0.1)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    recorder: Recorder


@dataclass
class LoopbackServer:
    """A running server: its host, port and the requests it received."""

    host: str
    port: int
    recorder: Recorder

    def url(self, path: str, host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}{path}"


def _serve(host: str, port: int = 0) -> tuple[_Server, threading.Thread]:
    server = _Server((host, port), _Handler)
    server.recorder = Recorder()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    return server, thread


@pytest.fixture(scope="module")
def http_server() -> Iterator[LoopbackServer]:
    server, thread = _serve("127.0.0.1")
    yield LoopbackServer("127.0.0.1", server.server_address[1], server.recorder)
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def fresh_server() -> Iterator[LoopbackServer]:
    """A server of its own for tests that count requests."""
    server, thread = _serve("127.0.0.1")
    yield LoopbackServer("127.0.0.1", server.server_address[1], server.recorder)
    server.shutdown()
    server.server_close()
    thread.join(5)
