"""The public surface of callgate.audit: what it exports and the signatures the kernel wires to."""

from __future__ import annotations

import dataclasses
import inspect

import callgate.audit as audit
from callgate.audit import AuditRecord, AuditStore, VerifyReport


def test_all_is_sorted_and_every_name_is_exported() -> None:
    assert audit.__all__ == sorted(audit.__all__, key=lambda n: (not n.isupper(), n))
    for name in audit.__all__:
        assert getattr(audit, name) is not None


def test_the_store_methods_keep_the_agreed_signatures() -> None:
    # "*name" is keyword-only; "=value" is the default.
    expected = {
        "open": ["path", "*durability='normal'", "*read_only=False", "*checkpoints=True",
                 "*checkpoint_every=1000", "*key_path=None", "*anchor_path=None",
                 "*index_every=512"],
        "start_run": ["self", "run_id", "*principal", "*policy_name", "*manifest_hash", "*config"],
        "record_decision": ["self", "run_id", "call", "decision", "*replay=None"],
        "record_result": ["self", "run_id", "result", "*replay=None"],
        "record_system": ["self", "run_id", "kind", "payload"],
        "end_run": ["self", "run_id"],
        "run_ids": ["self"],
        "records": ["self", "run_id"],
        "verify": ["self", "*public_key=None", "*anchor=None"],
        "checkpoint": ["self", "private_key=None"],
        "close": ["self"],
    }
    for name, shape in expected.items():
        params = inspect.signature(getattr(AuditStore, name)).parameters.values()
        assert [_shape(p) for p in params] == shape, name


def _shape(param: inspect.Parameter) -> str:
    star = "*" if param.kind is inspect.Parameter.KEYWORD_ONLY else ""
    default = "" if param.default is inspect.Parameter.empty else f"={param.default!r}"
    return f"{star}{param.name}{default}"


def test_records_and_reports_are_frozen_values_with_the_agreed_fields() -> None:
    assert [f.name for f in dataclasses.fields(AuditRecord)][:6] == [
        "seq", "kind", "run_id", "timestamp", "payload", "hash"
    ]  # fmt: skip
    assert [f.name for f in dataclasses.fields(VerifyReport)] == [
        "ok", "checked", "problem", "table", "row", "anchor", "signatures"
    ]  # fmt: skip
    assert AuditRecord.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert VerifyReport.__dataclass_params__.frozen  # type: ignore[attr-defined]
