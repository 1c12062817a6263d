"""The comparison as text a reviewer reads: a summary line, then each changed call with both
sides (verdict, reason ids and messages, witness)."""

from __future__ import annotations

from callgate._model import Decision
from callgate.replay._engine import Change, ReplayOutcome

__all__ = ["render"]


def _side(decision: Decision) -> str:
    ids = ", ".join(r.id for r in decision.reasons) or "no reason"
    return f"{decision.verdict} [{ids}]"


def _why(tag: str, decision: Decision) -> list[str]:
    lines = [f"      {tag} {r.id}: {r.message}" for r in decision.reasons]
    w = decision.witness
    if w is not None:
        lines.append(f"      {tag} witness: {w.statement} at events "
                     f"{', '.join(map(str, w.events)) or '-'}"
                     + (f" ({w.detail})" if w.detail else ""))
    return lines


def _change(change: Change) -> list[str]:
    return [f"  call {change.index} {change.label} ({change.call_id}): "
            f"{_side(change.before)} -> {_side(change.after)}  "
            f"[{', '.join(change.fields)} differ]",
            *_why("before", change.before), *_why("after ", change.after)]


def render(outcome: ReplayOutcome, *, what_if: str | None = None, verbose: bool = False) -> str:
    """The outcome as text; ``what_if`` names the other policy, ``verbose`` lists every call."""
    under = f"under {what_if}" if what_if else "under its recorded policy"
    lines = []
    if verbose:
        changed = {c.index for c in outcome.changes}
        for step, after in outcome.compared:
            mark = "CHANGED" if step.index in changed else "same"
            lines.append(f"  {step.index:>4} {mark:<7} {step.label}: {_side(after)}")
    if outcome.identical:
        lines.append(f"run {outcome.run_id}: {outcome.calls} calls replayed {under}: every "
                     f"decision is the same")
        return "\n".join(lines)
    lines.append(f"run {outcome.run_id}: {outcome.calls} calls replayed {under}: "
                 f"{len(outcome.changes)} decision(s) changed")
    for change in outcome.changes:
        lines.extend(_change(change))
    if outcome.changes and what_if is None:
        first = outcome.changes[0]
        lines.append(f"first difference at call {first.index}; later calls follow a history "
                     f"that already differs")
    then, now = outcome.violations_before, outcome.violations_after
    if then is not None and then != now:
        lines.append(f"  run end: broken statements {then or '[]'} -> {now or '[]'}")
    return "\n".join(lines)
