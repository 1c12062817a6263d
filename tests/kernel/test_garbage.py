"""A decision leaves nothing for the garbage collector: no reference cycle per call.

Objects in a cycle are freed only by a collection, and enough of them start one: a cycle made on
every call (a nested function that calls itself, with its closure, was one) put the collector on
the decision path. These tests run the kinds of calls the kernel decides and keep whatever the
collector would have freed.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from callgate.kernel._kernel import Kernel
from callgate.policy._loader import LoadedPolicy
from callgate.testing import call


def _calls(i: int) -> list[dict[str, Any]]:
    """Allowed, denied and invalid calls of every class the example policy speaks of."""
    return [
        call("http", "get", "fetch", url=f"https://api.github.com/repos/a/b?page={i}"),
        call("file", "read", "read_file", path="data/notes.txt"),
        call("file", "read", "read_file", path=f"data/missing-{i}.txt"),
        call("file", "write", "write_file", path=f"out/o-{i}.txt", content="x"),
        call("http", "get", "fetch", url=f"https://evil.example/?q={i}"),
        call("shell", "execute", "sh", command=f"ls -la /tmp/{i}"),
        call("database", "query", "db", sql="select 1"),
        {"tool": 5, "parameters": []},
    ]


@pytest.fixture
def kept() -> Iterator[list[Any]]:
    """What the collector finds unreachable while the test runs (kept, not freed)."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.mark.parametrize("audited", [False, True])
def test_deciding_calls_of_every_kind_leaves_no_reference_cycle(
        example_policy: LoadedPolicy, workdir: Path, audited: bool, kept: list[Any]) -> None:
    kernel = Kernel(example_policy, working_dir=workdir,
                    audit=workdir / "audit.db" if audited else None)
    try:
        for i in range(40):
            for raw in _calls(i):
                kernel.check(raw)
        gc.collect()
        assert [type(o).__name__ for o in kept] == []
    finally:
        kernel.close()
