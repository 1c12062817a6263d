"""Policy patterns on RE2: linear by construction, with the meaning Python's ``re`` gives them."""

from __future__ import annotations

import array
import contextlib
import re
import signal
import sys
from collections.abc import Iterator

import pytest
import re2
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from callgate.matchers._regex import (
    MAX_PATTERN_LENGTH,
    PatternError,
    PolicyPattern,
    SubjectError,
    check_pattern,
    compile_policy_pattern,
    compile_search_regex,
)

_ORDER = "le" if sys.byteorder == "little" else "be"


def _every_character() -> str:
    codes = [*range(0xD800), *range(0xE000, 0x110000)]
    return array.array("I", codes).tobytes().decode(f"utf-32-{_ORDER}")


EVERY = _every_character()
_GLOBAL_FLAGS = re.compile(r"\(\?[aimsx]+\)")


def _python_runs(item: str) -> list[tuple[int, int]]:
    # Global flags stay in front (Python refuses them inside a group).
    flags = _GLOBAL_FLAGS.match(item)
    lead = flags.group() if flags else ""
    return [m.span() for m in re.finditer(f"{lead}(?:{item[len(lead):]})+", EVERY)]


def _re2_runs(item: str) -> list[tuple[int, int]]:
    translated = compile_policy_pattern(item, "fullmatch").translated
    return [m.span() for m in re2.compile(f"(?:{translated})+").finditer(EVERY)]


# One character item each: the class shorthands, dot, and case folding (the long s, the Kelvin
# sign, sharp s, dotted and dotless i, final sigma), in Unicode and ASCII modes. The runs of
# matching characters over the text of every code point are compared, so every one counts.
@pytest.mark.parametrize(
    "item",
    [
        r"\w", r"\W", r"\d", r"\D", r"\s", r"\S", ".", "(?s).", r"(?a)\w", r"(?a)\W", r"(?a)\d",
        r"(?a)\s", r"(?a)\S", r"[\w.-]", r"[^\w\s]", r"[^\d]", r"(?i)s", r"(?i)k", r"(?i)K",
        r"(?i)ß", r"(?i)i", r"(?i)ı", r"(?i)İ", r"(?i)σ", r"(?i)[a-z]", r"(?i)[^k]",
        r"(?i)[\W]", r"(?i)[a\d]", r"(?i)[À-ÿ]", r"(?ia)k", r"(?ia)[^s]", r"(?i)\u1e9e",
        r"(?i)[\u0100-\u017f]", r"(?i)[^\u0370-\u03ff]", r"(?i)[\U00010400-\U0001044f]",
        r"(?!/)[^a]", r"(?=\w)[^a-z]", r"(?i)(?!k)\w",
    ],
)
def test_a_character_item_matches_exactly_pythons_set_over_every_code_point(item: str) -> None:
    assert _re2_runs(item) == _python_runs(item)


# --------------------------------------------------------------------------- differential

_ALPHABET = "aAbsSkK\u212a\u017f\u00df\u1e9eiI\u0130\u0131\u03c3\u03a3\u03c2\u00e9\u00c9\u0416" \
    "\u0436_0\u0663 \t\n\u00a0\u2028-./=;@\U0001f600\U00010400"
_CLASS_MEMBERS = st.sampled_from(
    [r"\w", r"\W", r"\d", r"\D", r"\s", r"\S", "a-z", "A-Z", "0-9", "\u00c0-\u00ff",
     "\u0400-\u04ff", *(re.escape(c) for c in _ALPHABET)]
)


def _literal() -> st.SearchStrategy[str]:
    return st.sampled_from(_ALPHABET).map(re.escape)


def _charclass() -> st.SearchStrategy[str]:
    return st.builds(
        lambda neg, members: "[" + ("^" if neg else "") + "".join(members) + "]",
        st.booleans(), st.lists(_CLASS_MEMBERS, min_size=1, max_size=4),
    )


_ATOMS = st.one_of(
    _literal(), _charclass(),
    st.sampled_from([".", r"\w", r"\W", r"\d", r"\D", r"\s", r"\S", r"(?:(?!/)[^a])",
                     r"(?:(?=\w).)"]),
)
_ANCHORS = st.sampled_from(["^", r"\A", "(?m:^)", "(?m:$)", r"(?a:\b)"])
_QUANTIFIERS = st.sampled_from(["", "", "*", "+", "?", "*?", "+?", "??", "{2}", "{1,3}", "{0,2}?",
                                "{2,}"])
_GROUP_OPENERS = st.sampled_from(["(", "(?:", "(?i:", "(?s:", "(?m:", "(?a:", "(?-i:", "(?P<n>"])


def _pattern(depth: int) -> st.SearchStrategy[str]:
    atom: st.SearchStrategy[str] = st.one_of(
        st.builds(lambda a, q: a + q, _ATOMS, _QUANTIFIERS), _ANCHORS)
    if depth > 0:
        group = st.builds(lambda o, b, q: o + b + ")" + q, _GROUP_OPENERS,
                          _pattern(depth - 1), _QUANTIFIERS)
        atom = st.one_of(atom, group)
    seq = st.lists(atom, min_size=0, max_size=4).map("".join)
    return st.lists(seq, min_size=1, max_size=3).map("|".join)


_PATTERNS = st.builds(
    lambda flags, body, end: flags + body + end,
    st.sampled_from(["", "(?i)", "(?s)", "(?m)", "(?a)", "(?is)", "(?ia)", "(?ims)"]),
    _pattern(2),
    st.sampled_from(["", "", "$", r"\Z"]),
)
_SUBJECTS = st.text(alphabet=_ALPHABET, max_size=12)


def _unique_group_names(pattern: str) -> str:
    count = iter(range(100))
    return re.sub(r"\(\?P<n>", lambda _: f"(?P<n{next(count)}>", pattern)


class _OracleTooSlowError(Exception):
    pass


def _too_slow(signum: int, frame: object) -> None:
    raise _OracleTooSlowError


@contextlib.contextmanager
def _python_bounded(seconds: int = 5) -> Iterator[None]:
    # Python's engine, the oracle here, is exponential on some generated patterns
    # (([\w](|)+)*a on ten digits): an example it cannot answer in time is discarded, so the
    # test is bounded by construction. RE2 is never what is waited for.
    previous = signal.signal(signal.SIGALRM, _too_slow)
    signal.alarm(seconds)
    try:
        yield
    except _OracleTooSlowError:
        reject()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _python_search(python: re.Pattern[str], text: str) -> bool:
    # A match tried at every position: what search means. CPython 3.11's search first skips to
    # where a leading class can match, and builds that class with the pattern's outer flags, so
    # (?a:\W) never finds "\u0663" by search though it matches there (see the test below).
    return any(python.match(text, start) for start in range(len(text) + 1))


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(_PATTERNS, st.lists(_SUBJECTS, min_size=1, max_size=6))
def test_translated_pattern_agrees_with_python_on_generated_patterns_and_text(
    raw: str, subjects: list[str]
) -> None:
    pattern = _unique_group_names(raw)
    searched = compile_policy_pattern(pattern, "search", max_length=None)
    whole = compile_policy_pattern(pattern, "fullmatch", max_length=None)
    python = re.compile(pattern)
    with _python_bounded():
        expected = [(_python_search(python, text), python.fullmatch(text) is not None)
                    for text in subjects]
    for text, (found, whole_found) in zip(subjects, expected, strict=True):
        assert searched.matches(text) == found, (pattern, text)
        assert whole.matches(text) == whole_found, (pattern, text)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(_PATTERNS, st.lists(_SUBJECTS, min_size=1, max_size=6))
def test_the_direct_re2_call_and_the_wrapper_agree_on_generated_patterns(
    raw: str, subjects: list[str]
) -> None:
    for mode in ("search", "fullmatch"):
        pattern = compile_policy_pattern(_unique_group_names(raw), mode, max_length=None)
        wrapped = (pattern._regexp.search if mode == "search" else pattern._regexp.fullmatch)
        for text in subjects:
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:
                continue
            assert pattern.matches(text) == (wrapped(data) is not None), (raw, mode, text)


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        ("rm$", "rm\n"), (r"(?i)STRASSE", "stra\u00dfe"), (r"(?i)\u017f", "S"),
        (r"(?i)k", "\u212a"), (r"\w+", "\u0416\u0436\u0663"), (r"^\d+$", "\u0663\u0664"),
        (r"\s", "\u2028"), (r"(^|/)\.ssh(/|$)", "/home/u/.ssh"), (r"(^|/)\.ssh(/|$)", ".ssh/k"),
        (r"x\Z", "x\n"), (r"(?m)^b$", "a\nb\nc"), (r"(?s)a.b", "a\nb"), ("a.b", "a\nb"),
        (r"\N{GREEK SMALL LETTER SIGMA}", "\u03c3"), (r"\101", "A"), ("\U0001f600+", "\U0001f600"),
    ],
)
def test_known_differences_between_the_engines_keep_pythons_meaning(
    pattern: str, text: str
) -> None:
    expected = re.search(pattern, text) is not None
    assert compile_policy_pattern(pattern).matches(text) is expected


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.builds(lambda flags, body: flags + body,
                 st.sampled_from(["", "(?i)", "(?s)", "(?m)", "(?a)", "(?is)", "(?ia)"]),
                 _pattern(2)),
       _SUBJECTS)
def test_a_search_regex_finds_the_spans_and_groups_python_finds(raw: str, text: str) -> None:
    # The guards read what their expressions found: every match, and its groups, must be
    # Python's (lazy repeats stay lazy, groups keep their numbers).
    pattern = _unique_group_names(raw)
    try:
        regex = compile_search_regex(pattern)
    except PatternError:
        return  # refused: never used
    with _python_bounded():
        expected = [(m.span(), m.groups()) for m in re.finditer(pattern, text)]
    assert [(m.span(), m.groups()) for m in regex.finditer(text)] == expected, pattern


@pytest.mark.parametrize("pattern", ["a$", "x*", "(?:a|)", r"\b"])
def test_a_search_regex_refuses_plain_dollar_and_empty_matches(pattern: str) -> None:
    with pytest.raises(PatternError):
        compile_search_regex(pattern)


@pytest.mark.parametrize(
    ("pattern", "text"),
    [(r"(?a:\W)", "\u0663"), (r"(?a:[^\s])", "\x1c"), (r"(?a)(?u:\w)", "\u0663")],
)
def test_a_scoped_ascii_or_unicode_class_keeps_its_own_meaning_in_search(
    pattern: str, text: str
) -> None:
    # Python's match agrees; its search skips the position (the quirk _python_search avoids).
    assert re.match(pattern, text) is not None
    assert compile_policy_pattern(pattern).matches(text)


# RE2 reads a class of exactly one ASCII capital and its small letter ([Ss], [Kk]) as a
# case-folded literal, and folds it again with Unicode's full orbit when it gathers the branches
# of an alternation into one class: the long s and the Kelvin sign would match. Python's meaning
# ([Ss] is two characters) must survive wherever the class stands.
@pytest.mark.parametrize(
    ("pattern", "plain"),
    [(r"(?:b|([Ss]))", "S"), (r"(?ai)(?:b|(s))", "s"), (r"(?:x|([Kk]))", "k"),
     (r"(?i)(?:b|(?a:k))", "K"), (r"^(?:(y)|([Ss]))$", "s"), (r"(?ai)(?:xy|(s)|z)", "S"),
     (r"(?:(?!x)[Ss]|b)+", "s")],
)
@pytest.mark.parametrize("text", ["\u017f", "\u212a", "-\u017f\u212a"])
def test_a_class_of_one_ascii_letter_pair_does_not_gain_unicode_case_folds(
    pattern: str, plain: str, text: str
) -> None:
    assert re.search(pattern, text) is None
    assert not compile_policy_pattern(pattern, "search").matches(text)
    assert not compile_policy_pattern(pattern, "fullmatch").matches(text)
    assert compile_policy_pattern(pattern, "fullmatch").matches(plain)


def test_a_deny_pattern_with_backslash_w_still_matches_non_ascii_words() -> None:
    # RE2's \w is ASCII-only: handed over as written, this deny rule would stop matching.
    pattern = compile_policy_pattern(r"^\w+$")
    assert pattern.matches("\u043f\u0430\u0440\u043e\u043b\u044c")
    assert pattern.matches("caf\u00e9")


# --------------------------------------------------------------------------- linear time

_SUBJECT_SIZE = 64 * 1024

# Patterns a backtracking engine runs in exponential or high polynomial time on the subject
# next to them, with the answer. ``re`` is never run on these subjects.
SUPER_LINEAR: list[tuple[str, str, bool]] = [
    (r".*.*=.*;", "=" * _SUBJECT_SIZE, False),
    (r".*.*=.*;", "=" * (_SUBJECT_SIZE - 1) + ";", True),
    (r"(a|ab)*c", "ab" * (_SUBJECT_SIZE // 2), False),
    (r"\d*\d*\d*x", "1" * _SUBJECT_SIZE, False),
    (r"(?:[\w-]+\.)+[\w-]+@example\.com", "a." * (_SUBJECT_SIZE // 2), False),
    (r"(?:[\w-]+\.)+[\w-]+@example\.com", "\u00e9." * 1000 + "x@example.com", True),
    (r"(a+)+$", "a" * (_SUBJECT_SIZE - 1) + "!", False),
    (r"(a*)*b", "a" * _SUBJECT_SIZE, False),
    (r"(x+x+)+y", "x" * _SUBJECT_SIZE, False),
    (r"^(\w+\s?)+$", "word " * (_SUBJECT_SIZE // 5) + "!", False),
    (r"(.*a){12}x", "a" * _SUBJECT_SIZE, False),
    (r"(a|aa)+b", "a" * _SUBJECT_SIZE, False),
    (r"(.*?,){11}P", "1," * (_SUBJECT_SIZE // 2), False),
    (r"^(a?){25}a{25}$", "a" * _SUBJECT_SIZE, False),
    (r"(\w|\d)+@", "1" * _SUBJECT_SIZE, False),
    (r"^([a-zA-Z0-9])(([\-.]|[_]+)?([a-zA-Z0-9]+))*(@){1}[a-z0-9]+[.]{1}(([a-z]{2,3})|"
     r"([a-z]{2,3}[.]{1}[a-z]{2,3}))$", "a" * _SUBJECT_SIZE + "!", False),
    (r"(?i)(s|\u017f)+x", "\u017fS" * (_SUBJECT_SIZE // 2), False),
    (r"\s*\s*\s*;", "\u2028" * _SUBJECT_SIZE, False),
    (r"(\s*,\s*)*;", " ," * (_SUBJECT_SIZE // 2), False),
    (r"(?m)^(.+)+=", "k" * _SUBJECT_SIZE, False),
]


@pytest.mark.parametrize(("pattern", "text", "expected"), SUPER_LINEAR)
def test_super_linear_patterns_compile_and_answer_on_a_64k_subject(
    pattern: str, text: str, expected: bool
) -> None:
    assert compile_policy_pattern(pattern).matches(text) is expected


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        (r"(a)\1", "back-references"),
        (r"(?P<x>a)(?P=x)", "back-references"),
        (r"(a)?(?(1)b|c)", "conditional groups"),
        (r"a++", "possessive"),
        (r"(?>a+)b", "atomic groups"),
        (r"(?<=a)b", "lookbehind"),
        (r"(?<!a)b", "lookbehind"),
        (r"a(?=bc)", "lookahead"),
        (r"\bword\b", r"add (?a)"),
        (r"(?a)a\B", r"\B is refused"),
        (r"a$b", r"write \Z"),
        (r"(a$)*", r"write \Z"),
        (r"a{1001}", "counted repeats go up to 1000"),
        (r"a{2,5000}", "counted repeats go up to 1000"),
        ("[[a]", "ambiguous syntax"),
        ("(", "does not compile"),
        ("a" * (MAX_PATTERN_LENGTH + 1), "characters long"),
        (r"(?:\w{100}){100}", "too large"),
    ],
)
def test_constructs_without_a_linear_meaning_are_refused_with_what_to_write(
    pattern: str, says: str
) -> None:
    with pytest.raises(PatternError, match=re.escape(says)):
        compile_policy_pattern(pattern)
    assert says in (check_pattern(pattern) or "")


@pytest.mark.parametrize(
    "pattern",
    [
        r"^https://(api\.github\.com|api\.openai\.com)/", r"^([a-z0-9-]+\.)+[a-z]{2,}$",
        r"(^|/)\.env[^/]*$", r"(^|/)(id_rsa|id_dsa|id_ecdsa|id_ed25519)[^/]*$",
        r"(?a)\brm\b", r"(?x) a  b # comment", r"(?i)drop\s+table", "", r"\w{1,64}",
        r"[^\x00-\x1f]", r"(?s).*", r"\Aa\Z",
    ],
)
def test_common_policy_patterns_compile(pattern: str) -> None:
    assert isinstance(compile_policy_pattern(pattern), PolicyPattern)
    assert check_pattern(pattern) is None


def test_a_lone_surrogate_in_the_text_raises_instead_of_matching_or_not() -> None:
    pattern = compile_policy_pattern(r"secret.*key")
    with pytest.raises(SubjectError, match="lone surrogate"):
        pattern.matches("secret\udc80key")


@given(st.text(max_size=20), st.integers(min_value=0xD800, max_value=0xDFFF), st.text(max_size=5))
def test_any_text_holding_a_lone_surrogate_is_never_answered(
    before: str, surrogate: int, after: str
) -> None:
    with pytest.raises(SubjectError):
        compile_policy_pattern(".*").matches(before + chr(surrogate) + after)


# --------------------------------------------------------------------------- globs


def test_a_glob_with_many_stars_answers_on_a_64k_segment() -> None:
    from callgate.matchers._paths import compile_glob

    glob = compile_glob("/data/**/*a*a*a*a*b", "/")
    # Fails fast before the switch rather than running a super-linear match.
    assert not isinstance(glob._regex, re.Pattern)
    assert glob.matches("/data/" + "a" * _SUBJECT_SIZE) is False
    assert glob.matches("/data/x/" + "a" * _SUBJECT_SIZE + "b") is True


@pytest.mark.parametrize(
    "regex",
    [r"/data(?:/[^/]+)*/[^/]*a[^/]*a[^/]*b", r"/srv/(?!/)[a-c]x", r"/etc/[^/]+|/",
     re.escape("/home/u s+r") + r"/[^/]"],
)
def test_glob_regex_text_compiles_for_whole_path_matching(regex: str) -> None:
    compiled = compile_policy_pattern(regex, "fullmatch", max_length=None)
    for path in ["/data/x/aab", "/data/aab", "/srv/bx", "/srv//x", "/etc/hosts", "/",
                 "/home/u s+r/q", "/data/" + "a" * 100]:
        assert compiled.matches(path) == (re.fullmatch(regex, path) is not None), path


@pytest.mark.parametrize("pattern", [r"a|([\w]*)*s", r"((a)*)+b", r"x(?:(y)?)*z"])
def test_a_repeated_part_that_can_match_nothing_may_not_capture(pattern: str) -> None:
    # Python's last round of ``(x*)*`` matches nothing and empties the group; RE2's does not
    with pytest.raises(PatternError, match="capturing group"):
        compile_search_regex(pattern)
    assert [m.groups() for m in re.finditer(r"a|([\w]*)*s", "0s")] == [("",)]
