"""A skill's specification as requirement sentences, each with the line it starts on.

A specification is a ``SKILL.md`` (YAML front matter between ``---`` lines, then Markdown), a
README, or plain text. Front matter, headings, code blocks, tables and HTML comments are not
requirements; the rest is split into sentences (a list item is one or more sentences of its
own). A sentence is a *requirement* when it says what must, must not, or may only happen: it
holds a modal or an imperative of obligation (``must``, ``never``, ``do not``, ``only``, ``at
most``, ``requires``, ``always``, ``before``, ``after`` …), it is an instruction (it opens,
after any "If …," or "When …," clause, with a verb: "Leave alone anything tagged keep=true"),
or it is a list item under a heading that announces rules ("Rules", "Requirements",
"Constraints", "Guardrails", "Safety", "Policy"). The others are description ("The camera moves
with the car."), kept out of what is compiled. Erring towards a requirement is deliberate: a
sentence read as one and not compiled is reported, one read as description is not.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from callgate._text import lines_of

__all__ = ["MAX_SPEC_BYTES", "Requirement", "Spec", "read_spec"]

#: Specifications larger than this are refused (a skill's document is a few pages).
MAX_SPEC_BYTES = 512 * 1024
#: Requirements read from one specification, at most.
MAX_REQUIREMENTS = 200

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_TABLE = re.compile(r"^\s*\|")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+")
_BREAK = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(])")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_INLINE = re.compile(r"\*\*|\*")  # emphasis; underscores stay (they spell tool names)
_RULES_HEADING = re.compile(r"(?i)\b(rules?|requirements?|constraints?|guardrails?|safety|"
                            r"polic(?:y|ies)|must|do(?:es)? and don'?ts?|invariants?)\b")
_OBLIGATION = re.compile(
    r"(?i)\b(must|mustn't|shall|never|always|only|requires?|required|at most|no more than|"
    r"not more than|do not|don't|does not|doesn't|cannot|can't|may not|should|should not|"
    r"shouldn't|forbidden|prohibited|not allowed|need(?:s)? to|has to|have to|every|each|"
    r"followed by|confirm(?:ation)?|approv(?:al|e)|before|after|until|within)\b")


#: Words that open a sentence without making it an imperative (the subject or a determiner
#: of one, an auxiliary, a conjunction or preposition); "be" is left out ("Be brief.").
_NOT_IMPERATIVE = frozenset("""
    the a an this that these those it its you your we our they their i he she there here
    what which who whose how why each every any all some most many no none one both either
    and or but so because since as for of in on at by with from to into about
    is are was were been has have had can could will would may might do does did
    not also then first next finally
""".split())  # noqa: SIM905 - a word list reads better as text
_AUXILIARY = frozenset(("is", "are", "was", "were", "has", "have", "had", "can", "could", "will",
                        "would", "may", "might", "do", "does", "did", "must", "should", "shall"))
_CONDITION = re.compile(r"(?i)^(?:if|when|whenever|unless|once|where)\b[^,]{1,200},\s*")


def _imperative(sentence: str) -> bool:
    """Whether ``sentence`` tells the agent what to do ("Leave alone anything tagged keep",
    "If the smoke test fails, roll back"): it opens, after any leading condition, with a
    verb's bare form. Judged from the words alone: the first is not a function word, a plural,
    an adverb or a participle, and the second is not an auxiliary ("Masks are ...")."""
    condition = _CONDITION.match(sentence)
    rest = sentence[condition.end():] if condition else sentence
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", rest.replace("`", " ` "))
    if len(words) < 2 or rest.lstrip().startswith("`"):
        return False
    first, second = words[0], words[1].lower()
    if not condition and not first[0].isupper():
        return False
    first = first.lower()
    if first in _NOT_IMPERATIVE or second in _AUXILIARY:
        return False
    if first.endswith("s") and not first.endswith(("ss", "us", "is")):
        return False  # "Refunds go ...": a plural noun, not a verb
    if first.endswith("ly") and not first.endswith("ply"):
        return False  # "Usually ...", not "Apply ..."
    if first.endswith("ed") and not first.endswith("eed") and len(first) >= 6:
        return False  # "Merged files ...", not "Seed ..." or "Embed ..."
    return not (first.endswith("ing") and len(first) >= 6)  # "Missing ...", not "Bring ..."


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement sentence of a specification and the line it starts on."""

    text: str
    line: int


@dataclass(frozen=True, slots=True)
class Spec:
    """A specification read: its name, the SHA-256 of its text and its requirements."""

    source: str
    name: str
    sha256: str
    requirements: tuple[Requirement, ...]


def read_spec(text: str, source: str = "<spec>") -> Spec:
    """The requirement sentences of ``text`` (a ``SKILL.md``, a README or plain text).

    Raises ``ValueError`` for a specification over ``MAX_SPEC_BYTES`` or with more than
    ``MAX_REQUIREMENTS`` requirements: none is left out unsaid."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise ValueError(f"{source}: a specification is at most {MAX_SPEC_BYTES} bytes")
    lines = lines_of(text)
    name, start = _front_matter(lines)
    sentences: list[Requirement] = []
    for line_no, paragraph, ruled in _paragraphs(lines, start):
        for sentence in _BREAK.split(paragraph):
            cleaned = _clean(sentence)
            if cleaned and (ruled or _OBLIGATION.search(cleaned) or _imperative(cleaned)):
                sentences.append(Requirement(cleaned, line_no))
    if len(sentences) > MAX_REQUIREMENTS:
        raise ValueError(f"{source}: {len(sentences)} requirement sentences, more than the "
                         f"{MAX_REQUIREMENTS} one specification may hold (the one at line "
                         f"{sentences[MAX_REQUIREMENTS].line} is the first over): split it")
    return Spec(source, name or source, hashlib.sha256(text.encode(
        "utf-8", "surrogatepass")).hexdigest(), tuple(sentences))


def _front_matter(lines: list[str]) -> tuple[str, int]:
    """The ``name:`` of the front matter (or ``""``) and the index of the first body line."""
    if not lines or lines[0].strip() != "---":
        return "", 0
    name = ""
    for index in range(1, len(lines)):
        if lines[index].strip() == "---":
            return name, index + 1
        key, _, value = lines[index].partition(":")
        if key.strip() == "name":
            name = value.strip().strip("\"'")
    return "", 0  # no closing line: not front matter


def _paragraphs(lines: list[str], start: int) -> list[tuple[int, str, bool]]:
    """(line number, text, whether it is a list item under a heading announcing rules) of each
    paragraph or list item outside code, headings and tables."""
    out: list[tuple[int, str, bool]] = []
    current: list[str] = []
    first = 0
    fenced = False
    opened = ""  # the fence that opened the code block
    ruled = False  # the last heading announces rules
    is_item = False

    def flush() -> None:
        if current:
            out.append((first, " ".join(current), ruled and is_item))
            current.clear()

    for index in range(start, len(lines)):
        raw = lines[index]
        fence = _FENCE.match(raw)
        if fence and (not fenced or _closes(fence[1], raw, opened)):
            flush()
            fenced = not fenced
            opened = fence[1]
            continue
        if not fenced and _HEADING.match(raw):
            flush()
            ruled = bool(_RULES_HEADING.search(raw))
            continue
        if fenced or _TABLE.match(raw) or not raw.strip():
            flush()
            continue
        item = _ITEM.match(raw)
        if item:
            flush()
            raw = raw[item.end():]
        if not current:
            first = index + 1
            is_item = item is not None
        current.append(raw.strip())
    flush()
    return out


def _closes(fence: str, line: str, opened: str) -> bool:
    """Whether a fence line closes the block ``opened`` began: the same character, at least
    as many of them, and nothing after (CommonMark's rule)."""
    return fence[0] == opened[0] and len(fence) >= len(opened) and \
        not line.strip().lstrip(fence[0])


def _clean(sentence: str) -> str:
    """A sentence without Markdown emphasis, comments and surplus white space."""
    text = _COMMENT.sub(" ", sentence)
    text = _INLINE.sub("", text)
    return " ".join(text.split()).strip()
