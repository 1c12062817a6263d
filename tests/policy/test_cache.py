"""The policy cache: a text that validated loads from it; nothing in it is trusted blindly.

Whether the cache was used is read from its counters and from the YAML stage not running
(``_compose.compose`` replaced by a function that fails), never from timing.
"""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path
from typing import Any

import pytest

from callgate import PolicyError
from callgate.policy import _cache
from callgate.policy._cache import MAGIC, PolicyCache
from callgate.policy._lint import lint_policy
from callgate.policy._loader import LoadedPolicy, load_policy, parse_policy

POLICY = """\
name: cached
version: 1
principal:
  name: agent
  capabilities:
    - tool_class: file
      actions: [read]
      constraints: {allowed_paths: ["./data/**"]}
rules:
  - id: allow-reads
    priority: 10
    match: {action: read}
    decision: allow
tools:
  report:
    filesystem: {write: ["./out/**"]}
    path_params: {path: write}
behavior:
  - id: plain
    rule: abs(send_email)
  - id: block
    rule: |
      prec(action = send_email,
           action = approve)
  - id: quoted
    rule: "abs(action = curl and data_file ~ \\"*.env*\\")"
"""


@pytest.fixture
def cache(tmp_path: Path) -> PolicyCache:
    return PolicyCache(tmp_path / "xdg" / "callgate")


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    path = tmp_path / "agent.yaml"
    path.write_text(POLICY)
    return path


def no_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, composing YAML fails the test: a load that succeeds came from the cache."""
    def refuse(text: str, source: str, max_depth: int) -> Any:
        raise AssertionError(f"{source} was parsed, not taken from the cache")

    monkeypatch.setattr("callgate.policy._compose.compose", refuse)


def entries(cache: PolicyCache) -> list[Path]:
    return sorted(Path(cache.directory).glob("*.policy"))


def assert_same(one: LoadedPolicy, other: LoadedPolicy) -> None:
    assert one.policy == other.policy
    assert one.policy.model_fields_set == other.policy.model_fields_set
    assert lint_policy(one.policy) == lint_policy(other.policy)
    for path in one._places:
        assert one.locate(path) == other.locate(path)
        assert one.raw_span(path) == other.raw_span(path)


# --- used, and equal to validating ----------------------------------------------------------


def test_the_second_load_of_a_file_comes_from_the_cache(
        cache: PolicyCache, policy_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = load_policy(policy_file, cache=cache)
    assert (cache.hits, cache.misses, cache.stored) == (0, 1, 1)
    no_yaml(monkeypatch)
    second = load_policy(policy_file, cache=cache)
    assert (cache.hits, cache.misses, cache.stored) == (1, 1, 1)
    assert second.source == str(policy_file)
    assert_same(first, second)


def test_a_cached_load_keeps_every_place_and_span_of_the_statements(
        cache: PolicyCache, policy_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load_policy(policy_file, cache=cache)
    no_yaml(monkeypatch)
    loaded = load_policy(policy_file, cache=cache)
    assert loaded.locate(("rules", 0, "decision")) == (13, 15)
    assert loaded.raw_span(("behavior", 0, "rule")) == ("abs(send_email)", 20, 11)
    assert loaded.raw_span(("behavior", 1, "rule")) == (
        "      prec(action = send_email,\n           action = approve)", 23, 1)
    assert loaded.rule_place(2) == (str(policy_file),
                                    'abs(action = curl and data_file ~ \\"*.env*\\")', 26, 12)
    assert loaded.raw_span(("behavior",)) is None


def test_a_text_parsed_twice_comes_from_the_cache(
        cache: PolicyCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = parse_policy(POLICY, "inline.yaml", base_dir=tmp_path, cache=cache)
    no_yaml(monkeypatch)
    second = parse_policy(POLICY, "inline.yaml", base_dir=tmp_path, cache=cache)
    assert cache.hits == 1
    assert_same(first, second)


def test_a_file_with_a_byte_order_mark_keeps_its_places_from_the_cache(
        cache: PolicyCache, policy_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy_file.write_bytes(b"\xef\xbb\xbf" + POLICY.encode())
    parse_policy(POLICY, "same text, without the mark", cache=cache)
    first = load_policy(policy_file, cache=cache)
    no_yaml(monkeypatch)
    second = load_policy(policy_file, cache=cache)
    assert cache.hits == 1
    assert_same(first, second)
    assert second.raw_span(("behavior", 0, "rule")) == ("abs(send_email)", 20, 11)


# --- what is validated again ----------------------------------------------------------------


def test_a_changed_file_is_validated_again(cache: PolicyCache, policy_file: Path) -> None:
    load_policy(policy_file, cache=cache)
    policy_file.write_text(POLICY.replace("decision: allow", "decision: deny"))
    loaded = load_policy(policy_file, cache=cache)
    assert loaded.policy.rules[0].decision == "deny"
    assert (cache.hits, cache.misses, cache.stored) == (0, 2, 2)
    policy_file.write_text(POLICY.replace("decision: allow", "decision: maybe"))
    with pytest.raises(PolicyError) as info:
        load_policy(policy_file, cache=cache)
    [problem] = info.value.problems
    assert (problem.source, problem.line, problem.column) == (str(policy_file), 13, 15)


def test_a_policy_with_problems_is_never_stored_and_named_at_its_places_each_time(
        cache: PolicyCache, policy_file: Path) -> None:
    policy_file.write_text(POLICY.replace("priority: 10", "priority: high").replace(
        "decision: allow", "decison: allow"))
    for _ in range(2):
        with pytest.raises(PolicyError) as info:
            load_policy(policy_file, cache=cache)
        places = [(p.line, p.column) for p in info.value.problems]
        assert places == [(10, 5), (11, 15), (13, 5)], info.value.problems
        assert str(info.value).startswith(f"{policy_file}:10:5: ")
    assert cache.stored == 0
    assert entries(cache) == []


def test_another_callgate_or_python_finds_no_entry(
        cache: PolicyCache, policy_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load_policy(policy_file, cache=cache)
    monkeypatch.setattr(_cache, "_environment", lambda: b"another version of the code")
    load_policy(policy_file, cache=cache)
    assert (cache.hits, cache.misses, cache.stored) == (0, 2, 2)
    assert len(entries(cache)) == 2


def test_a_symlinked_root_is_refused_on_a_cached_load_too(
        cache: PolicyCache, policy_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(policy_file.parent)
    load_policy(policy_file, cache=cache)
    (policy_file.parent / "data").rmdir()
    (policy_file.parent / "data").symlink_to("/etc")
    with pytest.raises(PolicyError) as info:
        load_policy(policy_file, cache=cache)
    assert cache.hits == 1
    [problem] = info.value.problems
    assert (problem.line, problem.column) == (8, 37)
    assert problem.field == "principal.capabilities[0].constraints.allowed_paths[0]"


def test_working_dir_is_resolved_against_the_directory_of_each_load(
        cache: PolicyCache, tmp_path: Path) -> None:
    text = "name: w\nversion: 1\nworking_dir: work\n"
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "p.yaml").write_text(text)
    load_policy(tmp_path / "one" / "p.yaml", cache=cache)
    loaded = load_policy(tmp_path / "two" / "p.yaml", cache=cache)
    assert cache.hits == 1
    assert loaded.policy.working_dir == str((tmp_path / "two" / "work").resolve())


# --- never trusted blindly ------------------------------------------------------------------


def test_a_tampered_entry_is_ignored_and_written_again(
        cache: PolicyCache, policy_file: Path) -> None:
    first = load_policy(policy_file, cache=cache)
    [entry] = entries(cache)
    data = bytearray(entry.read_bytes())
    data[-20] ^= 0x01
    entry.write_bytes(bytes(data))
    second = load_policy(policy_file, cache=cache)
    assert (cache.hits, cache.ignored, cache.stored) == (0, 1, 2)
    assert_same(first, second)
    load_policy(policy_file, cache=cache)
    assert cache.hits == 1  # the rebuilt entry verifies


class _Planted:
    """Pickles as a call of ``os.mkdir``: what a forged entry would try to run."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple[Any, ...]:
        return os.mkdir, (str(self.target),)


def _forge(cache: PolicyCache, entry: Path, payload: bytes, *, secret: bytes | None) -> None:
    key = bytes.fromhex(entry.name.removesuffix(".policy"))
    mac = _cache._mac(secret, key, payload) if secret is not None else bytes(32)
    entry.write_bytes(MAGIC + mac + payload)


@pytest.mark.parametrize("authenticated", [False, True], ids=["bad-mac", "stolen-key"])
def test_an_entry_that_would_run_code_is_ignored_without_running_it(
        cache: PolicyCache, policy_file: Path, tmp_path: Path, authenticated: bool) -> None:
    first = load_policy(policy_file, cache=cache)
    [entry] = entries(cache)
    marker = tmp_path / "ran"
    secret = (Path(cache.directory) / "key").read_bytes() if authenticated else None
    _forge(cache, entry, pickle.dumps((_Planted(marker), {}), protocol=5), secret=secret)
    second = load_policy(policy_file, cache=cache)
    assert not marker.exists()
    assert (cache.hits, cache.ignored) == (0, 1)
    assert_same(first, second)


def test_an_authenticated_entry_that_is_not_a_policy_is_ignored(
        cache: PolicyCache, policy_file: Path) -> None:
    load_policy(policy_file, cache=cache)
    [entry] = entries(cache)
    secret = (Path(cache.directory) / "key").read_bytes()
    _forge(cache, entry, pickle.dumps(("not a policy", {}), protocol=5), secret=secret)
    loaded = load_policy(policy_file, cache=cache)
    assert (cache.hits, cache.ignored) == (0, 1)
    assert loaded.policy.name == "cached"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_an_entry_of_another_user_is_ignored_and_replaced(
        cache: PolicyCache, policy_file: Path) -> None:
    load_policy(policy_file, cache=cache)
    [entry] = entries(cache)
    os.chown(entry, 4242, 4242)
    load_policy(policy_file, cache=cache)
    assert (cache.hits, cache.ignored, cache.stored) == (0, 1, 2)
    assert entry.stat().st_uid == os.geteuid()


def test_an_entry_others_may_write_is_ignored(cache: PolicyCache, policy_file: Path) -> None:
    load_policy(policy_file, cache=cache)
    [entry] = entries(cache)
    entry.chmod(0o666)
    load_policy(policy_file, cache=cache)
    assert (cache.hits, cache.ignored, cache.stored) == (0, 1, 2)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600


def test_a_symlinked_entry_is_not_followed(
        cache: PolicyCache, policy_file: Path, tmp_path: Path) -> None:
    load_policy(policy_file, cache=cache)
    [entry] = entries(cache)
    elsewhere = tmp_path / "elsewhere.policy"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    load_policy(policy_file, cache=cache)
    assert (cache.hits, cache.ignored) == (0, 1)
    assert not entry.is_symlink()


def test_a_key_others_may_read_is_replaced_and_its_entries_ignored(
        cache: PolicyCache, policy_file: Path) -> None:
    load_policy(policy_file, cache=cache)
    key = Path(cache.directory) / "key"
    old = key.read_bytes()
    key.chmod(0o644)
    load_policy(policy_file, cache=cache)
    assert (cache.hits, cache.ignored, cache.stored) == (0, 1, 2)
    assert key.read_bytes() != old
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    load_policy(policy_file, cache=cache)
    assert cache.hits == 1


def test_a_cache_directory_open_to_others_is_not_read_until_closed(
        cache: PolicyCache, policy_file: Path) -> None:
    load_policy(policy_file, cache=cache)
    os.chmod(cache.directory, 0o755)
    load_policy(policy_file, cache=cache)
    assert (cache.hits, cache.stored) == (0, 2)  # not read; the write closed it again
    assert stat.S_IMODE(os.stat(cache.directory).st_mode) == 0o700
    load_policy(policy_file, cache=cache)
    assert cache.hits == 1


def test_a_symlinked_cache_directory_is_not_used(policy_file: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    cache = PolicyCache(tmp_path / "link")
    for _ in range(2):
        assert load_policy(policy_file, cache=cache).policy.name == "cached"
    assert (cache.hits, cache.stored) == (0, 0)
    assert list(real.iterdir()) == []


def test_the_cache_is_private_from_the_start(cache: PolicyCache, policy_file: Path) -> None:
    load_policy(policy_file, cache=cache)
    assert stat.S_IMODE(os.stat(cache.directory).st_mode) == 0o700
    names = sorted(p.name for p in Path(cache.directory).iterdir())
    assert len(names) == 2 and "key" in names  # the key and one entry, no temporary file
    for path in Path(cache.directory).iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (Path(cache.directory) / "key").stat().st_size == _cache.SECRET_BYTES


# --- a cache that cannot be used ------------------------------------------------------------


def test_a_cache_directory_that_cannot_be_created_leaves_loading_correct(
        policy_file: Path, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("in the way")
    cache = PolicyCache(tmp_path / "a-file" / "callgate")
    for _ in range(2):
        assert load_policy(policy_file, cache=cache).policy.rules[0].id == "allow-reads"
    assert (cache.hits, cache.misses, cache.stored) == (0, 2, 0)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_cache_directory_leaves_loading_correct(
        cache: PolicyCache, policy_file: Path) -> None:
    os.makedirs(cache.directory, mode=0o500)
    for _ in range(2):
        assert load_policy(policy_file, cache=cache).policy.name == "cached"
    assert (cache.hits, cache.stored) == (0, 0)


def test_old_entries_past_the_limit_are_removed(
        cache: PolicyCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cache, "MAX_ENTRIES", 2)
    for i in range(4):
        parse_policy(f"name: p{i}\nversion: 1\n", base_dir=tmp_path, cache=cache)
    assert cache.stored == 4
    assert len(entries(cache)) == 2


def test_the_default_directory_follows_xdg_then_home() -> None:
    xdg = PolicyCache.default({"XDG_CACHE_HOME": "/srv/cache", "HOME": "/home/a"})
    assert xdg is not None and xdg.directory == "/srv/cache/callgate"
    home = PolicyCache.default({"XDG_CACHE_HOME": "relative", "HOME": "/home/a"})
    assert home is not None and home.directory == "/home/a/.cache/callgate"
    assert PolicyCache.default({"HOME": "not/absolute"}) is None
    assert PolicyCache.default({}) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_policy_file_of_another_user_is_never_cached(
        cache: PolicyCache, policy_file: Path) -> None:
    os.chown(policy_file, 4242, 4242)
    for _ in range(2):
        assert load_policy(policy_file, cache=cache).policy.name == "cached"
    assert (cache.hits, cache.misses, cache.stored) == (0, 0, 0)
    assert not os.path.exists(cache.directory)
