"""The tools file ``callgate compile --tools`` reads: three shapes, every problem placed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from callgate._errors import PolicyError
from callgate.compile import signature_of_tools
from callgate.compile._tools import MAX_TOOLS_DEPTH, read_tools

SAMPLE = {"name": "sample_frames", "description": "Decode a clip.\nMore text.",
          "inputSchema": {"type": "object", "properties": {
              "fps": {"type": "integer", "enum": [6, 12]}, "video": {"type": "string"}}}}


def _file(tmp_path: Path, content: object, name: str = "tools.json") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content, indent=1))
    return path


@pytest.mark.parametrize("document", [
    {"tools": [SAMPLE], "nextCursor": "c2"},
    [SAMPLE],
    [{"type": "function", "function": {"name": "sample_frames", "description": "Decode.",
                                       "parameters": SAMPLE["inputSchema"]}}],
    [{"name": "sample_frames", "input_schema": SAMPLE["inputSchema"]}],
])
def test_mcp_a_list_openai_and_anthropic_shapes_give_one_signature(
        tmp_path: Path, document: object) -> None:
    sig = signature_of_tools(_file(tmp_path, document))
    assert sig.actions == {"sample_frames"}
    assert sig.args["sample_frames"] == {"fps", "video"}
    assert sig.values["fps"] == {"6", "12"} and "fps" in sig.closed_values
    assert "video" not in sig.closed_values


def test_yaml_is_read_too_and_a_date_stays_text(tmp_path: Path) -> None:
    path = _file(tmp_path, "tools:\n  - name: book\n    inputSchema:\n      properties:\n"
                           "        day: {enum: [2020-01-01]}\n", "tools.yaml")
    assert signature_of_tools(path).values["day"] == {'"2020-01-01"'}


def test_an_argument_is_closed_only_when_every_tool_lists_its_values(tmp_path: Path) -> None:
    path = _file(tmp_path, [
        {"name": "a", "inputSchema": {"properties": {"mode": {"enum": ["x"]}}}},
        {"name": "b", "inputSchema": {"properties": {"mode": {"type": "string"}}}}])
    assert "mode" not in signature_of_tools(path).closed_values


@pytest.mark.parametrize("content, where, message", [
    ('{"tools": [{"name": "a", "bogus": 1}]}', ":1:", "unknown key 'bogus'"),
    ('{"tools": [{"name": "a",\n "inputSchema": {"properties": ["env"]}}]}', ":2:",
     "properties"),
    ('{"tools": [{"name": 5}]}', ":1:", "name"),
    ('{"tools": [{"name": "a"},\n {"name": "a"}]}', ":2:", "declared twice"),
    ('{"tools": [{"name": ""}]}', ":1:", "name"),
    ("tools:\n  - name: a\n    name: b\n", ":3:", "duplicate key"),
    ('{"tools": "all"}', ":1:", "tools"),
])
def test_a_malformed_tools_file_is_an_error_at_its_place(
        tmp_path: Path, content: str, where: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        read_tools(_file(tmp_path, content))
    text = str(caught.value)
    assert where in text and message in text, text


def test_deep_nesting_and_bytes_that_are_not_utf8_are_refused_with_their_place(
        tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    with pytest.raises(PolicyError, match=f"deeper than {MAX_TOOLS_DEPTH}"):
        read_tools(deep)
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"tools": [\n{"name": "a\xff"}]}')
    with pytest.raises(PolicyError, match=r"bad.json:2:12: not valid UTF-8"):
        read_tools(bad)
