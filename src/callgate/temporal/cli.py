"""``callgate check``: judge a recorded trace against a policy's behaviour statements.

Prints, per violated statement, its id and the offending events (numbered from 1); ``--json``
prints ``{"verdict": "safe"|"unsafe", "violations": [{"statement": ID, "events": [N, …]}, …]}``
(each violation also carries ``enforce``, ``kind`` and ``message``). Exit status: 0 safe,
1 unsafe (an undecided statement counts as unsafe: fail closed), 2 error.
"""

from __future__ import annotations

import json

import click

from callgate._errors import CallgateError
from callgate._loader import load_policy
from callgate.temporal.behavior import BehaviorSet, Engine, compile_behavior
from callgate.temporal.monitor import Violation
from callgate.temporal.trace import load_trace


def load_behavior(policy_path: str) -> BehaviorSet:
    """Load a policy file and compile its behaviour section, problems placed in the file."""
    loaded = load_policy(policy_path)

    def locate(index: int) -> tuple[str, str, int, int] | None:
        span = loaded.raw_span(("behavior", index, "rule"))
        return None if span is None else (loaded.source, *span)

    return compile_behavior(loaded.policy.behavior, locate=locate)


def render(violations: list[Violation], *, statements: int, events: int, as_json: bool) -> str:
    """The report ``callgate check`` prints."""
    if as_json:
        return json.dumps(
            {
                "verdict": "unsafe" if violations else "safe",
                "violations": [
                    {"statement": v.statement, "events": list(v.events), "enforce": v.enforce,
                     "kind": v.kind, "message": v.message}
                    for v in violations
                ],
            },
            indent=2,
        )
    if not violations:
        return f"safe: {statements} statement(s) hold over {events} event(s)"
    lines = [f"unsafe: {len(violations)} of {statements} statement(s) violated"]
    for v in violations:
        where = ", ".join(str(e) for e in v.events) or "-"
        label = "undecided" if v.kind == "unknown" else v.enforce
        lines.append(f"  {v.statement} [{label}] events {where}: {v.message}")
    return "\n".join(lines)


@click.command("check")
@click.option("--policy", "policy_path", required=True, type=click.Path(dir_okay=False),
              help="Policy file whose behavior section is checked.")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@click.option("--engine", type=click.Choice(["incremental", "smt"]), default="incremental",
              show_default=True, help="Incremental monitor or the Z3 reference.")
def check_command(policy_path: str, trace: str, as_json: bool, engine: Engine) -> None:
    """Judge a recorded TRACE (JSONL typed events) against a policy's behaviour statements."""
    try:
        behavior = load_behavior(policy_path)
        events = load_trace(trace)
        violations = behavior.check_trace(events, engine=engine)
    except CallgateError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(2) from exc
    except (RecursionError, ValueError, OSError) as exc:  # a line nested too deep: no verdict
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        raise click.exceptions.Exit(2) from exc
    click.echo(render(violations, statements=len(behavior), events=len(events), as_json=as_json))
    raise click.exceptions.Exit(1 if violations else 0)
