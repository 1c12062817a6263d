"""``callgate run``: a scripted agent. Tool calls from stdin, each decided and executed for real.

Calls are JSON lines in the format of ``callgate decide``, all in one run, in order. Each goes
through the kernel (with the content guards of the policy's ``guards:`` section, all on by
default) and, when allowed, through the executor of its class, built from the policy's grants
and its ``executors:`` section. One JSON line is printed per call::

    {"line": 3, "verdict": "deny", "reasons": [...], "status": "denied", "output": null}
    {"line": 4, "verdict": "allow", "reasons": [], "status": "ok", "output": {...}}

``output`` is bounded: when its JSON text is longer than ``MAX_OUTPUT_CHARS`` (4096) it is
replaced by the first 4096 characters of that text and ``"truncated": true`` is added. A call
stopped while running (by the sandbox or an executor's own protection) is a deny with the
executor's reason and whatever output it produced. An allowed call that could not complete
(no executor for its class, a result the audit log could not record) has status ``error``
and no output. A line that is not a call (not UTF-8, not JSON, nested too deep, too long) is
a denied, audited line, and the lines after it run as usual. The exit status is 0 whatever
the verdicts; 2 for a policy that does not load or a state file that cannot be opened.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from callgate._errors import CallgateError
from callgate._model import Reason
from callgate.cli._common import (
    audit_target,
    deadline_option,
    decide_unreadable,
    decision_json,
    load_cli_policy,
    read_json_lines,
    store_option,
)
from callgate.executors._wiring import build_executors
from callgate.kernel._kernel import Kernel
from callgate.policy.presets import preset_names

#: Longest ``output`` printed, in characters of its JSON text.
MAX_OUTPUT_CHARS = 4096


def bounded(output: Any) -> tuple[Any, bool]:
    """``output`` as printed, and whether it was cut to ``MAX_OUTPUT_CHARS``."""
    try:
        text = json.dumps(output, sort_keys=True, default=str)
    except (ValueError, RecursionError) as exc:  # too deep, or a cycle: shown as a note
        return f"<output not printable as JSON: {type(exc).__name__}>", True
    if len(text) <= MAX_OUTPUT_CHARS:
        return output, False
    return text[:MAX_OUTPUT_CHARS], True


def _line(number: int, verdict: str, reasons: list[Any], status: str, output: Any,
          error: str | None) -> str:
    shown, cut = bounded(output)
    out: dict[str, Any] = {"line": number, "verdict": verdict, "reasons": reasons,
                           "status": status, "output": shown}
    if error:
        out["error"] = error
    if cut:
        out["truncated"] = True
    return json.dumps(out, sort_keys=True, default=str)


def run_one(kernel: Kernel, number: int, item: dict[str, Any] | Reason) -> str:
    """Decide and execute one call read from the input; the JSON line to print."""
    if isinstance(item, Reason):
        reasons = decision_json(decide_unreadable(kernel, item))["reasons"]
        return _line(number, "deny", reasons, "denied", None, item.message)
    decision, result = kernel.mediate(item)  # never raises: errors are denies or error results
    reasons = decision_json(decision)["reasons"]
    if decision.verdict != "allow":
        output = result.output if result is not None else None
        return _line(number, "deny", reasons, "denied", output, None)
    assert result is not None
    return _line(number, "allow", reasons, result.status, result.output, result.error)


@click.command("run")
@click.option("--policy", "policy", type=click.Path(dir_okay=False), help="Policy YAML file.")
@click.option("--preset", type=click.Choice(preset_names()),
              help="A shipped preset instead of a file.")
@click.option("--audit", "audit_db", type=click.Path(dir_okay=False), help="SQLite audit log.")
@store_option
@click.option("--state", "state", type=click.Path(dir_okay=False),
              help="SQLite file where the guards keep fingerprints across runs.")
@click.option("--working-dir", type=click.Path(file_okay=False), default=None,
              help="Working directory of the run (default: the policy's, then the current).")
@deadline_option
def run_command(policy: str | None, preset: str | None, audit_db: str | None,
                store_url: str | None,
                state: str | None, working_dir: str | None, deadline: float) -> None:
    """Execute tool calls read as JSON lines on stdin through the kernel and its executors."""
    loaded = load_cli_policy(policy, preset)
    wd = os.path.realpath(working_dir or loaded.policy.working_dir or os.getcwd())
    try:
        executors = build_executors(loaded.policy, working_dir=wd)
        kernel = Kernel(loaded, audit=audit_target(audit_db, store_url), working_dir=wd,
                        guard_state=state,
                        decision_deadline_s=deadline)
    except CallgateError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    with kernel:
        for key, executor in executors.items():
            kernel.register_executor(key, executor)
        for number, item in read_json_lines(sys.stdin.buffer):
            click.echo(run_one(kernel, number, item))
