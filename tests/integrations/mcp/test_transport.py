"""The stdio legs' bounded line reader: an oversized message is dropped but its id is kept."""

from __future__ import annotations

import json

import anyio
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from callgate.integrations.mcp._transport import Oversized, read_lines

_ids = st.one_of(st.integers(min_value=-(10**17), max_value=10**17),
                 st.text(max_size=40))


async def _lines(data: bytes, limit: int, chunk: int) -> list[bytes | Oversized]:
    send, receive = anyio.create_memory_object_stream[bytes](len(data) // chunk + 2)
    async with send:
        for at in range(0, len(data), chunk):
            await send.send(data[at:at + chunk])

    class Stream:
        async def receive(self, max_bytes: int = 65536) -> bytes:
            return await receive.receive()

    async with receive:
        return [line async for line in read_lines(Stream(), limit)]  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(ident=_ids, size=st.integers(min_value=200, max_value=5000),
       chunk=st.integers(min_value=1, max_value=700))
def test_an_oversized_message_keeps_the_id_it_opens_with(ident: int | str, size: int,
                                                         chunk: int) -> None:
    # an id is read when its JSON text is short (a long one is left unread: no early answer)
    assume(len(json.dumps(ident)) <= 200)
    message = json.dumps({"jsonrpc": "2.0", "id": ident, "result": {"text": "x" * size}})
    lines = anyio.run(_lines, message.encode() + b"\n" + b'{"ok":1}\n', 150, chunk)
    assert isinstance(lines[0], Oversized) and lines[0].size == len(message.encode())
    assert lines[0].ident == ident
    assert lines[1] == b'{"ok":1}'


def test_an_id_that_is_not_the_first_member_is_not_guessed() -> None:
    assert Oversized(9, b'{"jsonrpc":"2.0","result":{"id":3').ident is None
    assert Oversized(9, b'{"jsonrpc":"2.0","id":5.5,').ident is None
    assert Oversized(9, b'{"jsonrpc":"2.0","id":true,').ident is None


def test_the_head_of_a_line_dropped_over_many_small_chunks_still_holds_its_id() -> None:
    # The bound (150) is shorter than the head kept (512): the id, past byte 150, arrives in
    # the chunks after the line was found too long, and must still be read.
    ident = "\x1f" * 9 + "\x07" * 2 + "\U00010000" * 5
    message = json.dumps({"jsonrpc": "2.0", "id": ident, "result": {"text": "x" * 300}})
    lines = anyio.run(_lines, message.encode() + b"\n" + b'{"ok":1}\n', 150, 1)
    assert isinstance(lines[0], Oversized) and lines[0].ident == ident
    assert lines[1] == b'{"ok":1}'
