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

from callgate._errors import CompileError
from callgate.policy._loader import parse_policy

if typing.TYPE_CHECKING:
    from callgate.compile._compile import Compilation

__all__ = ["policy_yaml", "summary"]


def _escaped(text: str) -> str:
    """``text`` with every character that is not printable as a YAML escape (``\\u0085``):
    a YAML reader refuses C0 and C1 controls, and reads NEL and U+2028 as line breaks."""
    return "".join(c if c.isprintable() or c in "\n\t" else
                   (f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
                   for c in text)


def _q(text: str) -> str:
    """A YAML double-quoted scalar that reads back as exactly ``text`` (JSON's string syntax
    is YAML's, and YAML's ``\\u``/``\\U`` escapes carry what is not printable)."""
    return _escaped(json.dumps(text, ensure_ascii=False))


def _comment(text: str) -> str:
    """``text`` on one comment line: white space (line breaks included) collapsed, anything
    not printable escaped, so nothing written after ``#`` can start a line of YAML."""
    return _escaped(" ".join(text.split()))


def policy_yaml(compiled: Compilation) -> str:
    """The policy text; raises ``PolicyError`` if it would not load (it always should)."""
    spec = compiled.spec
    source = _comment(spec.source)
    lines = [f"# Compiled by `callgate compile` from {source} (sha256 "
             f"{spec.sha256[:16]}…)",
             f"# over the signature of {_comment(compiled.signature.source)}. Review every "
             f"statement before use:",
             "# each quotes the requirement it came from, as a comment and as its description",
             "# (which a refusal's reason repeats in the audit log)."]
    if compiled.unsupported:
        lines.append("#\n# Not compiled (no statement below for these):")
        lines.extend(f"#   {source}:{u.line} {_comment(repr(u.requirement))}: {_comment(u.why)}"
                     for u in compiled.unsupported)
    lines += [f"name: {_q(spec.name + '-compiled')}", "version: 1"]
    if compiled.statements:
        lines.append("behavior:")
        for s in compiled.statements:
            wrote = "a phrasing rule" if s.origin == "rule" else "a model (validated)"
            lines += [f"  # {source}:{s.line}, by {wrote}: {_comment(s.requirement)}",
                      f"  - id: {_q(s.id)}", f"    description: {_q(s.requirement)}",
                      f"    rule: {_q(s.rule)}"]
    if compiled.approvals:
        lines.append("rules:")
        for a in compiled.approvals:
            lines += [f"  # {source}:{a.line}: {_comment(a.requirement)}",
                      "  # (the signature has no confirming action: the kernel asks a human)",
                      f"  - id: {_q(a.id)}", "    priority: 10",
                      f"    match: {{tool: {_q(a.action)}}}", "    decision: require-approval",
                      f"    reason: {_q(a.requirement)}"]
    text = "\n".join(lines) + "\n"
    _check_reads_back(text, compiled)
    return text


def _check_reads_back(text: str, compiled: Compilation) -> None:
    """Load what is written and compare it with what was validated: the same statements
    (ids, rules, sentences) and approval rules, nothing more. ``CompileError`` otherwise."""
    policy = parse_policy(text, "<compiled policy>").policy
    written = [(b.id, b.rule, b.description) for b in policy.behavior]
    meant = [(s.id, s.rule, s.requirement) for s in compiled.statements]
    rules = [(r.id, r.decision, r.reason) for r in policy.rules]
    approvals = [(a.id, "require-approval", a.requirement) for a in compiled.approvals]
    if written != meant or rules != approvals:
        raise CompileError("the policy written does not read back as the statements "
                           "validated; nothing was written")


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
    source = _comment(spec.source)  # a terminal shows it: no line breaks, no escape sequences
    for r in spec.requirements:
        head = f"{source}:{r.line} {_comment(r.text)}"
        if r.text in by_sentence:
            lines.append(head + "".join(f"\n    -> {_comment(item)}"
                                        for item in by_sentence[r.text]))
        else:
            lines.append(head + f"\n    not compiled: {_comment(why.get(r.text, 'no statement'))}")
    done = len(spec.requirements) - len(compiled.unsupported)
    lines.append(f"{done} of {len(spec.requirements)} requirements compiled: "
                 f"{len(compiled.statements)} statements, {len(compiled.approvals)} approval "
                 f"rules, {len(compiled.unsupported)} not compiled")
    return "\n".join(lines)
