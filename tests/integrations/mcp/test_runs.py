"""One kernel run per downstream connection: a run ended to make room is never restarted clean."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.integrations.mcp.conftest import BASE_POLICY

from callgate.integrations.mcp import _gateway
from callgate.integrations.mcp._gateway import Gateway, RunEndedError
from callgate.integrations.mcp._pins import PinStore
from callgate.policy._loader import load_policy


def _ctx(session: str | None) -> Any:
    headers = {} if session is None else {"mcp-session-id": session}
    return SimpleNamespace(request=SimpleNamespace(headers=headers), session=object())


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Gateway:
    monkeypatch.setattr(_gateway, "MAX_RUNS", 2)
    (tmp_path / "p.yaml").write_text(BASE_POLICY)
    return Gateway(load_policy(tmp_path / "p.yaml"), {}, pins=PinStore(tmp_path / "pins.db"),
                   audit=None, aggregate=True)


def test_a_connection_whose_run_was_ended_for_room_is_refused_not_given_a_clean_run(
        gateway: Gateway) -> None:
    first = gateway.gate_for(_ctx("a"))
    first.kernel.note("fetched", {}, output="x", taint=("web",))
    gateway.gate_for(_ctx("b"))
    gateway.gate_for(_ctx("c"))  # a is the least recently used: its run ends
    with pytest.raises(RunEndedError, match="reconnect"):
        gateway.gate_for(_ctx("a"))
    assert gateway.gate_for(_ctx("c")) is gateway.gate_for(_ctx("c"))


def test_the_run_2026_clients_share_is_never_ended_for_room(gateway: Gateway) -> None:
    shared = gateway.gate_for(_ctx(None))
    for name in "bcdef":
        gateway.gate_for(_ctx(name))
    assert gateway.gate_for(_ctx(None)) is shared
