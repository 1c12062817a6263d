"""The deterministic compiler: the common phrasings of a requirement, without any model.

Each phrasing names one or two steps, and each step must name exactly one action of the
signature Σ, with nothing left over: "Validate the output before you hand it off" is
``prec(action = hand_off, action = validate_output)`` when Σ has those two actions, but "never
delete files under /etc" is left to a model, because "under /etc" qualifies the deletion and a
statement without it would forbid every deletion (the over-generalisation a compiler must not
make). A sentence with a condition (``unless``, ``if``, ``except``, ``when``, ``or`` …) is left
to a model for the same reason.

| phrasing (and close paraphrases) | statement |
|---|---|
| X must happen before Y; always X before Y; Y only after X; never Y before X | ``prec(Y, X)`` |
| never X; do not X; X is forbidden | ``abs(X)`` |
| at most N times X; do not X more than N times | ``always`` with ``once`` nested N deep |
| after X, Y must follow; every X must be followed by Y | ``resp(X, Y)`` |
| … within N steps | ``bresp[N](X, Y)`` |
| X requires confirmation; ask the user before X | ``prec(X, C)``, C Σ's confirming action |

Without a confirming action in Σ, "X requires confirmation" becomes a ``require-approval`` rule
on X: the kernel asks a human.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from callgate.compile._signature import Signature

__all__ = ["MAX_COUNT", "Draft", "draft_by_rules", "resolve_action"]

#: The largest N "at most N times" compiles to (a body of N nested ``once``).
MAX_COUNT = 10

_NUMBERS = {"once": 1, "one": 1, "twice": 2, "two": 2, "three": 3, "four": 4, "five": 5,
            "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "thrice": 3}
#: Words that say nothing about which action is meant.
_FILLER = frozenset({
    "a", "an", "the", "any", "all", "every", "each", "its", "it", "it's", "their", "your",
    "you", "we", "they", "this", "that", "these", "those", "step", "steps", "action",
    "actions", "tool", "tools", "call", "calls", "command", "commands", "operation",
    "operations", "function", "functions", "always", "ever",
    "must", "should", "shall", "may", "can", "is", "are", "be", "been",
    "being", "do", "does", "done", "doing", "to", "of", "for", "on", "with", "by", "from",
    "at", "into", "as", "so", "just", "has", "have", "had", "will", "would",
    "please", "user", "agent", "skill", "run", "runs", "running", "invoke", "invoked",
    "use", "used", "using", "perform", "performed", "performing", "execute", "executed",
    "executing", "make", "making", "made", "happen", "happens", "occur", "occurs", "take",
    "place", "called",
})
#: Words that qualify a step (a condition, a scope): a sentence holding one is left to a model.
_QUALIFIERS = re.compile(r"(?i)\b(unless|except|if|when|whenever|where|while|other than|but|"
                         r"or|either|neither|nor|without|instead|otherwise|in case)\b")
#: Words that permit rather than require ("you may deploy before testing" forbids nothing) …
_PERMITS = re.compile(r"(?i)\b(may|can|could|might|allowed|permitted|fine|ok|okay|optional|"
                      r"optionally|free to|feel free)\b")
#: … unless a restriction comes with them ("may only", "may not", "can be done at most …").
_RESTRICTS = re.compile(r"(?i)\b(only|not|never|cannot|can't|at most|no more than|"
                        r"not more than)\b")
#: Verbs that say a step happened, nothing about how ("may be called at most twice").
_NEUTRAL_VERBS = frozenset({"called", "run", "invoked", "used", "executed", "performed",
                            "done", "made", "requested", "triggered"})
#: Endings a word takes without changing what it names ("test", "tests", "testing").
_ENDINGS = ("", "s", "es", "e", "ed", "d", "ing", "er", "ers", "ion", "ions", "ation",
            "ations", "ment", "ments", "al", "y", "ies")
#: Words of the language a name must be quoted to be (``action = "in"``).
_KEYWORDS = frozenset({"and", "or", "not", "in", "once", "eventually", "true", "false", "null",
                       "any", "all", "links", "action", "status", "output", "taint", "from",
                       "has", "contains"})
_CONFIRM_ACTIONS = re.compile(r"(?i)(confirm|approv|ask_user|request_permission|ask_human)")
#: A word that points back at something the sentence named ("read a file before you edit it").
_BACK_REFERENCE = re.compile(r"(?i)\b(it|its|them|they|their|theirs|that|those|this|these|"
                             r"the same|same)\b")


def _tied(sentence: str, first: str, then: str, signature: Signature) -> bool:
    """Whether the sentence points back from one step to the other's object while the two
    actions share an argument: "a user may be banned only after they were warned" means the
    same user, a tie no statement without a variable states (a model is asked instead)."""
    shared = (signature.args.get(first, frozenset()) & signature.args.get(then, frozenset()))
    return bool(shared) and bool(_BACK_REFERENCE.search(sentence))


@dataclass(frozen=True, slots=True)
class Draft:
    """What a phrasing compiled to: a statement, or a ``require-approval`` rule on an action."""

    rule: str | None
    approval_for: str | None = None
    form: str = ""


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _undouble(stem: str) -> str:
    """A stem without a doubled last consonant ("emitt" of "emitted" is "emit")."""
    if len(stem) >= 4 and stem[-1] == stem[-2] and stem[-1] not in "aeiou":
        return stem[:-1]
    return stem


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]


#: Short forms tool names use for words sentences spell out.
_SPELLED = {"pr": ("pull", "request"), "prs": ("pull", "request"), "db": ("database",),
            "repo": ("repository",), "msg": ("message",), "env": ("environment",),
            "dir": ("directory",), "cfg": ("configuration",), "config": ("configuration",),
            "img": ("image",), "doc": ("document",), "docs": ("documentation",),
            "tmp": ("temporary",), "auth": ("authentication",), "ci": ("continuous",)}


def _tokens(action: str) -> list[tuple[str, ...]]:
    """Each token of an action's name with the words it may be spelled out as."""
    return [(t, *_SPELLED.get(t, ())) for t in _words(action)]


def _same(token: str, word: str) -> bool:
    """Whether a token of an action name and a word of a sentence name the same thing: equal
    stems, or one the other with an ending that keeps its meaning (``deploy``, ``deployment``;
    not ``test``, ``testimonials``)."""
    a, b = _undouble(_stem(token)), _undouble(_stem(word))
    if a == b:
        return True
    short, long_ = sorted((a, b), key=len)
    return len(short) >= 3 and long_.startswith(short) and long_[len(short):] in _ENDINGS


def resolve_action(phrase: str, signature: Signature) -> str | None:
    """The one action of Σ that ``phrase`` names with nothing left over, or None (none, two
    equally good, or words that qualify the step)."""
    quoted = re.findall(r"`([^`]+)`", phrase)
    named = [q for q in quoted if q in signature.actions]
    if len(named) == 1:
        rest = re.sub(r"`[^`]+`", " ", phrase)
        # a word beside the name qualifies the step ("`deploy` on Fridays", "twice")
        return str(named[0]) if not [w for w in _words(rest) if w not in _FILLER] else None
    if quoted:
        return None  # a quoted name Σ lacks, or two of them
    content = [w for w in _words(phrase.replace("`", " ")) if w not in _FILLER]
    if not content:
        return None
    best: list[tuple[int, str]] = []
    for action in signature.actions:
        tokens = _tokens(action)
        if not tokens or not all(any(_same(f, w) for t in tokens for f in t) for w in content):
            continue  # a word of the phrase the action's name does not account for
        score = sum(1 for t in tokens if any(_same(f, w) for f in t for w in content))
        if score:
            best.append((score - (len(tokens) - score), action))
    if not best:
        return None
    best.sort(reverse=True)
    if len(best) > 1 and best[0][0] == best[1][0]:
        return None  # ambiguous
    return best[0][1]


def _count(word: str) -> int | None:
    word = word.lower()
    if word.isdigit():
        return int(word)
    return _NUMBERS.get(word)


def _act(name: str) -> str:
    """An action as the language writes it: bare when it is a plain name and no word of the
    language, else quoted with ``\\`` and ``"`` escaped."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name) and name.lower() not in _KEYWORDS:
        return f"action = {name}"
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'action = "{escaped}"'


def _at_most(action: str, n: int) -> str:
    inner = _act(action)
    for _ in range(n):
        inner = f"{_act(action)} and once({inner})"
    return f"always(not ({inner}))"


#: Longest sentence the phrasing rules read.
MAX_RULE_CHARS = 400
_END = r"\s*[.!;]?\s*$"
_MODAL = r"(?:must|should|shall|has to|have to|needs? to)"
_HAPPEN = r"(?:happen|be done|be run|run|occur|come|take place|be called|be performed|" \
          r"be invoked|be executed)"
_STEPS = r"(?:steps?|calls?|events?|actions?|tool calls?)"

Builder = Callable[[re.Match[str], Signature], Draft | None]


def _prec(y: str, x: str) -> Builder:
    def build(m: re.Match[str], sig: Signature) -> Draft | None:
        verb = m.groupdict().get("yv")  # "masks must only be emitted after …": emitted masks
        first = resolve_action(m[x], sig)
        then = resolve_action(f"{m[y]} {verb}" if verb else m[y], sig)
        if first is None or then is None or first == then or _tied(m[0], first, then, sig):
            return None
        return Draft(f"prec({_act(then)}, {_act(first)})", form="prec")
    return build


def _resp(bounded: bool) -> Builder:
    def build(m: re.Match[str], sig: Signature) -> Draft | None:
        trigger, response = resolve_action(m["x"], sig), resolve_action(m["y"], sig)
        if trigger is None or response is None or trigger == response or \
                _tied(m[0], trigger, response, sig):
            return None
        if not bounded:
            return Draft(f"resp({_act(trigger)}, {_act(response)})", form="resp")
        n = _count(m["n"])
        if n is None or not 1 <= n <= 1000:
            return None
        return Draft(f"bresp[{n}]({_act(trigger)}, {_act(response)})", form="bresp")
    return build


def _absent(m: re.Match[str], sig: Signature) -> Draft | None:
    action = resolve_action(m["x"], sig)
    return None if action is None else Draft(f"abs({_act(action)})", form="abs")


def _most(m: re.Match[str], sig: Signature) -> Draft | None:
    groups = m.groupdict()
    phrase = f"{groups['verb']} {m['x']}" if groups.get("verb") else m["x"]
    if groups.get("bv") and groups["bv"].lower() not in _NEUTRAL_VERBS:
        phrase = f"{phrase} {groups['bv']}"  # "may be retried at most twice": retries
    if groups.get("obj"):  # "do not stop more than 3 instances": one call per instance
        phrase = f"{phrase} {groups['obj']}"
    action, n = resolve_action(phrase, sig), _count(m["n"])
    if action is None or n is None or n > MAX_COUNT:
        return None
    if n == 0:
        return Draft(f"abs({_act(action)})", form="abs")
    return Draft(_at_most(action, n), form="at-most")


def _confirm(m: re.Match[str], sig: Signature) -> Draft | None:
    action = resolve_action(m["x"], sig)
    if action is None:
        return None
    confirmers = sorted(a for a in sig.actions if _CONFIRM_ACTIONS.search(a) and a != action)
    if len(confirmers) == 1:
        return Draft(f"prec({_act(action)}, {_act(confirmers[0])})", form="prec")
    if confirmers:
        return None  # which confirmation is meant is not for a rule to guess
    return Draft(None, approval_for=action, form="approval")


#: (pattern on the sentence, builder), tried in order; the first that builds a draft wins.
PHRASINGS: tuple[tuple[re.Pattern[str], Builder], ...] = tuple(
    (re.compile(p, re.I), b) for p, b in (
        # bounded response first: it is a response with a window
        (rf"^(?:after|once)\s+(?:each\s+|every\s+|any\s+)?(?P<x>.+?),\s*(?:you\s+{_MODAL}\s+)?"
         rf"(?P<y>.+?)\s+{_MODAL}\s+(?:follow|come|happen)\s+within\s+(?:the\s+next\s+)?"
         rf"(?P<n>\w+)\s+{_STEPS}{_END}", _resp(True)),
        (rf"^(?:after|once)\s+(?:each\s+|every\s+|any\s+)?(?P<x>.+?),\s*(?:you\s+)?{_MODAL}\s+"
         rf"(?P<y>.+?)\s+within\s+(?:the\s+next\s+)?(?P<n>\w+)\s+{_STEPS}{_END}", _resp(True)),
        (rf"^(?:every|each|any)?\s*(?P<x>.+?)\s+{_MODAL}\s+be\s+followed\s+by\s+(?P<y>.+?)\s+"
         rf"within\s+(?:the\s+next\s+)?(?P<n>\w+)\s+{_STEPS}{_END}", _resp(True)),
        (rf"^(?:after|once)\s+(?:each\s+|every\s+|any\s+)?(?P<x>.+?),\s*(?:you\s+{_MODAL}\s+)?"
         rf"(?P<y>.+?)\s+{_MODAL}\s+(?:always\s+)?(?:follow|come|happen){_END}", _resp(False)),
        (rf"^(?:after|once)\s+(?:each\s+|every\s+|any\s+)?(?P<x>.+?),\s*(?:you\s+)?"
         rf"(?:{_MODAL}\s+)?(?:always\s+)?(?P<y>.+?){_END}", _resp(False)),
        (rf"^(?:every|each|any)?\s*(?P<x>.+?)\s+{_MODAL}\s+(?:always\s+)?be\s+followed\s+by\s+"
         rf"(?P<y>.+?){_END}", _resp(False)),
        # confirmation
        (rf"^(?P<x>.+?)\s+(?:requires|needs|must have|must get)\s+(?:an?\s+)?(?:explicit\s+)?"
         rf"(?:user\s+|human\s+)?(?:confirmation|approval){_END}", _confirm),
        (rf"^(?:always\s+)?(?:ask|get)\s+(?:the\s+user\s+)?(?:for\s+)?(?:explicit\s+)?"
         rf"(?:confirmation|approval)\s+before\s+(?P<x>.+?){_END}", _confirm),
        (rf"^(?:always\s+)?(?:confirm|check)\s+with\s+the\s+user\s+before\s+(?P<x>.+?){_END}",
         _confirm),
        # precedence
        (rf"^(?P<x>.+?)\s+{_MODAL}\s+(?:always\s+)?{_HAPPEN}\s+before\s+(?P<y>.+?){_END}",
         _prec("y", "x")),
        (rf"^(?:always\s+|you\s+{_MODAL}\s+(?:always\s+)?)(?P<x>.+?)\s+before\s+(?P<y>.+?){_END}",
         _prec("y", "x")),
        (rf"^(?:never|do not|don't|you must not|you must never)\s+(?P<y>.+?)\s+"
         rf"(?:before|until)\s+(?:you\s+(?:have\s+)?)?(?P<x>.+?){_END}", _prec("y", "x")),
        (rf"^(?P<y>.+?)\s+(?:may|can|must|should)\s+only\s+(?:be\s+(?P<yv>\w+)\s+|"
         rf"{_HAPPEN}\s+)?after\s+(?P<x>.+?){_END}", _prec("y", "x")),
        (rf"^before\s+(?P<y>.+?),\s*(?:always\s+|you\s+{_MODAL}\s+(?:always\s+)?)?(?P<x>.+?)"
         rf"{_END}", _prec("y", "x")),
        (rf"^only\s+(?P<y>.+?)\s+after\s+(?P<x>.+?){_END}", _prec("y", "x")),
        (rf"^(?P<y>.+?)\s+only\s+after\s+(?P<x>.+?){_END}", _prec("y", "x")),
        (rf"^(?P<y>.+?)\s+(?:requires|needs)\s+(?P<x>.+?)\s+first{_END}", _prec("y", "x")),
        # the bare imperative last: "validate the output before you hand it off"
        (rf"^(?P<x>.+?)\s+before\s+(?:you\s+)?(?P<y>.+?){_END}", _prec("y", "x")),
        # at most N times
        (rf"^(?:do not|don't|never|you must not)\s+(?P<x>.+?)\s+more\s+than\s+(?P<n>\w+)"
         rf"(?:\s+times?|\s+(?P<obj>[a-z]+))?(?:\s+(?:per|in a|in one)\s+run)?{_END}", _most),
        (rf"^(?P<x>.+?)\s+(?:{_MODAL}\s+|may\s+|can\s+)?(?:only\s+)?(?:be\s+(?P<bv>\w+)\s+)?"
         rf"(?:at most|no more than|not more than)\s+(?P<n>\w+)\s+times?"
         rf"(?:\s+(?:per|in a|in one)\s+run)?{_END}", _most),
        (rf"^(?P<verb>\w+)\s+(?:at most|no more than|not more than)\s+(?P<n>\w+)\s+(?P<x>.+?)"
         rf"(?:\s+(?:per|in a|in one)\s+run)?{_END}", _most),
        # never
        (rf"^(?:never|do not|don't|you must not|you must never|you may not|under no "
         rf"circumstances(?:\s+should\s+you)?)\s+(?:ever\s+)?(?P<x>.+?){_END}", _absent),
        (rf"^(?P<x>.+?)\s+(?:is|are)\s+(?:forbidden|prohibited|not allowed|never allowed)"
         rf"{_END}", _absent),
        (rf"^(?P<x>.+?)\s+must\s+never\s+{_HAPPEN}{_END}", _absent),
    ))


def draft_by_rules(sentence: str, signature: Signature) -> Draft | None:
    """The statement (or approval rule) ``sentence`` compiles to by a known phrasing, or None
    for a model to try (no phrasing fits, a step names no single action, or a condition)."""
    if len(sentence) > MAX_RULE_CHARS:
        return None  # no common phrasing is this long; the patterns stay linear in practice
    if _PERMITS.search(sentence) and not _RESTRICTS.search(sentence):
        return None  # a permission ("you may deploy before testing") requires nothing
    if _QUALIFIERS.search(sentence.replace("`", " ")):
        confirming = re.search(r"(?i)without\s+(?:explicit\s+)?(?:user\s+)?(?:confirmation|"
                               r"approval)", sentence)
        if not confirming or _QUALIFIERS.search(sentence[:confirming.start()]
                                                + sentence[confirming.end():]):
            return None
        match = re.match(rf"(?i)^(?:never|do not|don't)\s+(?P<x>.+?)\s+without\s+.*{_END}",
                         sentence)
        return _confirm(match, signature) if match else None
    for pattern, build in PHRASINGS:
        match = pattern.match(sentence)
        if match is not None:
            draft = build(match, signature)
            if draft is not None:
                return draft
    return None
