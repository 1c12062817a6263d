"""``compile_spec``: a skill's specification to statements over the signature of its run.

The stages, one module each: read the requirement sentences (``_spec``); try the phrasing
rules on each (``_rules``); give what they leave to a model, when there is one (``_draft``);
validate every statement against Σ before it is kept (``_ground``); write the policy a human
reviews (``_output``). Nothing reaches the policy unvalidated, and nothing is dropped silently:
a requirement without a statement is listed with why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from callgate.compile._cache import ResponseCache
from callgate.compile._draft import draft_with_model
from callgate.compile._ground import ground
from callgate.compile._providers import Provider
from callgate.compile._rules import draft_by_rules
from callgate.compile._signature import Signature
from callgate.compile._spec import Requirement, Spec, read_spec

__all__ = ["ApprovalRule", "Compilation", "CompiledStatement", "Unsupported", "compile_spec"]


@dataclass(frozen=True, slots=True)
class CompiledStatement:
    """A kept statement, the requirement sentence it came from, and what wrote it."""

    id: str
    rule: str
    requirement: str
    line: int
    origin: Literal["rule", "model"]


@dataclass(frozen=True, slots=True)
class ApprovalRule:
    """"X requires confirmation" where Σ has no confirming action: a ``require-approval``
    rule on X, which the kernel enforces (``callgate check`` has no approvals to judge)."""

    id: str
    action: str
    requirement: str
    line: int


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A requirement no statement was kept for, and why."""

    requirement: str
    line: int
    why: str


@dataclass(frozen=True)
class Compilation:
    """What a specification compiled to."""

    spec: Spec
    signature: Signature
    statements: tuple[CompiledStatement, ...]
    approvals: tuple[ApprovalRule, ...]
    unsupported: tuple[Unsupported, ...]

    def policy_yaml(self) -> str:
        """The policy file to review (loads unchanged in ``callgate check`` and the kernel)."""
        from callgate.compile._output import policy_yaml

        return policy_yaml(self)

    def summary(self) -> str:
        """Which sentences became which statements, and which could not be compiled and why."""
        from callgate.compile._output import summary

        return summary(self)


def compile_spec(text: str, signature: Signature, *, provider: Provider | None = None,
                 cache: ResponseCache | None = None, source: str = "<spec>") -> Compilation:
    """Compile the requirements of the specification ``text`` into statements over
    ``signature``: phrasing rules first, then ``provider`` (a model) for the rest when given."""
    spec = read_spec(text, source)
    ids = _Ids()
    statements: list[CompiledStatement] = []
    approvals: list[ApprovalRule] = []
    left: list[Requirement] = []
    refused: dict[str, str] = {}  # why a phrasing rule's own statement was not kept
    for requirement in spec.requirements:
        draft = draft_by_rules(requirement.text, signature)
        problems = ground(draft.rule, signature)[1] if draft and draft.rule else []
        if draft is None:
            left.append(requirement)
        elif draft.rule is not None and not problems:
            statements.append(CompiledStatement(ids.make(requirement.text), draft.rule,
                                                requirement.text, requirement.line, "rule"))
        elif draft.approval_for is not None:
            approvals.append(ApprovalRule(ids.make(requirement.text), draft.approval_for,
                                          requirement.text, requirement.line))
        else:  # the phrasing fit, yet its statement is refused: say so, let a model try
            refused[requirement.text] = f"a phrasing rule gave {draft.rule}, refused: " + \
                "; ".join(problems)
            left.append(requirement)
    unsupported: list[Unsupported] = []
    if provider is None:
        unsupported = [Unsupported(r.text, r.line, refused.get(r.text, _NO_RULE)) for r in left]
    else:
        for drafted in draft_with_model(left, signature, provider, spec_sha256=spec.sha256,
                                        cache=cache):
            r = drafted.requirement
            if not drafted.rules:
                unsupported.append(Unsupported(r.text, r.line, drafted.why_not or "no statement"))
            for index, rule in enumerate(drafted.rules):
                statements.append(CompiledStatement(
                    ids.make(r.text, index if len(drafted.rules) > 1 else None), rule, r.text,
                    r.line, "model"))
    order = {r.text: i for i, r in enumerate(spec.requirements)}
    statements.sort(key=lambda s: (order.get(s.requirement, 0), s.id))
    return Compilation(spec, signature, tuple(statements), tuple(approvals), tuple(unsupported))


_NO_RULE = "no phrasing rule fits it (a model may: give --model PROVIDER:MODEL)"


class _Ids:
    """Statement ids from their sentences (``r3-validate-the-output``), unique in a policy."""

    def __init__(self) -> None:
        self._count = 0
        self._taken: set[str] = set()

    def make(self, sentence: str, part: int | None = None) -> str:
        if part is None or part == 0:
            self._count += 1
        words = re.findall(r"[a-z0-9]+", sentence.lower())[:5]
        base = f"r{self._count}" + (f"{chr(ord('a') + part)}" if part is not None else "")
        found = "-".join([base, *words])[:48].rstrip("-")
        while found in self._taken:
            found += "-x"
        self._taken.add(found)
        return found
