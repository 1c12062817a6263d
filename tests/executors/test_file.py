"""The file executor on a real temporary tree with symlinks, hard links and a FIFO."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate import ExecutorError, TaintLabel, ToolResult
from callgate.executors import FileExecutor
from callgate.executors._file import PathScope, descriptor_path
from callgate.kernel._kernel import Kernel
from callgate.policy._schema import Policy
from callgate.testing import tool_call as make_call

SECRET = "TOPSECRET"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """work/{data,out} inside, secret/ outside, and symlinks that point out of the tree."""
    work = tmp_path / "work"
    (work / "data" / "sub").mkdir(parents=True)
    (work / "out").mkdir()
    (work / "data" / "notes.txt").write_text("hello notes")
    (work / "data" / "sub" / "deep.txt").write_text("deep")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key.txt").write_text(SECRET)
    (work / "data" / "escape").symlink_to(tmp_path / "secret")
    (work / "data" / "link.txt").symlink_to(work / "data" / "notes.txt")
    (work / "out" / "escape").symlink_to(tmp_path / "secret")
    return tmp_path


def executor(tree: Path, **kwargs: object) -> FileExecutor:
    options: dict[str, object] = {"allowed_read": ["data/**"], "allowed_write": ["out/**"]}
    options.update(kwargs)
    return FileExecutor(working_dir=str(tree / "work"), **options)  # type: ignore[arg-type]


def run(ex: FileExecutor, action: str, **params: object) -> ToolResult:
    return ex.execute(make_call("file", action, **params))


def reason(result: ToolResult) -> str:
    return str(result.error).split(":", 1)[0]


def test_a_file_inside_the_read_tree_is_read_and_tainted(tree: Path) -> None:
    result = run(executor(tree), "read", path="data/notes.txt")
    assert result.status == "ok", result.error
    assert result.output["content"] == "hello notes"
    real = str((tree / "work" / "data" / "notes.txt").resolve())
    assert result.taint == (TaintLabel(source="tool-output", origin=f"file:{real}"),)


@pytest.mark.parametrize(
    "path", ["../secret/key.txt", "data/../../secret/key.txt", "out/x", "/etc/passwd"]
)
def test_reads_outside_the_read_tree_are_denied(tree: Path, path: str) -> None:
    result = run(executor(tree), "read", path=path)
    assert (result.status, reason(result)) == ("denied", "path.outside-allowed")


def test_a_directory_symlink_out_of_the_tree_is_denied(tree: Path) -> None:
    result = run(executor(tree), "read", path="data/escape/key.txt")
    assert result.status == "denied"
    assert SECRET not in str(result.output)


def test_a_symlink_as_last_component_is_not_followed_even_inside(tree: Path) -> None:
    result = run(executor(tree), "read", path="data/link.txt")
    assert (result.status, reason(result)) == ("denied", "path.symlink")


def test_a_directory_flipped_to_a_symlink_is_refused_never_followed(tree: Path) -> None:
    """data/swap is a real directory or a symlink to secret/ in turn: only the first is read."""
    work = tree / "work"
    ex = executor(tree, allowed_read=["**", str(tree / "secret") + "/**"])
    swap, held, link = (work / "data" / n for n in ("swap", "swap.dir", "swap.link"))
    swap.mkdir()
    (swap / "key.txt").write_text("inside")
    link.symlink_to(tree / "secret")
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            swap.rename(held)
            link.rename(swap)
            swap.rename(link)
            held.rename(swap)

    flipper = threading.Thread(target=flip)
    flipper.start()
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            result = run(ex, "read", path=str(swap / "key.txt"))
            seen.add(result.status if result.status == "ok" else reason(result))
            assert SECRET not in str(result.output), "read escaped through a swapped symlink"
    finally:
        stop.set()
        flipper.join()
    assert "ok" in seen and "path.symlink" in seen, seen


def test_a_symlink_in_the_middle_is_refused_even_inside_the_tree(tree: Path) -> None:
    """Called directly the path must be canonical; the kernel resolves it before deciding."""
    (tree / "work" / "data" / "to-sub").symlink_to(tree / "work" / "data" / "sub")
    result = run(executor(tree), "read", path="data/to-sub/deep.txt")
    assert (result.status, reason(result)) == ("denied", "path.symlink")


@pytest.mark.parametrize("action", ["read", "list", "write", "delete"])
def test_dotdot_that_stays_inside_is_refused_not_collapsed(tree: Path, action: str) -> None:
    ex = executor(tree, allowed_write=["**"])
    path = "data/sub/../notes.txt" if action != "list" else "data/sub/.."
    result = run(ex, action, path=path, content="x")
    assert (result.status, reason(result)) == ("denied", "path.not-canonical")
    assert (tree / "work" / "data" / "notes.txt").read_text() == "hello notes"


def test_dot_and_repeated_slashes_are_harmless_spellings(tree: Path) -> None:
    result = run(executor(tree), "read", path="./data//./notes.txt")
    assert result.output["path"] == str((tree / "work" / "data" / "notes.txt").resolve())


def test_an_in_project_symlink_works_end_to_end_through_the_kernel(tree: Path) -> None:
    """venv/bin/python -> ../../tools/python3 style: the kernel judges and hands the target."""
    work = (tree / "work").resolve()
    (work / "tools").mkdir()
    (work / "tools" / "python3").write_text("the interpreter")
    (work / "venv" / "bin").mkdir(parents=True)
    (work / "venv" / "bin" / "python").symlink_to("../../tools/python3")
    (work / "venv" / "lib").symlink_to(work / "tools")
    policy = Policy.model_validate({
        "name": "t", "version": 1,
        "principal": {"name": "a", "capabilities": [
            {"tool_class": "file", "constraints": {"allowed_paths": [f"{work}/**"]}}]},
        "rules": [{"id": "all", "decision": "allow"}],
        "run_state": {"behavioral_rules": False}})
    files = FileExecutor(working_dir=str(work), allowed_read=["**"], allowed_write=["**"])
    with Kernel(policy, working_dir=work, guards=[]) as kernel:
        for path in ("venv/bin/python", "venv/lib/python3"):
            read = kernel.execute(file_call("read", path=path), executor=files)
            assert read.output["content"] == "the interpreter"
            assert read.output["path"] == f"{work}/tools/python3"
        wrote = kernel.execute(file_call("write", path="venv/lib/new.txt", content="n"),
                               executor=files)
        assert wrote.output["path"] == f"{work}/tools/new.txt"
        listed = kernel.execute(file_call("list", path="venv/lib"), executor=files)
        assert {e["name"] for e in listed.output["entries"]} == {"python3", "new.txt"}


def file_call(action: str, **params: object) -> dict[str, object]:
    return {"tool": action, "tool_class": "file", "action": action, "parameters": params}


def test_descriptor_path_names_the_real_file_behind_symlinked_directories(tree: Path) -> None:
    fd = os.open(tree / "work" / "data" / "escape" / "key.txt", os.O_RDONLY)
    try:
        assert descriptor_path(fd) == str((tree / "secret" / "key.txt").resolve())
    finally:
        os.close(fd)


def test_a_hard_link_to_an_outside_file_is_refused(tree: Path) -> None:
    os.link(tree / "secret" / "key.txt", tree / "work" / "data" / "hard.txt")
    result = run(executor(tree), "read", path="data/hard.txt")
    assert (result.status, reason(result)) == ("denied", "file.hard-link")


def test_a_fifo_is_refused_without_blocking(tree: Path) -> None:
    os.mkfifo(tree / "work" / "data" / "pipe.txt")
    result = run(executor(tree), "read", path="data/pipe.txt")
    assert (result.status, reason(result)) == ("denied", "file.not-regular")


def test_a_file_larger_than_the_cap_is_refused(tree: Path) -> None:
    (tree / "work" / "data" / "big.txt").write_text("z" * 101)
    result = run(executor(tree, max_bytes=100), "read", path="data/big.txt")
    assert (result.status, reason(result)) == ("denied", "file.too-large")


def test_bytes_round_trip_as_base64_and_bad_text_is_an_error(tree: Path) -> None:
    ex = executor(tree, allowed_read=["out/**"])
    assert run(ex, "write", path="out/b.bin", content="/wA=", encoding="base64").status == "ok"
    assert run(ex, "read", path="out/b.bin", encoding="base64").output["content"] == "/wA="
    result = run(ex, "read", path="out/b.bin")
    assert (result.status, reason(result)) == ("error", "file.decode")


def test_a_write_inside_the_write_tree_creates_the_file(tree: Path) -> None:
    ex = executor(tree)
    result = run(ex, "write", path="out/report.txt", content="v1")
    assert result.status == "ok", result.error
    assert run(ex, "write", path="out/report.txt", content="+v2", append=True).status == "ok"
    assert (tree / "work" / "out" / "report.txt").read_text() == "v1+v2"


@pytest.mark.parametrize(
    "path", ["data/notes.txt", "../secret/new.txt", "out/escape/key.txt", "out/escape/new.txt"]
)
def test_writes_outside_the_write_tree_are_denied_and_change_nothing(
    tree: Path, path: str
) -> None:
    result = run(executor(tree), "write", path=path, content="pwned")
    assert result.status == "denied"
    assert (tree / "secret" / "key.txt").read_text() == SECRET
    assert not (tree / "secret" / "new.txt").exists()
    assert (tree / "work" / "data" / "notes.txt").read_text() == "hello notes"


def test_a_write_through_a_final_symlink_is_denied(tree: Path) -> None:
    (tree / "work" / "out" / "key.txt").symlink_to(tree / "secret" / "key.txt")
    result = run(executor(tree), "write", path="out/key.txt", content="pwned")
    assert (result.status, reason(result)) == ("denied", "path.symlink")
    assert (tree / "secret" / "key.txt").read_text() == SECRET


def test_a_hard_linked_target_is_not_truncated_before_it_is_refused(tree: Path) -> None:
    os.link(tree / "secret" / "key.txt", tree / "work" / "out" / "hard.txt")
    result = run(executor(tree), "write", path="out/hard.txt", content="")
    assert (result.status, reason(result)) == ("denied", "file.hard-link")
    assert (tree / "secret" / "key.txt").read_text() == SECRET


def test_content_over_the_cap_is_refused(tree: Path) -> None:
    result = run(executor(tree, max_bytes=10), "write", path="out/x.txt", content="y" * 11)
    assert (result.status, reason(result)) == ("denied", "file.too-large")
    assert not (tree / "work" / "out" / "x.txt").exists()


def test_list_names_entries_with_their_types(tree: Path) -> None:
    result = run(executor(tree), "list", path="data")
    assert result.status == "ok", result.error
    kinds = {e["name"]: e["type"] for e in result.output["entries"]}
    assert kinds == {"notes.txt": "file", "sub": "dir", "escape": "symlink", "link.txt": "symlink"}


def test_list_is_capped(tree: Path) -> None:
    result = run(executor(tree, max_entries=2), "list", path="data")
    assert len(result.output["entries"]) == 2
    assert result.output["truncated"] is True


@pytest.mark.parametrize(("path", "why"), [("data/escape", "path.outside-allowed"),
                                           ("..", "path.outside-allowed")])
def test_list_outside_the_read_tree_is_denied(tree: Path, path: str, why: str) -> None:
    result = run(executor(tree), "list", path=path)
    assert (result.status, reason(result)) == ("denied", why)


def test_delete_removes_a_symlink_itself_never_its_target(tree: Path) -> None:
    result = run(executor(tree), "delete", path="out/escape")
    assert result.status == "ok", result.error
    assert not (tree / "work" / "out" / "escape").is_symlink()
    assert (tree / "secret" / "key.txt").read_text() == SECRET


def test_delete_outside_the_write_tree_or_of_a_directory_is_refused(tree: Path) -> None:
    ex = executor(tree)
    assert reason(run(ex, "delete", path="data/notes.txt")) == "path.outside-allowed"
    assert reason(run(ex, "delete", path="out/escape/key.txt")) == "path.outside-allowed"
    (tree / "work" / "out" / "dir").mkdir()
    assert reason(run(ex, "delete", path="out/dir")) == "file.is-directory"
    assert (tree / "secret" / "key.txt").exists()


def test_an_empty_allow_list_allows_nothing_and_none_means_the_working_dir(tree: Path) -> None:
    closed = executor(tree, allowed_read=[], allowed_write=[])
    assert reason(run(closed, "read", path="data/notes.txt")) == "path.outside-allowed"
    opened = executor(tree, allowed_read=None, allowed_write=None)
    assert run(opened, "read", path="data/notes.txt").status == "ok"
    assert reason(run(opened, "read", path="../secret/key.txt")) == "path.outside-allowed"


def test_paths_with_nul_bytes_and_bad_parameters_are_refused(tree: Path) -> None:
    ex = executor(tree)
    assert reason(run(ex, "read", path="data/notes.txt\x00.png")) == "path.invalid"
    assert reason(run(ex, "read", path=3)) == "params.invalid"
    assert reason(run(ex, "chmod", path="data/notes.txt")) == "params.action"
    assert reason(run(ex, "read", path="data/missing.txt")) == "file.not-found"


def test_glob_patterns_other_than_trees_are_rejected_when_building() -> None:
    with pytest.raises(ExecutorError, match="unsupported path pattern"):
        PathScope(["data/*.txt"], "/")


def test_an_exact_path_scope_covers_only_that_path(tmp_path: Path) -> None:
    scope = PathScope(["a.txt", "d/**"], str(tmp_path))
    base = str(tmp_path.resolve())
    assert scope.contains(f"{base}/a.txt")
    assert not scope.contains(f"{base}/a.txt2")
    assert scope.contains(f"{base}/d") and scope.contains(f"{base}/d/e/f")
    assert not scope.contains(f"{base}/dd")


COMPONENTS = ["..", ".", "data", "escape", "link.txt", "notes.txt", "sub", "deep.txt",
              "secret", "key.txt", "out", "", "work"]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=6),
       absolute=st.booleans(), action=st.sampled_from(["read", "list"]))
def test_no_generated_path_reads_outside_the_read_tree(
    tree: Path, parts: list[str], absolute: bool, action: str
) -> None:
    path = ("/" if absolute else "") + "/".join(parts)
    result = run(executor(tree), action, path=path)
    assert SECRET not in str(result.output)
    if result.status == "ok":
        data = str((tree / "work" / "data").resolve())
        assert result.output["path"] == data or result.output["path"].startswith(data + "/")


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from([*COMPONENTS, "new.txt"]), min_size=1, max_size=6),
       action=st.sampled_from(["write", "delete"]))
def test_no_generated_path_writes_or_deletes_outside_the_write_tree(
    tree: Path, parts: list[str], action: str
) -> None:
    run(executor(tree), action, path="/".join(parts), content="pwned")
    assert (tree / "secret" / "key.txt").read_text() == SECRET
    assert sorted(p.name for p in (tree / "secret").iterdir()) == ["key.txt"]
    assert (tree / "work" / "data" / "notes.txt").read_text() == "hello notes"
    assert (tree / "work" / "data" / "link.txt").is_symlink()


def test_dotdot_after_a_symlink_is_resolved_like_the_operating_system_does(tree: Path) -> None:
    """data/escape/.. is the parent of secret/, not data/: no lexical shortcut to data/."""
    (tree / "notes.txt").write_text("outside notes")
    result = run(executor(tree), "read", path="data/escape/../notes.txt")
    assert (result.status, reason(result)) == ("denied", "path.outside-allowed")
    assert "outside notes" not in str(result.output)
