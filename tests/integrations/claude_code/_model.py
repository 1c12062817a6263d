"""A scripted model on 127.0.0.1 speaking the Anthropic Messages API (streaming SSE).

Each request that offers tools gets the next turn of the script: a ``tool_use`` block (one
call) or text (the model stops). Requests without tools are Claude Code's side queries and get
plain text. Every request body is kept, so a test can read the tool results the client sent.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)


@dataclass
class Turn:
    """One model turn: a tool call (``tool`` and ``input``) or a final text."""

    tool: str | None = None
    input: dict[str, Any] = field(default_factory=dict)
    text: str = "done"


def tool(name: str, **arguments: Any) -> Turn:
    return Turn(tool=name, input=arguments)


def say(text: str) -> Turn:
    return Turn(text=text)


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(body)}\n\n".encode()
                    for name, body in events)


def _message(blocks: list[dict[str, Any]], stop: str) -> list[tuple[str, dict[str, Any]]]:
    mid = f"msg_{next(_ids):06d}"
    usage = {"input_tokens": 10, "output_tokens": 1}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start",
        "message": {"id": mid, "type": "message", "role": "assistant", "model": "scripted",
                    "content": [], "stop_reason": None, "stop_sequence": None,
                    "usage": usage}})]
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            events += [("content_block_start", {"type": "content_block_start", "index": i,
                        "content_block": {"type": "text", "text": ""}}),
                       ("content_block_delta", {"type": "content_block_delta", "index": i,
                        "delta": {"type": "text_delta", "text": block["text"]}})]
        else:
            events += [("content_block_start", {"type": "content_block_start", "index": i,
                        "content_block": {"type": "tool_use", "id": block["id"],
                                          "name": block["name"], "input": {}}}),
                       ("content_block_delta", {"type": "content_block_delta", "index": i,
                        "delta": {"type": "input_json_delta",
                                  "partial_json": json.dumps(block["input"])}})]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events += [("message_delta", {"type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5}}),
               ("message_stop", {"type": "message_stop"})]
    return events


class ScriptedModel:
    """The server; ``url`` goes into ``ANTHROPIC_BASE_URL``."""

    def __init__(self, turns: list[Turn]) -> None:
        self.turns = list(turns)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0)))
                                  or b"{}")
                if "count_tokens" in self.path:
                    return self._json({"input_tokens": 10})
                with model._lock:
                    model.requests.append(body)
                    turn = model.turns.pop(0) if body.get("tools") and model.turns else None
                if turn is None or turn.tool is None:
                    blocks = [{"type": "text", "text": turn.text if turn else "ok"}]
                    stop = "end_turn"
                else:
                    blocks = [{"type": "tool_use", "id": f"toolu_{next(_ids):06d}",
                               "name": turn.tool, "input": turn.input}]
                    stop = "tool_use"
                if body.get("stream"):
                    data = _sse(_message(blocks, stop))
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return None
                return self._json({"id": "msg_x", "type": "message", "role": "assistant",
                                   "model": "scripted", "content": blocks, "stop_reason": stop,
                                   "stop_sequence": None,
                                   "usage": {"input_tokens": 10, "output_tokens": 5}})

            def do_GET(self) -> None:
                self._json({})

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.end_headers()

            def _json(self, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def tool_results(self) -> Iterator[str]:
        """The text of every tool result the client sent back, in order, without repeats."""
        seen: set[str] = set()
        for body in self.requests:
            for message in body.get("messages", []):
                content = message.get("content")
                for block in content if isinstance(content, list) else []:
                    if block.get("type") == "tool_result" and block["tool_use_id"] not in seen:
                        seen.add(block["tool_use_id"])
                        inner = block.get("content")
                        yield inner if isinstance(inner, str) else json.dumps(inner)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
