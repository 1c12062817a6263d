"""Helpers shared by the command-line modules: policy loading, decision JSON, JSON lines."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import click

from callgate._behaviour import compile_for
from callgate._errors import CallgateError, PolicyError, TemporalError
from callgate._loader import LoadedPolicy, load_policy
from callgate._model import Decision
from callgate.presets import load_preset


def fail(message: str, code: int = 2) -> None:
    click.echo(message, err=True)
    sys.exit(code)


def load_cli_policy(policy: str | None, preset: str | None) -> LoadedPolicy:
    """Load ``--policy FILE`` or ``--preset NAME``; a load error exits 2 naming its places."""
    if (policy is None) == (preset is None):
        fail("give exactly one of --policy FILE or --preset NAME")
    try:
        if preset is not None:
            return load_preset(preset)
        assert policy is not None
        loaded = load_policy(policy)
        compile_for(loaded.policy, loaded)  # behaviour statements report file:line:col too
        return loaded
    except (PolicyError, TemporalError) as exc:
        fail(f"policy error:\n{exc}")
    except CallgateError as exc:
        fail(f"error: {exc}")
    raise AssertionError("unreachable")


def decision_json(decision: Decision) -> dict[str, Any]:
    """A decision as one JSON object: verdict, reasons with ids, witness when there is one."""
    out: dict[str, Any] = {
        "verdict": decision.verdict,
        "reasons": [r.model_dump() for r in decision.reasons],
    }
    if decision.witness is not None:
        out["witness"] = decision.witness.model_dump()
    return out


def read_json_lines(stream: TextIO) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """Each non-blank line as (line number, object) or (line number, error message)."""
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            yield number, f"line {number}: not JSON ({exc.msg} at column {exc.colno})"
            continue
        if not isinstance(value, dict):
            yield number, f"line {number}: a call must be a JSON object"
            continue
        yield number, value
