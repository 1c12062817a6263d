"""The exact open: a canonical path opened with no symlink followed, by openat2 and by the walk."""

from __future__ import annotations

import errno
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate.executors._open import (
    DIR_FLAGS,
    _Openat2,
    _openat2,
    descriptor_path,
    open_exact,
    open_in,
    open_parent,
    segments,
    verify,
)
from callgate.executors._result import Refusal

READ = os.O_RDONLY
BOTH = pytest.mark.parametrize("use_openat2", [True, False], ids=["openat2", "walk"])


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """a/b/f.txt, a secret outside a/, and symlinks to both from inside a/."""
    base = tmp_path.resolve()
    (base / "a" / "b").mkdir(parents=True)
    (base / "a" / "b" / "f.txt").write_text("inside")
    (base / "secret").mkdir()
    (base / "secret" / "key").write_text("TOPSECRET")
    (base / "a" / "to-secret").symlink_to(base / "secret")
    (base / "a" / "to-b").symlink_to("b")
    (base / "a" / "b" / "key-link").symlink_to(base / "secret" / "key")
    return base


def read_all(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def raises_errno(code: int, action: Callable[[], object]) -> None:
    with pytest.raises(OSError) as info:
        action()
    assert info.value.errno == code


def refused(reason_id: str, action: Callable[[], object]) -> None:
    with pytest.raises(Refusal) as info:
        action()
    assert info.value.reason_id == reason_id


@BOTH
def test_a_canonical_path_opens_and_its_descriptor_names_that_path(
    tree: Path, use_openat2: bool
) -> None:
    path = f"{tree}/a/b/f.txt"
    fd = open_exact(path, READ, use_openat2=use_openat2)
    assert descriptor_path(fd) == path
    assert read_all(fd) == b"inside"


@BOTH
@pytest.mark.parametrize("rest", ["a/to-secret/key", "a/to-b/f.txt", "a/b/key-link", "a/to-b"])
def test_a_symlink_in_any_component_is_refused_with_eloop(
    tree: Path, use_openat2: bool, rest: str
) -> None:
    """In the middle or at the end, pointing out of the tree or inside it: never followed."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if rest == "a/to-b" else 0)
    raises_errno(errno.ELOOP, lambda: open_exact(f"{tree}/{rest}", flags,
                                                 use_openat2=use_openat2))


@BOTH
@pytest.mark.parametrize("magic", ["/proc/self/root", "/proc/thread-self/root", "/proc/PID/root",
                                   "/proc/PID/cwd"])
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="procfs magic links")
def test_magic_links_of_procfs_are_refused(tree: Path, use_openat2: bool, magic: str) -> None:
    """/proc/self is a symlink and /proc/PID/root a magic link: neither is crossed."""
    start = magic.replace("PID", str(os.getpid()))
    path = start if start.endswith("cwd") else f"{start}{tree}/a/b/f.txt"
    raises_errno(errno.ELOOP, lambda: open_exact(path, READ, use_openat2=use_openat2))


@BOTH
def test_a_descriptor_magic_link_is_refused(tree: Path, use_openat2: bool) -> None:
    fd = os.open(tree / "secret" / "key", os.O_RDONLY)
    try:
        path = f"/proc/{os.getpid()}/fd/{fd}"
        raises_errno(errno.ELOOP, lambda: open_exact(path, READ, use_openat2=use_openat2))
    finally:
        os.close(fd)


@pytest.mark.parametrize("path", ["relative/x", "/a/../etc/passwd", "/a/./b", "/a//b", "/a/",
                                  "/a/..", "/.", "", "/a\x00b"])
def test_paths_that_are_not_canonical_are_refused_before_any_open(path: str) -> None:
    refused("path.not-canonical", lambda: segments(path))
    refused("path.not-canonical", lambda: open_exact(path, READ))


def test_the_root_is_canonical_and_has_no_segments() -> None:
    assert segments("/") == []
    fd = open_exact("/", os.O_RDONLY | os.O_DIRECTORY, use_openat2=False)
    os.close(fd)


@BOTH
def test_a_missing_file_is_enoent_and_a_file_used_as_directory_enotdir(
    tree: Path, use_openat2: bool
) -> None:
    raises_errno(errno.ENOENT, lambda: open_exact(f"{tree}/a/none", READ,
                                                  use_openat2=use_openat2))
    raises_errno(errno.ENOTDIR, lambda: open_exact(f"{tree}/a/b/f.txt/x", READ,
                                                   use_openat2=use_openat2))


def test_a_descriptor_whose_file_was_renamed_after_open_is_refused_as_changed(
    tree: Path,
) -> None:
    path = f"{tree}/a/b/f.txt"
    fd = os.open(path, os.O_RDONLY)
    try:
        os.rename(path, f"{tree}/a/b/moved.txt")
        refused("path.changed", lambda: verify(fd, path))
    finally:
        os.close(fd)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"),
    reason="openat2 is reached by syscall number on these machines only")
def test_openat2_itself_opens_and_refuses_a_symlink_here(tree: Path) -> None:
    """The first branch really runs on this machine (not silently the walk every time)."""
    fd = _openat2.open(f"{tree}/a/b/f.txt", os.O_RDONLY | os.O_CLOEXEC, 0)
    if fd is None:
        pytest.skip("openat2 is unavailable on this kernel or filtered")
    assert read_all(fd) == b"inside"
    raises_errno(errno.ELOOP, lambda: _openat2.open(f"{tree}/a/to-secret/key", os.O_RDONLY, 0))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="raw system calls")
def test_a_kernel_without_the_call_falls_back_to_the_walk_for_good(tree: Path) -> None:
    """ENOSYS (old kernel, seccomp) means walk instead, and stop asking."""
    missing = _Openat2()
    if missing.number is None:
        pytest.skip("openat2 is not reached on this machine")
    missing.number = 1_000_000  # no system call has this number: the kernel answers ENOSYS
    assert missing.open(f"{tree}/a/b/f.txt", os.O_RDONLY, 0) is None
    assert missing.open(f"{tree}/a/b/f.txt", os.O_RDONLY, 0) is None
    assert missing._syscall is None


@BOTH
def test_a_file_is_created_relative_to_the_verified_parent(tree: Path, use_openat2: bool) -> None:
    dfd, name = open_parent(f"{tree}/a/b/new.txt", use_openat2=use_openat2)
    try:
        assert (descriptor_path(dfd), name) == (f"{tree}/a/b", "new.txt")
        fd = open_in(dfd, name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    finally:
        os.close(dfd)
    os.write(fd, b"made")
    os.close(fd)
    assert (tree / "a" / "b" / "new.txt").read_text() == "made"


@BOTH
def test_a_parent_reached_through_a_symlink_is_refused_and_nothing_is_created(
    tree: Path, use_openat2: bool
) -> None:
    raises_errno(errno.ELOOP, lambda: open_parent(f"{tree}/a/to-secret/new",
                                                  use_openat2=use_openat2))
    assert sorted(p.name for p in (tree / "secret").iterdir()) == ["key"]


def test_creating_over_a_symlink_name_is_refused_and_its_target_untouched(tree: Path) -> None:
    dfd, name = open_parent(f"{tree}/a/b/key-link")
    try:
        raises_errno(errno.ELOOP, lambda: open_in(dfd, name, os.O_WRONLY | os.O_CREAT))
    finally:
        os.close(dfd)
    assert (tree / "secret" / "key").read_text() == "TOPSECRET"


@pytest.mark.parametrize("name", ["", ".", "..", "x/y", "a\x00"])
def test_open_in_takes_one_name_only(tree: Path, name: str) -> None:
    dfd = os.open(tree, DIR_FLAGS)
    try:
        refused("path.invalid", lambda: open_in(dfd, name, READ))
    finally:
        os.close(dfd)


@BOTH
def test_a_delete_through_the_parent_descriptor_removes_that_name(
    tree: Path, use_openat2: bool
) -> None:
    dfd, name = open_parent(f"{tree}/a/b/key-link", use_openat2=use_openat2)
    try:
        os.unlink(name, dir_fd=dfd)
    finally:
        os.close(dfd)
    assert not (tree / "a" / "b" / "key-link").is_symlink()
    assert (tree / "secret" / "key").read_text() == "TOPSECRET"


@BOTH
def test_a_directory_opened_exactly_lists_its_entries(tree: Path, use_openat2: bool) -> None:
    fd = open_exact(f"{tree}/a", os.O_RDONLY | os.O_DIRECTORY, use_openat2=use_openat2)
    try:
        with os.scandir(fd) as listing:
            names = sorted(entry.name for entry in listing)
    finally:
        os.close(fd)
    assert names == ["b", "to-b", "to-secret"]


NAMES = ["a", "b", "f.txt", "to-secret", "to-b", "key-link", "secret", "key"]


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(NAMES), min_size=1, max_size=5), use_openat2=st.booleans())
def test_whatever_opens_is_the_path_itself_and_no_link_was_crossed(
    tree: Path, parts: list[str], use_openat2: bool
) -> None:
    """Both ways agree with the invariant: an open succeeds only where realpath is the identity."""
    path = "/".join([str(tree), *parts])
    try:
        fd = open_exact(path, os.O_RDONLY, use_openat2=use_openat2)
    except OSError as exc:
        assert exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENOTDIR)
        if exc.errno == errno.ELOOP:
            assert os.path.realpath(path) != path
        return
    try:
        assert descriptor_path(fd) == path == os.path.realpath(path)
    finally:
        os.close(fd)
