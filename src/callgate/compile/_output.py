"""The compiled policy as a file a human reviews, and the summary of what became what.

Each statement carries the sentence it came from twice: as a comment above it (with the line of
the specification and whether a phrasing rule or a model wrote it) and as its ``description``,
which the kernel repeats in the reason of every decision the statement makes, so the audit log
says which requirement a refusal enforced. Requirements that were not compiled are listed at the
top, with why. The text is checked to load as a policy before it is returned.
"""

from __future__ import annotations

import json
import typing

from callgate.policy._loader import parse_policy

if typing.TYPE_CHECKING:
    from callgate.compile._compile import Compilation

__all__ = ["policy_yaml", "summary"]


def _q(text: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is valid YAML)."""
    return json.dumps(text, ensure_ascii=False)


def _comment(text: str) -> str:
    return " ".join(text.split())


def policy_yaml(compiled: Compilation) -> str:
    """The policy text; raises ``PolicyError`` if it would not load (it always should)."""
    spec = compiled.spec
    lines = [f"# Compiled by `callgate compile` from {_comment(spec.source)} (sha256 "
             f"{spec.sha256[:16]}…)",
             f"# over the signature of {_comment(compiled.signature.source)}. Review every "
             f"statement before use:",
             "# each quotes the requirement it came from, as a comment and as its description",
             "# (which a refusal's reason repeats in the audit log)."]
    if compiled.unsupported:
        lines.append("#\n# Not compiled (no statement below for these):")
        lines.extend(f"#   {spec.source}:{u.line} {_comment(u.requirement)!r}: {_comment(u.why)}"
                     for u in compiled.unsupported)
    lines += [f"name: {_q(spec.name + '-compiled')}", "version: 1"]
    if compiled.statements:
        lines.append("behavior:")
        for s in compiled.statements:
            wrote = "a phrasing rule" if s.origin == "rule" else "a model (validated)"
            lines += [f"  # {spec.source}:{s.line}, by {wrote}: {_comment(s.requirement)}",
                      f"  - id: {_q(s.id)}", f"    description: {_q(s.requirement)}",
                      f"    rule: {_q(s.rule)}"]
    if compiled.approvals:
        lines.append("rules:")
        for a in compiled.approvals:
            lines += [f"  # {spec.source}:{a.line}: {_comment(a.requirement)}",
                      "  # (the signature has no confirming action: the kernel asks a human)",
                      f"  - id: {_q(a.id)}", "    priority: 10",
                      f"    match: {{tool: {_q(a.action)}}}", "    decision: require-approval",
                      f"    reason: {_q(a.requirement)}"]
    text = "\n".join(lines) + "\n"
    parse_policy(text, "<compiled>")  # what is written loads
    return text


def summary(compiled: Compilation) -> str:
    """One line per requirement: the statements it became, or why it has none."""
    spec = compiled.spec
    by_sentence: dict[str, list[str]] = {}
    for s in compiled.statements:
        by_sentence.setdefault(s.requirement, []).append(f"{s.id} ({s.origin}): {s.rule}")
    for a in compiled.approvals:
        by_sentence.setdefault(a.requirement, []).append(
            f"{a.id} (rule): require-approval on {a.action}")
    why = {u.requirement: u.why for u in compiled.unsupported}
    lines = []
    for r in spec.requirements:
        head = f"{spec.source}:{r.line} {r.text}"
        if r.text in by_sentence:
            lines.append(head + "".join(f"\n    -> {item}" for item in by_sentence[r.text]))
        else:
            lines.append(head + f"\n    not compiled: {why.get(r.text, 'no statement')}")
    done = len(spec.requirements) - len(compiled.unsupported)
    lines.append(f"{done} of {len(spec.requirements)} requirements compiled: "
                 f"{len(compiled.statements)} statements, {len(compiled.approvals)} approval "
                 f"rules, {len(compiled.unsupported)} not compiled")
    return "\n".join(lines)
