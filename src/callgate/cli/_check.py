"""``callgate check``: judge a recorded run against a policy's behavioral statements.

A trace is a JSONL file whose lines are typed events (``action``, ``args``, ``status``,
``output``, ``taint``) or raw tool calls (``tool``, ``parameters``, … as ``callgate decide``
reads them, plus their recorded ``status`` and ``output``), abstracted to typed events and
numbered from 1; or a run recorded in an audit log (``--db FILE --run ID``), rebuilt from its
decisions and results. Each witness event is reported with the trace line (or audit sequence
number) it came from.

Judging a trace file needs the policy (through the user's policy cache), the language and the
abstraction, not the kernel: the kernel, the audit store and the schema's models beyond the
policy's are imported only to read a run from an audit log.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from callgate._errors import CallgateError, Problem, TraceError
from callgate._model import Event, ToolCall
from callgate.policy._cache import PolicyCache
from callgate.policy._loader import load_policy
from callgate.temporal import BehaviorSet, Violation, compile_behavior

if TYPE_CHECKING:
    from callgate.policy._schema import Policy


def behavior_of(path: str) -> tuple[Policy, BehaviorSet]:
    """A policy file's own statements, compiled with their places in the file."""
    loaded = load_policy(path, cache=PolicyCache.default())

    def locate(i: int) -> tuple[str, str, int, int] | None:
        span = loaded.raw_span(("behavior", i, "rule"))
        return None if span is None else (loaded.source, *span)

    return loaded.policy, compile_behavior(loaded.policy.behavior, locate=locate)


def trace_events(path: str) -> list[Event]:
    """Events of a JSONL trace: raw tool calls are abstracted (shell commands parsed).

    A line nested deeper than ``MAX_JSON_DEPTH`` is reported with its line like any other
    line that cannot be read (the loaders parse with ``loads_bounded``).
    """
    try:
        from callgate.abstraction import load_raw_trace
    except ImportError:  # without the abstraction extra only typed events are understood
        from callgate.temporal import load_trace

        return load_trace(path)
    return load_raw_trace(path)



def audit_events(db: str, run_id: str, policy: Policy | None) -> list[Event]:
    """Events of a run recorded in an audit log, as the kernel saw them online."""
    from pydantic import ValidationError

    from callgate.abstraction import Abstractor
    from callgate.audit import AuditStore
    from callgate.kernel._behavior import call_args

    if not Path(db).is_file():
        raise TraceError([Problem("audit log does not exist", source=db)])
    with AuditStore.open(db, read_only=True) as store:
        records = store.records(run_id)
    if not records:
        raise TraceError([Problem(f"no run {run_id!r} in the audit log", source=db)])
    results = {r.payload["result"]["call_id"]: r.payload["result"] for r in records
               if r.kind == "result"}
    abstractor, events = Abstractor(), []
    for record in records:
        if record.kind != "decision":
            continue
        try:
            call = ToolCall.model_validate(record.payload["call"])
            verdict = record.payload["decision"]["verdict"]
        except (ValidationError, KeyError, TypeError) as exc:
            # a call the log holds only as a marker (text that was not encodable), or a record
            # of another shape: named, never a traceback
            raise TraceError([Problem(f"run {run_id!r}, event {record.seq}: the recorded call "
                                      f"cannot be read back ({exc})", source=db)]) from exc
        raw: dict[str, Any] = {"tool": call.tool, "tool_class": call.tool_class,
                               "action": call.action, "parameters": call.parameters}
        result = results.get(call.id)
        raw["status"] = "denied" if verdict == "deny" else (result or {}).get("status", "ok")
        if result is not None and result.get("output") is not None:
            out = result["output"]
            raw["output"] = out if isinstance(out, str) else json.dumps(out, default=str)
        extra = call_args(call, policy.tools.get(call.tool) if policy is not None else None)
        for i, ev in enumerate(abstractor.abstract(raw, line=record.seq)):
            events.append(ev if i else _with_args(ev, extra, call))
    return events


def _with_args(ev: Event, extra: dict[str, Any], call: ToolCall) -> Event:
    import dataclasses

    return dataclasses.replace(ev, args={**ev.args, **extra},
                               taint=ev.taint | call.taint_sources())


def report(violations: Sequence[Violation], events: Sequence[Event], *, statements: int,
           as_json: bool) -> str:
    """The text (or JSON) ``callgate check`` prints."""
    line_of = {ev.seq: ev.line for ev in events}
    if as_json:
        return json.dumps({
            "verdict": "unsafe" if violations else "safe",
            "violations": [
                {"statement": v.statement, "events": list(v.events),
                 "lines": [line_of.get(e) for e in v.events], "enforce": v.enforce,
                 "kind": v.kind, "message": v.message}
                for v in violations],
        }, indent=2)
    if not violations:
        return f"safe: {statements} statement(s) hold over {len(events)} event(s)"
    out = [f"unsafe: {len(violations)} of {statements} statement(s) violated"]
    for v in violations:
        where = ", ".join(f"{e} (line {line_of.get(e)})" for e in v.events) or "-"
        label = "undecided" if v.kind == "unknown" else v.enforce
        out.append(f"  {v.statement} [{label}] events {where}: {v.message}")
    return "\n".join(out)


@click.command("check")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False),
              help="Policy file whose behavior section is checked.")
@click.argument("trace", required=False, type=click.Path(dir_okay=False))
@click.option("--db", type=click.Path(dir_okay=False), help="Audit log holding the run.")
@click.option("--run", "run_id", help="Run id in the audit log (with --db).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@click.option("--engine", type=click.Choice(["incremental", "smt"]), default="incremental",
              show_default=True, help="The incremental monitor or the Z3 reference.")
@click.option("--signature", "show_signature", is_flag=True,
              help="Print the vocabulary (actions, argument names, values) the trace exhibits.")
def check_command(policy_path: str | None, trace: str | None, db: str | None,
                  run_id: str | None, as_json: bool, engine: str, show_signature: bool) -> None:
    """Judge a recorded TRACE (or --db/--run) against a policy's behavior statements.

    Exit status: 0 safe, 1 unsafe (an undecided statement counts as unsafe), 2 error (a
    malformed trace, naming each bad line, or an internal error: never a verdict).
    """
    try:
        if (trace is None) == (db is None) or (db is not None and run_id is None):
            raise TraceError([Problem("give a TRACE file, or --db FILE with --run ID", "check")])
        if policy_path is None and not show_signature:
            raise TraceError([Problem("--policy FILE is required to judge a trace", "check")])
        policy, behavior = behavior_of(policy_path) if policy_path else (None, None)
        if db is not None and run_id is not None:
            events = audit_events(db, run_id, policy)
        else:
            assert trace is not None
            events = trace_events(trace)
        if show_signature:
            from callgate.abstraction import format_signature, signature

            click.echo(format_signature(signature(events)))
            if behavior is None:
                return
        assert behavior is not None
        violations = behavior.check_trace(events, engine=engine)  # type: ignore[arg-type]  # click.Choice
    except CallgateError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(2) from exc
    except (RecursionError, ValueError, OSError) as exc:  # no verdict is given on a failure
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        raise click.exceptions.Exit(2) from exc
    click.echo(report(violations, events, statements=len(behavior), as_json=as_json))
    raise click.exceptions.Exit(1 if violations else 0)
