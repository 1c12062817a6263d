"""The credential scan's cache: a directory is listed again exactly when it may have changed.

A listing is reused while its directory's stamp (device, inode, mtime, ctime) is unchanged and
it was made long enough after the directory's last change. Tests that need listings trusted at
once give the cache a clock one hour ahead; they then wait until the filesystem's clock has
moved past the stamps they recorded (``past_a_tick``), so a change they make afterwards is
stamped differently whatever the timestamp granularity — no test depends on timing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate import SandboxError
from callgate.sandbox import Sandbox, available_backends
from callgate.sandbox import _credentials as credentials
from callgate.sandbox._credentials import SCAN_CACHE, ScanCache, scan

from .conftest import BUILDER, Project, assert_denied, policy

HOUR_NS = 3600 * 1_000_000_000


def trusting() -> ScanCache:
    """A cache whose clock runs an hour ahead: every listing made now is trusted."""
    return ScanCache(clock=lambda: time.time_ns() + HOUR_NS)


def past_a_tick(directory: Path, probe: Path) -> None:
    """Return once a change made now would be stamped later than ``directory``'s last one
    (``probe`` is a scratch file on the same filesystem)."""
    stamp = max(os.stat(directory).st_mtime_ns, os.stat(directory).st_ctime_ns)
    while True:
        probe.write_text("tick")
        if os.stat(probe).st_ctime_ns > stamp:
            return
        time.sleep(0.001)


class Listings:
    """Counts the directories a scan lists (``os.scandir`` calls in the scan module)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.listed: list[str] = []
        real = os.scandir

        def counting(path: Any = ".") -> Any:
            self.listed.append(str(path))
            return real(path)

        monkeypatch.setattr(credentials.os, "scandir", counting)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "app"
    (root / "a" / "deep").mkdir(parents=True)
    (root / "b").mkdir()
    (root / "a" / "deep" / "code.py").write_text("x = 1\n")
    (root / "b" / "notes.txt").write_text("notes\n")
    return root


def test_an_unchanged_tree_is_not_listed_again(tree: Path, monkeypatch: pytest.MonkeyPatch):
    cache = trusting()
    first = scan([str(tree)], cache=cache)
    listings = Listings(monkeypatch)
    assert scan([str(tree)], cache=cache) == first
    assert listings.listed == []


def test_a_credential_planted_deep_below_is_found_and_only_its_directory_listed_again(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    cache = trusting()
    assert scan([str(tree)], cache=cache) == ([], [])
    deep = tree / "a" / "deep"
    past_a_tick(deep, tmp_path / "probe")
    (deep / ".env").write_text("TOKEN=x\n")
    listings = Listings(monkeypatch)
    assert scan([str(tree)], cache=cache) == ([str(deep / ".env")], [])
    assert listings.listed == [str(deep)]


def test_restoring_a_directorys_mtime_after_planting_a_file_does_not_hide_it(
    tree: Path, tmp_path: Path
):
    cache = trusting()
    scan([str(tree)], cache=cache)
    target = tree / "b"
    before = os.stat(target)
    past_a_tick(target, tmp_path / "probe")
    (target / "id_rsa").write_text("key\n")
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # ctime moves regardless
    assert os.stat(target).st_mtime_ns == before.st_mtime_ns
    assert scan([str(tree)], cache=cache)[0] == [str(target / "id_rsa")]


def test_a_listing_made_right_after_its_directory_changed_is_not_trusted(
    tree: Path, monkeypatch: pytest.MonkeyPatch
):
    # The real clock: the tree was just made, so a change in the same timestamp tick could go
    # unseen; such listings are not kept and the next scan lists everything again.
    cache = ScanCache()
    scan([str(tree)], cache=cache)
    assert len(cache) == 0
    listings = Listings(monkeypatch)
    scan([str(tree)], cache=cache)
    assert len(listings.listed) == 4


def test_a_directory_whose_stamp_cannot_be_read_is_listed_again(
    tree: Path, monkeypatch: pytest.MonkeyPatch
):
    cache = trusting()
    scan([str(tree)], cache=cache)
    unreadable = str(tree / "b")
    real = credentials._stamp
    monkeypatch.setattr(credentials, "_stamp",
                        lambda path: None if path == unreadable else real(path))
    listings = Listings(monkeypatch)
    scan([str(tree)], cache=cache)
    assert listings.listed == [unreadable]
    assert cache.get(unreadable) is None  # a listing without a stamp is never kept


def test_a_listing_stamped_in_the_future_is_not_kept(tree: Path):
    cache = ScanCache(clock=lambda: 0)  # every real stamp lies in this clock's future
    scan([str(tree)], cache=cache)
    assert len(cache) == 0


def test_reused_listings_count_against_the_entry_limit(tree: Path):
    cache = trusting()
    scan([str(tree)], limit=100, cache=cache)
    with pytest.raises(SandboxError, match="more than 3 directory entries"):
        scan([str(tree)], limit=3, cache=cache)


def test_a_replaced_directory_is_listed_again_even_with_the_same_times(
    tree: Path, tmp_path: Path
):
    cache = trusting()
    scan([str(tree)], cache=cache)
    old = tree / "b"
    stamp = os.stat(old)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / ".netrc").write_text("machine x\n")
    os.rename(old, tmp_path / "old-b")
    os.rename(tmp_path / "other", old)
    os.utime(old, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert scan([str(tree)], cache=cache)[0] == [str(old / ".netrc")]


@pytest.fixture
def trusted_global_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    SCAN_CACHE.clear()
    monkeypatch.setattr(SCAN_CACHE, "clock", lambda: time.time_ns() + HOUR_NS)
    yield
    SCAN_CACHE.clear()


@pytest.mark.skipif("bwrap" not in available_backends(), reason="bubblewrap cannot start")
@pytest.mark.usefixtures("trusted_global_cache")
def test_a_key_created_between_two_runs_cannot_be_read_by_the_second(
    project: Project, tmp_path: Path
):
    box = Sandbox.for_policy(policy(**BUILDER), working_dir=str(project.root), backend="bwrap",
                             environ=project.environ)
    src = project.root / "src"
    first = box.run(["cat", str(src / "main.txt")])
    assert first.stdout == b"hello from the sources\n", first
    assert SCAN_CACHE.get(str(src)) is not None  # the second run could reuse the listing
    past_a_tick(src, tmp_path / "probe")
    (src / ".ssh").mkdir()
    (src / ".ssh" / "id_rsa").write_text("-----BEGIN FAKE PRIVATE KEY-----\n")
    second = box.run(["cat", str(src / ".ssh" / "id_rsa")])
    assert_denied(second, "sandbox.read")
    assert b"PRIVATE KEY" not in second.stdout


_NAMES = st.one_of(
    st.sampled_from([".ssh", ".env.local", "id_ed25519.pub", "my-credentials.json", "shadow",
                     "sudoers", "secrets.yaml", "secretary.py", "gcloud", "state.key", "a.db.key",
                     "notes.txt", "etc", ".config", ".callgate", "key", "ĸey", "SECRET"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz._-/\nİK", min_size=1, max_size=12))


@settings(max_examples=400, deadline=None)
@given(parent=_NAMES, names=st.lists(_NAMES, max_size=8))
def test_an_entry_the_listings_screen_passes_over_is_never_sensitive(
    parent: str, names: list[str]
) -> None:
    # The scan screens a directory's entries in one pass before asking of each: the screen
    # may only pass over an entry that is not sensitive.
    asked = credentials.SENSITIVE_PATH.possible_each([f"/{parent}/{name}" for name in names])
    for name, ask in zip(names, asked, strict=True):
        if credentials._sensitive(parent, name):
            assert ask


def test_a_credential_among_many_plain_names_is_found(tmp_path: Path) -> None:
    for i in range(300):
        (tmp_path / f"file-{i}.txt").write_text("x")
    (tmp_path / "deploy.env").mkdir()
    (tmp_path / "deploy.env" / ".env.production").write_text("TOKEN=1")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "id_rsa").write_text("key")
    found, unlistable = scan([str(tmp_path)], cache=None)
    assert sorted(found) == [str(tmp_path / "deploy.env" / ".env.production"),
                             str(tmp_path / "sub" / "id_rsa")]
    assert unlistable == []


def test_the_entry_limit_is_exact_within_one_directory(tmp_path: Path):
    for index in range(5):
        (tmp_path / f"f{index}").touch()
    assert scan([str(tmp_path)], limit=5, cache=None) == ([], [])
    with pytest.raises(SandboxError, match="more than 4"):
        scan([str(tmp_path)], limit=4, cache=None)
