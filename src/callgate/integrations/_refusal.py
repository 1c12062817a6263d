"""What a model reads when a call is refused: one wording for every integration.

The decision's reason ids and messages, the witness of a broken statement with its events
named, and what to do next. Integrations hand it the names of the run's events they know.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from callgate._model import Decision

__all__ = ["reason_line", "refusal_text"]


def refusal_text(decision: Decision, tool: str, names: Mapping[int, str], *,
                 ran: str = "", notes: Sequence[str] = ()) -> str:
    """The refusal of ``decision`` on a call to ``tool`` as lines of text; ``ran`` ends the
    first line (", it was not run"), ``notes`` follow it."""
    verdict = "requires approval for" if decision.verdict == "require-approval" else "denied"
    lines = [f"callgate {verdict} the call to {tool}{ran}.", *notes]
    lines += [f"[{r.id}] {r.message}" for r in decision.reasons]
    w = decision.witness
    if w is not None:
        named = ", ".join(f"#{seq} {names.get(seq, 'an earlier event')}" for seq in w.events)
        lines.append(f"witness: statement {w.statement}; events {named or 'none'}"
                     + (f"; {w.detail}" if w.detail else ""))
    lines.append("Do not retry the same call; change the approach or ask the user.")
    return "\n".join(lines)


def reason_line(decision: Decision) -> str:
    """The decision in one line, for hosts that show one (a permission prompt, a hook's
    reason): ``callgate VERDICT: id: message; …`` and the witness's events."""
    text = "; ".join(f"{r.id}: {r.message}" for r in decision.reasons) or decision.verdict
    if decision.witness is not None and decision.witness.events:
        text += f" (witness: events {', '.join(map(str, decision.witness.events))} of the run)"
    return f"callgate {decision.verdict}: {text}"
