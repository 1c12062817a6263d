"""The executors package facade."""

from __future__ import annotations

from pathlib import Path

import callgate.executors as executors
from callgate.executors import (
    DatabaseExecutor,
    Executor,
    FileExecutor,
    HttpExecutor,
    RetrievalExecutor,
)
from callgate.testing import tool_call as make_call


def test_all_lists_exactly_the_public_names_sorted() -> None:
    public = {n for n in vars(executors) if not n.startswith("_")} - {"annotations"}
    assert sorted(executors.__all__) == executors.__all__
    assert set(executors.__all__) <= public
    assert {"Executor", "FileExecutor", "HttpExecutor", "DatabaseExecutor",
            "RetrievalExecutor", "classify_sql", "check_address",
            "parse_ipv4_spelling"} <= set(executors.__all__)


def test_every_executor_satisfies_the_protocol_and_names_its_tool_class(tmp_path: Path) -> None:
    built: list[Executor] = [
        FileExecutor(working_dir=str(tmp_path), allowed_read=None, allowed_write=[]),
        HttpExecutor(),
        DatabaseExecutor(databases={}),
        RetrievalExecutor(root=str(tmp_path)),
    ]
    assert [e.tool_class for e in built] == ["file", "http", "database", "retrieval"]
    for executor in built:
        assert isinstance(executor, Executor)


def test_a_call_for_another_tool_class_is_denied_by_every_executor(tmp_path: Path) -> None:
    built: list[Executor] = [
        FileExecutor(working_dir=str(tmp_path), allowed_read=None, allowed_write=None),
        DatabaseExecutor(databases={}),
        RetrievalExecutor(root=str(tmp_path)),
    ]
    for executor in built:
        call = make_call("shell", "read", path="x", query="x")
        result = executor.execute(call)
        assert result.status == "denied"
        assert str(result.error).startswith("executor.tool-class")
        assert result.call_id == call.id


def test_an_executor_can_be_called_directly_like_a_plain_function(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("via call")
    executor = FileExecutor(working_dir=str(tmp_path), allowed_read=None, allowed_write=[])
    result = executor(make_call("file", "read", path="a.txt"))
    assert result.output["content"] == "via call"
