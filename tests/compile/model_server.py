"""A scripted model server for tests: real HTTP on 127.0.0.1, speaking both model APIs.

``ModelServer`` listens on an ephemeral port (stdlib ``ThreadingHTTPServer`` in a daemon thread)
and answers

* ``POST /v1/chat/completions`` and ``POST /chat/completions`` — OpenAI-style chat completions;
* ``POST /v1/messages`` — Anthropic-style messages;

each request with the next scripted reply. A reply is

* text (``str``) — wrapped into the JSON shape of the API the request was sent to;
* :class:`Raw` (or a plain ``(status, body_bytes, headers)`` triple) — sent as it is, for
  error statuses and malformed or truncated answers; a ``Content-Length`` in its headers is sent
  as given (larger than the body: a truncated answer), otherwise one is added unless
  ``length=False`` (then the body runs until the connection closes);
* :class:`Delay` — wait ``seconds`` (cut short by ``close()``), then send ``then`` (if any);
* :class:`Trickle` — send the status line and headers of ``then`` a byte every ``seconds`` (each
  byte well within a client's read timeout, the whole far past it), then its body; how far it
  got before the client hung up is recorded (``wait_trickle``).

With the script empty the server answers 500 ``no scripted reply``. Every request is recorded in
``requests`` (method, path, lower-cased headers, raw body, parsed JSON body or ``None``).

URLs: ``url`` is ``http://127.0.0.1:PORT`` and serves as the base URL of BOTH providers (the
Anthropic provider posts to ``{url}/v1/messages``, the OpenAI provider to
``{url}/chat/completions``); ``openai_url`` is ``{url}/v1``, the base URL as OpenAI spells it
(requests then go to ``/v1/chat/completions``); ``anthropic_url`` equals ``url``.

Use it as a context manager (``with ModelServer() as server:``) or call ``close()``.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

OPENAI_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
ANTHROPIC_PATHS = frozenset({"/v1/messages"})


@dataclass(frozen=True)
class Raw:
    """An answer sent byte for byte: status, body, headers (``length=False``: no length)."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    length: bool = True


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` before answering with ``then`` (nothing: the connection just closes)."""

    seconds: float
    then: Reply | None = None


@dataclass(frozen=True)
class Trickle:
    """Send ``then``'s status line and headers a byte every ``seconds``, then its body."""

    seconds: float
    then: Raw


Reply = str | Raw | Delay | Trickle | tuple[int, bytes, dict[str, str]]


@dataclass(frozen=True)
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any


def openai_answer(text: str, model: str = "scripted") -> dict[str, Any]:
    """``text`` in the shape of an OpenAI chat completion."""
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def anthropic_answer(text: str, model: str = "scripted") -> dict[str, Any]:
    """``text`` in the shape of an Anthropic message."""
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }


class ModelServer:
    """A scripted OpenAI- and Anthropic-compatible server on 127.0.0.1 (see the module)."""

    def __init__(self) -> None:
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.requests: list[Recorded] = []
        self.errors: list[BaseException] = []
        #: (bytes of the head sent, bytes in the head) for each Trickle reply, once it ended
        self.trickled: list[tuple[int, int]] = []
        self._trickle_ended = threading.Semaphore(0)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self.port: int = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.openai_url = f"{self.url}/v1"
        self.anthropic_url = self.url
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def script(self, *replies: Reply) -> ModelServer:
        """Queue ``replies``, answered one per request in order; returns the server."""
        with self._lock:
            self._replies.extend(replies)
        return self

    def pending(self) -> int:
        """How many scripted replies have not been used."""
        with self._lock:
            return len(self._replies)

    def wait_trickle(self, timeout: float = 30.0) -> tuple[int, int] | None:
        """(head bytes sent, head bytes) of the next Trickle reply to end, or ``None`` when none
        ends within ``timeout`` seconds."""
        if not self._trickle_ended.acquire(timeout=timeout):
            return None
        with self._lock:
            return self.trickled.pop(0)

    def close(self) -> None:
        """Stop serving and release the port; a pending ``Delay`` ends at once."""
        if self._closing.is_set():
            return
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _next(self) -> Reply | None:
        with self._lock:
            return self._replies.popleft() if self._replies else None


def _handler_for(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read ``requests`` instead."""

        def handle(self) -> None:
            try:
                super().handle()
            except OSError:
                # the client closed or reset the connection (after giving up on an answer)
                self.close_connection = True

        def do_POST(self) -> None:
            try:
                self._serve()
            except OSError:
                # the client gave up (a timeout or an over-long body): nothing left to answer
                self.close_connection = True
            except Exception as exc:  # recorded for the test to see, never swallowed silently
                server.errors.append(exc)
                self.close_connection = True

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            try:
                parsed: Any = json.loads(body) if body else None
            except ValueError:
                parsed = None
            headers = {name.lower(): value for name, value in self.headers.items()}
            server.requests.append(Recorded("POST", self.path, headers, body, parsed))
            model = parsed.get("model", "scripted") if isinstance(parsed, dict) else "scripted"
            reply = server._next()
            while isinstance(reply, Delay):
                if server._closing.wait(reply.seconds):
                    self.close_connection = True
                    return
                reply = reply.then
                if reply is None:
                    self.close_connection = True
                    return
            if reply is None:
                self._send(Raw(500, b'{"error": "no scripted reply"}'))
            elif isinstance(reply, str):
                if self.path in OPENAI_PATHS:
                    answer = openai_answer(reply, model)
                elif self.path in ANTHROPIC_PATHS:
                    answer = anthropic_answer(reply, model)
                else:
                    self._send(Raw(404, b'{"error": "no such API path"}'))
                    return
                payload = json.dumps(answer).encode()
                self._send(Raw(200, payload, {"Content-Type": "application/json"}))
            elif isinstance(reply, Raw):
                self._send(reply)
            elif isinstance(reply, Trickle):
                self._trickle(reply)
            else:
                status, raw_body, raw_headers = reply
                self._send(Raw(status, raw_body, raw_headers))

        def _trickle(self, reply: Trickle) -> None:
            raw = reply.then
            lines = [f"HTTP/1.1 {raw.status} Scripted", "Content-Type: application/json",
                     f"Content-Length: {len(raw.body)}", "Connection: close",
                     *(f"{name}: {value}" for name, value in raw.headers.items())]
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
            self.close_connection = True
            sent = 0
            try:
                for byte in head:
                    if server._closing.wait(reply.seconds):
                        return
                    self.wfile.write(bytes([byte]))
                    sent += 1
                self.wfile.write(raw.body)
            finally:
                with server._lock:
                    server.trickled.append((sent, len(head)))
                server._trickle_ended.release()

        def _send(self, reply: Raw) -> None:
            self.send_response(reply.status)
            names = {name.lower() for name in reply.headers}
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if "content-type" not in names:
                self.send_header("Content-Type", "application/json")
            if reply.length and "content-length" not in names:
                self.send_header("Content-Length", str(len(reply.body)))
            declared = next(
                (
                    value
                    for name, value in reply.headers.items()
                    if name.lower() == "content-length"
                ),
                None,
            )
            if not reply.length or (declared is not None and int(declared) != len(reply.body)):
                # a body that runs to the close, or one shorter than announced: close after it
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(reply.body)
            self.wfile.flush()

    return Handler
