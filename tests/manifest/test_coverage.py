"""Glob and host coverage: judged by the sets the patterns denote, and never unsound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.manifest import glob_covers, host_covers
from callgate.manifest._coverage import uncovered_globs, uncovered_hosts
from callgate.matchers._hosts import host_matches
from callgate.matchers._paths import compile_glob

COVERED = [
    ("/srv/uploads/**", "/srv/uploads/a/**"),
    ("/srv/uploads/**", "/srv/uploads"),
    ("/srv/uploads/**", "/srv/uploads/*.txt"),
    ("/srv/uploads/**", "/srv/uploads/**/x/**"),
    ("/**", "/etc/passwd"),
    ("/srv/*/out/**", "/srv/a/out/b/**"),
    ("/srv/*.txt", "/srv/a?.txt"),
    ("/srv/[abc].txt", "/srv/b.txt"),
    ("/srv/?.txt", "/srv/[abc].txt"),
    ("./data/**", "data/x.csv"),
    ("./data/**", "./data/./x/**"),
    ("~/notes/**", "~/notes/2024/*.md"),
    ("/srv/a*b", "/srv/a*xb"),
]

NOT_COVERED = [
    ("/srv/uploads/**", "/**"),
    ("/srv/uploads/**", "/srv/**"),
    ("/srv/uploads/**", "/srv/uploads/../etc/**"),
    ("/srv/uploads/**", "/srv/uploadsX/**"),
    ("/srv/uploads/*", "/srv/uploads/**"),
    ("/srv/uploads/*", "/srv/uploads/a/b"),
    ("/srv/*.txt", "/srv/*"),
    ("/srv/[abc].txt", "/srv/d.txt"),
    ("/srv/[!abc].txt", "/srv/a.txt"),
    ("/srv/[abc].txt", "/srv/?.txt"),
    ("./data/**", "/data/**"),
    ("/data/**", "~/data/**"),
    ("./data/**", "../data/**"),
]


@pytest.mark.parametrize(("old", "new"), COVERED)
def test_glob_inside_an_old_glob_is_covered(old: str, new: str) -> None:
    assert glob_covers(old, new)


@pytest.mark.parametrize(("old", "new"), NOT_COVERED)
def test_glob_reaching_outside_is_not_covered(old: str, new: str) -> None:
    assert not glob_covers(old, new)


def test_uncovered_globs_are_reported_in_order() -> None:
    assert uncovered_globs(["/srv/uploads/**"], ["/srv/uploads/a/**", "/**", "/tmp/x"]) == [
        "/**", "/tmp/x"]


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("api.example.org", "api.example.org", True),
    ("API.example.org.", "api.example.org", True),
    ("*.example.org", "api.example.org", True),
    ("*.example.org", "a.b.example.org", True),
    ("*.example.org", "*.eu.example.org", True),
    ("*.example.org", "*.example.org", True),
    ("*.example.org", "example.org", False),
    ("*.example.org", "evilexample.org", False),
    ("*.example.org", "*.org", False),
    ("api.example.org", "*.example.org", False),
    ("api.example.org", "api.example.org.evil.com", False),
])
def test_host_coverage(old: str, new: str, expected: bool) -> None:
    assert host_covers(old, new) is expected


def test_uncovered_hosts() -> None:
    assert uncovered_hosts(["*.example.org"], ["a.example.org", "evil.com"]) == ["evil.com"]


# ----------------------------------------------------------------- soundness, property-based

SEGMENT = st.sampled_from(["a", "b", "ab", "a.txt", "b.md", "*", "?", "*.txt", "a*", "[ab]",
                           "[!a]", "**"])
NAME = st.sampled_from(["a", "b", "ab", "a.txt", "b.md", "c", "ba.txt", "aa"])
ROOT = "/cgcoverage"


def _glob(segments: list[str]) -> str:
    return ROOT + "/" + "/".join(segments) if segments else ROOT


# How a baseline glob may be derived from a new one: keep a segment, widen it to "*" or "**",
# put "**" before it, or replace it by an unrelated segment (which may or may not cover it).
EDIT = st.sampled_from(["keep", "star", "double", "insert", "other"])


def _generalise(segments: list[str], edits: list[str], others: list[str]) -> tuple[list[str],
                                                                                   bool]:
    """The derived old glob's segments, and whether coverage follows from the edits alone."""
    out: list[str] = []
    provable = True
    for segment, edit, other in zip(segments, edits, others, strict=False):
        if edit == "star" and segment != "**":
            out.append("*")
        elif edit == "double":
            out.append("**")
        elif edit == "insert":
            out.extend(["**", segment])
        elif edit == "other":
            out.append(other)
            provable = provable and other == segment
        else:
            out.append(segment)
    return out + segments[len(edits):], provable


@settings(max_examples=300)
@given(new=st.lists(SEGMENT, max_size=4), edits=st.lists(EDIT, max_size=4),
       others=st.lists(SEGMENT, min_size=4, max_size=4),
       paths=st.lists(st.lists(NAME, max_size=5), min_size=1, max_size=20))
def test_coverage_is_sound_against_the_path_gate(new: list[str], edits: list[str],
                                                 others: list[str],
                                                 paths: list[list[str]]) -> None:
    # Whenever coverage is claimed, every path the new glob admits must be admitted by the old
    # one, as the runtime path gate matches them; generalising edits are always proved.
    old, provable = _generalise(new, edits, others)
    old_glob, new_glob = _glob(old), _glob(new)
    covered = glob_covers(old_glob, new_glob)
    if provable and len(edits) >= len(new):
        assert covered
    if not covered:
        return
    for path in paths:
        candidate = _glob(path)
        if compile_glob(new_glob, "/").matches(candidate):
            assert compile_glob(old_glob, "/").matches(candidate), (old_glob, new_glob, candidate)


@given(segments=st.lists(SEGMENT, max_size=5))
def test_every_glob_covers_itself_and_is_covered_by_root_double_star(
        segments: list[str]) -> None:
    glob = _glob(segments)
    assert glob_covers(glob, glob)
    assert glob_covers("/**", glob)


LABEL = st.sampled_from(["a", "b", "api", "eu", "example", "org", "evil"])


@given(old=st.lists(LABEL, min_size=1, max_size=3), prefix=st.lists(LABEL, max_size=2),
       old_star=st.booleans(), new_star=st.booleans(),
       hosts=st.lists(st.lists(LABEL, min_size=1, max_size=5), min_size=1, max_size=20))
def test_host_coverage_is_sound_against_host_matching(
        old: list[str], prefix: list[str], old_star: bool, new_star: bool,
        hosts: list[list[str]]) -> None:
    # The new pattern is the old one with labels in front: often covered, sometimes not.
    old_pattern = ("*." if old_star else "") + ".".join(old)
    new_pattern = ("*." if new_star else "") + ".".join([*prefix, *old])
    if not host_covers(old_pattern, new_pattern):
        return
    for labels in [*hosts, [*prefix, *old], ["x", *prefix, *old]]:
        name = ".".join(labels)
        if host_matches(name, new_pattern):
            assert host_matches(name, old_pattern), (old_pattern, new_pattern, name)
