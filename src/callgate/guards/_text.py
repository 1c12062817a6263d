"""Text helpers shared by the content guards: walking parameters, entropy, shapes.

Everything here is pure. The guards look at what a call carries, so the first job is to see the
same bytes an attacker could smuggle out: every string in the parameters (keys included); the
forms those strings decode to are ``_decode``'s.
"""

from __future__ import annotations

import base64
import functools
import math
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from callgate.matchers._regex import compile_search_regex
from callgate.matchers._screen import Screened

#: How deep parameters are walked; the kernel refuses deeper nesting before guards run.
MAX_DEPTH = 40
_HEX_ONLY = re.compile(r"^[0-9a-fA-F]+$")
_B64_ONLY = re.compile(r"^[A-Za-z0-9+/_-]+={0,2}$")

#: Shapes of credentials that are secret wherever they appear. They search agent-supplied text
#: (every decoded form of every parameter) and what reads return, so they run on RE2 with
#: Python's meaning (``callgate.matchers._regex``): linear in the text, where Python's engine
#: took time quadratic in it (``-eyJ`` or ``-----BEGIN PRIVATE KEY-----`` repeated) or worse (blank
#: lines before the assignment pattern). Word boundaries are ASCII (``(?a)``), like the classes.
KEY_SHAPES: tuple[tuple[str, Screened], ...] = tuple(
    (name, Screened.later(pattern, compile_search_regex, literals, ignore_case=ignore_case))
    for name, pattern, literals, ignore_case in (
        ("pem-private-key",
         r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]{16,}?-----END [A-Z0-9 ]*PRIVATE KEY-----",
         ("-----BEGIN ",), False),
        ("aws-access-key", r"(?a)\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", ("AKIA", "ASIA"), False),
        ("aws-secret-key", r"(?i)aws_secret_access_key\s*[=:]\s*['\"]?([A-Za-z0-9/+=]{40})",
         ("aws_secret_access_key",), True),
        ("github-token", r"(?a)\bgh[pousr]_[A-Za-z0-9]{36,}\b",
         ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), False),
        ("slack-token", r"(?a)\bxox[abprs]-[A-Za-z0-9-]{10,}\b", ("xox",), False),
        ("api-key", r"(?a)\bsk-[A-Za-z0-9_-]{20,}\b", ("sk-",), False),
        ("google-api-key", r"(?a)\bAIza[0-9A-Za-z_-]{35}\b", ("AIza",), False),
        ("jwt", r"(?a)\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", ("eyJ",),
         False),
    ))
#: ``NAME=value`` / ``name: value`` / ``"name": "value"`` lines whose name says "secret".
_SECRET_ASSIGNMENT = Screened.later(
    r"""(?im)^[\s"']*([A-Za-z0-9_.-]*(?:pass(?:word|wd)?|secret|token|api[_-]?key|"""
    r"""private[_-]?key|credential|auth)[A-Za-z0-9_.-]*)["']?\s*[=:]\s*["']?([^\s"',#]{6,})""",
    compile_search_regex, ("pass", "secret", "token", "api", "private", "credential", "auth"),
    ignore_case=True)
#: Token-like runs that are candidates for high-entropy secrets.
_TOKEN_RUN = re.compile(r"[A-Za-z0-9+/_.~-]{20,}")


def walk_strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string in a JSON-like value, mapping keys included (data can hide in a key)."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                yield key
            yield from walk_strings(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from walk_strings(item, depth + 1)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)


def entropy(text: str) -> float:
    """Shannon entropy of ``text`` in bits per character (0 for an empty string)."""
    if not text:
        return 0.0
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in Counter(text).values())


def is_hex(text: str) -> bool:
    """True for a non-empty string of hex digits."""
    return bool(_HEX_ONLY.match(text))


def looks_encoded(text: str, *, min_len: int) -> bool:
    """True when ``text`` looks like hex or base64 data of at least ``min_len`` characters.

    Hex needs only its length (words are rarely all hex digits). Base64 needs a mix: a digit
    or a ``+/_`` and both letter cases, and at least 3.5 bits of entropy per character, so
    ordinary long words and ``kebab-case-slugs`` are not data.
    """
    if len(text) < min_len:
        return False
    if is_hex(text):
        return True
    if not _B64_ONLY.match(text):
        return False
    mixed = any(c.isdigit() or c in "+/_" for c in text) and any(c.isupper() for c in text) \
        and any(c.islower() for c in text)
    if mixed and entropy(text) >= 3.5:
        return True
    # Low entropy can be padding, not words: base64 of bytes that are mostly zeros or other
    # control bytes (UTF-16 or UTF-32 text, a fixed-width record, small integers) repeats "A"
    # and a few letters, yet carries data all the same. What a word decodes to is noise, with
    # few control bytes.
    return any(c.isupper() for c in text) and any(c.islower() for c in text) \
        and _mostly_low_bytes(text)


def _mostly_low_bytes(text: str) -> bool:
    try:
        raw = base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_")
                                       + "=" * (-len(text) % 4))
    except ValueError:
        return False
    if len(raw) < 8 or len(set(raw)) < 4:
        return False
    return raw.count(0) * 4 >= len(raw) or sum(b < 0x20 for b in raw) * 2 >= len(raw)


#: Strings up to this length have their analyses cached: a run repeats the same values often.
CACHED_CHARS = 1024


_SURROGATE = re.compile(f"[{chr(0xD800)}-{chr(0xDFFF)}]")


def scannable(text: str) -> str:
    """``text`` with each lone surrogate (no UTF-8 form, so RE2 cannot read it) replaced by
    U+FFFD, one character for one: a ``\\ud800`` escape the decoder undid, or a tool's output,
    is scanned rather than raising."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def key_shapes(text: str) -> list[tuple[str, str]]:
    """(shape name, matched text) for every credential shape found in ``text``."""
    if len(text) <= CACHED_CHARS:
        return list(_key_shapes_cached(text))
    return _key_shapes(text)


@functools.lru_cache(maxsize=4096)
def _key_shapes_cached(text: str) -> tuple[tuple[str, str], ...]:
    return tuple(_key_shapes(text))


def _key_shapes(text: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    text = scannable(text)
    for name, pattern in KEY_SHAPES:
        for match in pattern.finditer(text):
            found.append((name, match.group(match.lastindex or 0)))
    return found


def secret_assignments(text: str) -> list[str]:
    """The values of lines that assign something named like a secret (``DB_PASSWORD=...``)."""
    return [m.group(2) for m in _SECRET_ASSIGNMENT.finditer(scannable(text))]


def high_entropy_tokens(text: str, *, min_len: int = 20, min_bits: float = 3.5) -> list[str]:
    """Token-like runs long and random enough to be keys, excluding host names and words."""
    out = []
    for run in _TOKEN_RUN.findall(text):
        if len(run) < min_len or entropy(run) < min_bits:
            continue
        digits = any(c.isdigit() for c in run)
        cases = any(c.isupper() for c in run) and any(c.islower() for c in run)
        if not (digits or (cases and any(c in "+/_" for c in run))):
            continue  # host names, paths and long words are not secrets
        out.append(run)
    return out
