"""Identifiers inside text: one normal form for every spelling, and no date or prose taken
for one."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from callgate._identifiers import (
    MAX_IDENTIFIERS,
    URL_AUTHORITY,
    _patterns,
    authority_hostname,
    identifiers,
    may_be_identifier,
    normal_identifier,
)


@pytest.mark.parametrize(("spellings", "normal"), [
    (["Mark.Black@Gmail.com", "mark.black@gmail.com"], "mark.black@gmail.com"),
    (["https://WWW.Example.com/a/", "http://www.example.com/a", "www.example.com/a"],
     "www.example.com/a"),
    (["GB29 NWBK 6016 1331 9268 19", "GB29NWBK60161331926819"], "GB29NWBK60161331926819"),
    (["+1 (555) 123-4567", "+1 555 123 4567"], "+15551234567"),
    (["Report-Q3.DOCX", "report-q3.docx"], "report-q3.docx"),
])
def test_every_spelling_of_an_identifier_has_one_normal_form(spellings: list[str],
                                                              normal: str) -> None:
    for spelling in spellings:
        assert normal_identifier(spelling) == normal
        assert identifiers(f"see {spelling}, please") == [normal]


@pytest.mark.parametrize("text", ["2024-05-13", "2024-05-30 10:20", "12:30", "1000.0",
                                  "hello world", "e.g. this", "13", "version 1.2.3"])
def test_dates_numbers_and_prose_are_not_identifiers(text: str) -> None:
    assert identifiers(text) == [] and normal_identifier(text) is None


def test_a_host_run_into_the_next_sentence_is_found_with_and_without_it() -> None:
    assert identifiers("post to www.our-company.com.They sent it") == [
        "www.our-company.com.they", "www.our-company.com"]


def test_a_text_gives_at_most_the_bound_of_identifiers() -> None:
    text = " ".join(f"user{i}@x.example" for i in range(MAX_IDENTIFIERS * 2))
    assert len(identifiers(text)) == MAX_IDENTIFIERS


_LABEL = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)


@given(st.lists(_LABEL, min_size=2, max_size=4), st.sampled_from(["com", "org", "io", "net"]),
       st.sampled_from(["", "http://", "https://", "HTTPS://"]), st.booleans(), st.booleans())
@example(["a", "sh"], "com", "", False, False)  # a label that is a file ending: a.sh.com
def test_a_normal_form_is_its_own_normal_form(labels: list[str], tld: str, scheme: str,
                                             upper: bool, slash: bool) -> None:
    host = ".".join([*labels, tld])
    written = scheme + (host.upper() if upper else host) + ("/" if slash else "")
    normal = normal_identifier(written)
    assert normal == host
    assert normal_identifier(normal) == normal and identifiers(normal) == [normal]


def test_a_host_whose_inner_label_is_a_file_ending_is_one_host_and_a_file_name_is_a_file() -> None:
    assert identifiers("mail a.sh.com or docs.pdf.example.org") == ["a.sh.com",
                                                                    "docs.pdf.example.org"]
    assert identifiers("run a.sh, then read report.txt.") == ["a.sh", "report.txt"]


@given(st.text(alphabet=st.sampled_from(list("abcXYZ09+-_ ()/:@.%é٣")), max_size=30))
@example("user@example.org")
@example("report.pdf")
@example("+1 555 123 4567")
@example("DE44500105175407324931")
def test_a_text_ruled_out_without_the_patterns_matches_none_of_them(text: str) -> None:
    stripped = text.strip()
    if not may_be_identifier(stripped):
        assert not any(pattern.fullmatch(stripped) for pattern in _patterns()[1].values())
        assert normal_identifier(text) is None


def test_the_host_of_an_authority_is_urlsplits_and_a_malformed_one_raises_every_time() -> None:
    for url in ("https://User@Docs.Example.org:8443/a?b", "http://[::1]:80/x", "s3://bucket/k"):
        found = URL_AUTHORITY.match(url)
        assert found is not None
        assert authority_hostname(found.group()) == urlsplit(url).hostname
    for _ in range(2):  # a failure is not remembered as an answer
        with pytest.raises(ValueError):
            authority_hostname("https://[::1")
