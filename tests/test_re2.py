from __future__ import annotations

from typing import Literal

import pytest
import re2

from callgate._re2 import re2_test


def test_re2_test_calls_re2_directly_when_the_package_exposes_it() -> None:
    # The direct call is what keeps a path or argument check cheap; were the package to stop
    # exposing it, the wrapper would answer (the same answers, slower), and this test says so.
    test = re2_test(re2.compile(r"/srv/(?:[^/]+/)*[^/]+\.txt"), "fullmatch")
    assert test.__name__ == "direct"


@pytest.mark.parametrize(("mode", "data", "expected"), [
    ("fullmatch", b"/srv/a/b.txt", True), ("fullmatch", b"/srv/a/b.txt/", False),
    ("fullmatch", b"x/srv/a.txt", False), ("search", b"x/srv/a.txt", True),
    ("search", b"/srv/.txt", False), ("fullmatch", "/srv/\u00e9/b.txt".encode(), True),
])
def test_re2_test_answers_as_the_package_wrapper_does(
        mode: Literal["search", "fullmatch"], data: bytes, expected: bool) -> None:
    regexp = re2.compile(r"/srv/(?:[^/]+/)*[^/]+\.txt")
    wrapper = regexp.search if mode == "search" else regexp.fullmatch
    assert re2_test(regexp, mode)(data) is expected
    assert (wrapper(data) is not None) is expected


def test_without_the_packages_match_the_wrapper_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    from callgate import _re2

    monkeypatch.setattr(_re2, "_ANCHORS", None)  # as on a package that does not expose them
    regexp = re2.compile(r"/srv/(?:[^/]+/)*[^/]+\.txt")
    whole, found = re2_test(regexp, "fullmatch"), re2_test(regexp, "search")
    assert whole.__name__ != "direct"
    assert whole(b"/srv/a/b.txt") and not whole(b"x/srv/a.txt")
    assert found(b"x/srv/a.txt") and not found(b"/srv/.txt")
