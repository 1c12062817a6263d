"""Recording never fails because of what a value contains, and what is stored is well defined."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate import Decision, ToolCall, ToolResult
from callgate.audit import AuditStore, verify_file
from callgate.audit._chain import canonical_json, sha256_hex
from callgate.audit._encode import MAX_DEPTH, MAX_STRING_CHARS, sanitize

# Any text, lone surrogates included (what surrogateescape makes of bytes that are not UTF-8).
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
JSONISH = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), ANY_TEXT,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(ANY_TEXT, st.just("$callgate")), inner, max_size=4),
    ),
    max_leaves=20,
)


def nested(depth: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


def depth_of(value: Any) -> int:
    deepest, work = 0, [(value, 0)]
    while work:
        node, depth = work.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) \
            else ()
        work.extend((child, depth + 1) for child in children)
    return deepest


def record_and_read(path: Path, output: Any, parameters: Any = None) -> tuple[Any, Any]:
    with AuditStore.open(path) as store:
        store.start_run("r", principal="p", policy_name="x", manifest_hash="m", config={})
        call = ToolCall(tool="t", tool_class="file", action="read", id="c1", run_id="r",
                        parameters={"p": parameters})
        store.record_decision("r", call, Decision(verdict="allow", call_id="c1"))
        store.record_result("r", ToolResult(call_id="c1", status="ok", output=output))
        store.end_run("r")
        records = store.records("r")
    return records[1].payload["call"]["parameters"]["p"], records[2].payload["result"]["output"]


@settings(max_examples=150, deadline=None)
@given(value=JSONISH)
def test_sanitised_values_are_canonical_json_of_valid_unicode(value: Any) -> None:
    text = canonical_json(sanitize(value))
    assert json.loads(text) == sanitize(value)
    text.encode("utf-8")  # no lone surrogate survives


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=JSONISH)
def test_any_value_is_recorded_and_the_log_verifies(tmp_path: Path, value: Any) -> None:
    path = tmp_path / f"{os.urandom(4).hex()}.db"
    parameters, output = record_and_read(path, value, value)
    assert parameters == output == sanitize(value)
    assert verify_file(path).ok


def test_bytes_that_were_not_utf8_are_stored_recoverably(tmp_path: Path) -> None:
    raw = b"report-\xff\xfe.txt"
    _, output = record_and_read(tmp_path / "a.db", os.fsdecode(raw))
    assert output["$callgate"] == "string" and output["reason"] == "invalid-unicode"
    assert output["encoding"] == "surrogateescape"
    assert base64.b64decode(output["bytes_b64"]) == raw
    assert output["text"] == "report-\ufffd\ufffd.txt"


def test_a_lone_surrogate_that_no_bytes_produce_is_stored_with_surrogatepass(
    tmp_path: Path,
) -> None:
    _, output = record_and_read(tmp_path / "a.db", {"k\ud800": "v\udfff"})
    assert output["$callgate"] == "object"
    (key, value), = output["items"]
    assert key["encoding"] == value["encoding"] == "surrogatepass"
    assert base64.b64decode(value["bytes_b64"]).decode("utf-8", "surrogatepass") == "v\udfff"
    assert verify_file(tmp_path / "a.db").ok


def test_a_hundred_thousand_levels_of_nesting_are_cut_at_the_limit(tmp_path: Path) -> None:
    parameters, output = record_and_read(tmp_path / "a.db", nested(100_000), nested(100_000))
    for value in (parameters, output):
        assert depth_of(value) <= MAX_DEPTH + 1
        assert "nested deeper" in json.dumps(value)
    assert verify_file(tmp_path / "a.db").ok


def test_values_without_a_json_form_become_markers_naming_their_type(tmp_path: Path) -> None:
    class Opaque:
        pass

    _, output = record_and_read(
        tmp_path / "a.db", {"o": Opaque(), "nan": float("nan"), "big": 10**5000, "set": {3}}
    )
    assert output["o"]["$callgate"] == "omitted" and output["o"]["type"].endswith("Opaque")
    assert output["nan"] == {"$callgate": "number", "value": "NaN"}
    assert output["big"]["reason"] == "integer too long"
    assert output["set"] == [3]
    assert verify_file(tmp_path / "a.db").ok


def test_data_shaped_like_a_marker_cannot_pass_for_one(tmp_path: Path) -> None:
    forged = {"$callgate": "omitted", "reason": "nothing to see"}
    _, output = record_and_read(tmp_path / "a.db", forged)
    assert output["$callgate"] == "object"
    assert sorted(map(tuple, output["items"])) == sorted(forged.items())


def test_a_huge_string_is_stored_as_its_hash_and_head(tmp_path: Path) -> None:
    huge = "A" * (MAX_STRING_CHARS + 1)
    _, output = record_and_read(tmp_path / "a.db", {"body": huge})
    assert output["body"]["reason"] == "too-long" and output["body"]["chars"] == len(huge)
    assert output["body"]["sha256"] == hashlib.sha256(huge.encode()).hexdigest()
    assert output["body"]["head"] == huge[:1024]
    assert verify_file(tmp_path / "a.db").ok


def test_a_record_too_large_keeps_the_hash_of_the_field_it_drops(tmp_path: Path) -> None:
    many = ["x" * 1000] * 6000  # 6 MB of small strings
    with AuditStore.open(tmp_path / "a.db") as store:
        store.start_run("r", principal="p", policy_name="x", manifest_hash="m", config={})
        store.record_result("r", ToolResult(call_id="c1", status="ok", output=many))
        payload = store.records("r")[1].payload
    result = ToolResult(call_id="c1", status="ok", output=many).model_dump(mode="json")
    text = canonical_json(result)
    assert payload["result"] == {"$callgate": "omitted", "reason": "record too large",
                                 "chars": len(text), "sha256": sha256_hex(text)}
    assert verify_file(tmp_path / "a.db").ok


@pytest.mark.parametrize("number", [float("inf"), float("-inf"), float("nan")])
def test_a_non_finite_parameter_is_recorded_as_a_marked_number_not_null(
        tmp_path: Path, number: float) -> None:
    parameters, output = record_and_read(tmp_path / "a.db", number, number)
    assert parameters == output == sanitize(number)
    assert parameters["$callgate"] == "number"
    assert verify_file(tmp_path / "a.db").ok
