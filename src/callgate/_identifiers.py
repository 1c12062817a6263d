"""Identifiers inside text: e-mail addresses, file names, URLs and host names, IBANs, phones.

One definition serves the trace abstraction (a value's provenance is traced identifier by
identifier, so an address quoted inside a message body is found where it first appeared) and the
language (two spellings of one identifier compare equal). Each identifier has one normal form:

* an e-mail address in lower case;
* a file name (a name with a known document, data or code ending: ``report.docx``) in lower
  case;
* a URL or host name without its scheme, ``www.`` kept, host in lower case, path as written
  without a trailing ``/`` (``HTTPS://Example.com/a/`` → ``example.com/a``);
* an IBAN in upper case without spaces;
* a phone number as its digits (a leading ``+`` kept), at least eight of them; a phone number
  is written ``+…``, with its area code in parentheses, or as three-three-four digits, so
  dates and times are never taken for one.

Extraction is bounded: at most ``MAX_IDENTIFIERS`` per text, and only the first ``MAX_SCAN``
characters are scanned.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import urlsplit

__all__ = ["MAX_IDENTIFIERS", "URL_AUTHORITY", "authority_hostname", "identifiers",
           "may_be_identifier", "normal_identifier"]

#: Identifiers taken from one text; the rest are not traced.
MAX_IDENTIFIERS = 64
#: Characters of a text scanned for identifiers.
MAX_SCAN = 262_144
#: ``scheme://authority`` at the start of a URL, the authority up to 240 characters: all that a
#: URL's scheme and host depend on (``urlsplit`` ends the authority at the first ``/``, ``?`` or
#: ``#``), so the host check and the abstraction parse a host once for all the URLs below it.
URL_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]{0,240}(?=[/?#]|\Z)")


@functools.lru_cache(maxsize=4096)
def authority_hostname(authority: str) -> str | None:
    """The host ``urlsplit`` reads in a ``scheme://authority`` prefix (a ``URL_AUTHORITY``
    match): the host of every URL below it, parsed once. Raises ``ValueError`` where
    ``urlsplit`` does (a failure is not remembered)."""
    return urlsplit(authority).hostname

_EMAIL = r"[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})\.)+[A-Za-z]{2,24}"
_URL = rf"(?:[A-Za-z][A-Za-z0-9+.-]*://)?{_HOST}(?::[0-9]{{1,5}})?(?:/[^\s'\"<>()\[\]{{}}]*)?"
_IBAN = r"[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}"
# international (+…), area code in parentheses, or three-three-four digits: not a date or time
_PHONE = (r"(?:\+[0-9][0-9 ().-]{6,18}[0-9]|\([0-9]{2,4}\)[0-9 .-]{6,14}[0-9]"
          r"|[0-9]{3}[-. ][0-9]{3}[-. ][0-9]{4})")
#: File-name endings that look like top-level domains but name files.
_FILE_ENDINGS = frozenset({"txt", "md", "pdf", "doc", "docx", "csv", "json", "yaml", "yml",
                           "py", "js", "ts", "sh", "xls", "xlsx", "ppt", "pptx", "png", "jpg",
                           "jpeg", "gif", "zip", "gz", "tar", "log", "html", "htm", "xml"})
_FILE = (r"[A-Za-z0-9][A-Za-z0-9_.-]*\.(?:"
         + "|".join(sorted(_FILE_ENDINGS, key=len, reverse=True)) + r")")


@functools.cache
def _patterns() -> tuple[re.Pattern[str], dict[str, re.Pattern[str]]]:
    """The finder of every kind and each kind's whole-text pattern, compiled on first use (a
    process that reads no identifier, a single decision, never pays for them)."""
    find = re.compile(
        rf"(?P<email>(?<![\w.%+-]){_EMAIL})|(?P<iban>\b{_IBAN}\b)"
        rf"|(?P<file>(?<![\w@./-])(?i:{_FILE})(?![\w/-]|\.\w))|(?P<url>(?<![\w@.-]){_URL})"
        rf"|(?P<phone>(?<![\w+]){_PHONE}(?!\w))")
    whole = {
        "email": re.compile(_EMAIL),
        "file": re.compile(_FILE, re.IGNORECASE),
        "url": re.compile(_URL),
        "iban": re.compile(_IBAN),
        "phone": re.compile(_PHONE),
    }
    return find, whole


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SENTENCE_WORD = re.compile(r"[A-Z][a-z]+")
def _normal(kind: str, text: str) -> str | None:
    if kind in ("email", "file"):
        return text.lower()
    if kind == "iban":
        return text.replace(" ", "").upper()
    if kind == "phone":
        digits = re.sub(r"[^0-9]", "", text)
        if len(digits) < 8:
            return None
        return ("+" if text.startswith("+") else "") + digits
    rest = _SCHEME.sub("", text).rstrip(".,;:!?")
    host, slash, path = rest.partition("/")
    if host.rsplit(".", 1)[-1].lower() in _FILE_ENDINGS and not _SCHEME.match(text):
        return None  # report.pdf is a file name, not a host
    path = path.rstrip("/")
    return host.lower() + (slash + path if path else "")


def identifiers(text: str) -> list[str]:
    """The identifiers in ``text`` in their normal forms, in order, without repeats."""
    found: dict[str, None] = {}
    for match in _patterns()[0].finditer(text, 0, min(len(text), MAX_SCAN)):
        kind = match.lastgroup
        assert kind is not None
        for spelling in _spellings(kind, match.group()):
            normal = _normal(kind, spelling)
            if normal:
                found.setdefault(normal, None)
        if len(found) >= MAX_IDENTIFIERS:
            break
    return list(found)


def _spellings(kind: str, text: str) -> list[str]:
    """The match, and for a host whose last label is a capitalised word ("www.x.com.They",
    a sentence run on without a space), the host without that word too."""
    if kind != "url" or "/" in text:
        return [text]
    labels = text.split(".")
    if len(labels) >= 3 and _SENTENCE_WORD.fullmatch(labels[-1]):
        return [text, ".".join(labels[:-1])]
    return [text]


def may_be_identifier(text: str) -> bool:
    """False only when no kind can match the whole of ``text``: an e-mail address has an
    ``@``, a file name and a host a ``.``, an IBAN and a phone number digits. (Most words a
    statement compares with, ``http`` or ``post``, are then decided without the patterns.)"""
    return "@" in text or "." in text or any(c.isdigit() for c in text)


def normal_identifier(text: str) -> str | None:
    """The normal form of ``text`` when the whole of it (spaces around aside) is one
    identifier, else None."""
    stripped = text.strip()
    if not stripped or len(stripped) > 2048 or not may_be_identifier(stripped):
        return None
    for kind, pattern in _patterns()[1].items():
        if pattern.fullmatch(stripped):
            return _normal(kind, stripped)
    return None
