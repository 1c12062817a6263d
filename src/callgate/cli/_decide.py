"""``callgate decide`` and ``callgate exec``: calls decided, and subprocess tools run, by the
kernel.

Exit codes: 0 done (whatever the verdicts), 2 bad input (a policy that does not load, an
unreadable file); ``exec`` passes the command's exit status through, or 126 when the kernel
denied the call or the sandbox stopped it. A line of input that is not a call (not UTF-8, not
JSON, nested too deep, too long) is one denied, audited decision; the lines after it are decided
as usual.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from callgate._errors import Denied
from callgate._model import Reason
from callgate.cli._common import (
    audit_target,
    deadline_option,
    decide_unreadable,
    decision_json,
    kernel_for,
    load_cli_policy,
    policy_option,
    preset_option,
    read_json_lines,
    store_option,
)


@click.command()
@policy_option
@preset_option
@click.option("--audit", "audit_db", type=click.Path(dir_okay=False), help="SQLite audit log.")
@store_option
@click.option("--working-dir", type=click.Path(file_okay=False), default=None)
@deadline_option
def decide(policy: str | None, preset: str | None, audit_db: str | None,
           store_url: str | None, working_dir: str | None, deadline: float) -> None:
    """Decide tool calls read as JSON lines on stdin (one run, in order)."""
    loaded = load_cli_policy(policy, preset, statements=False)
    kernel = kernel_for(loaded, audit=audit_target(audit_db, store_url),
                        working_dir=working_dir, decision_deadline_s=deadline)
    with kernel:
        for _, item in read_json_lines(sys.stdin.buffer):
            decision = decide_unreadable(kernel, item) if isinstance(item, Reason) else \
                kernel.check(item)
            click.echo(json.dumps(decision_json(decision), sort_keys=True))


@click.command("exec", context_settings={"ignore_unknown_options": True})
@policy_option
@preset_option
@click.option("--tool", required=True, help="The subprocess tool declared under tools:.")
@click.option("--audit", "audit_db", type=click.Path(dir_okay=False), help="SQLite audit log.")
@store_option
@click.option("--backend", type=click.Choice(["auto", "bwrap", "firejail"]), default="auto")
@click.option("--unconfined", is_flag=True,
              help="Run without an OS sandbox when none is usable (warned about on every run).")
@deadline_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(policy: str | None, preset: str | None, tool: str, audit_db: str | None,
          store_url: str | None, backend: str,
          unconfined: bool, deadline: float, command: tuple[str, ...]) -> None:
    """Run COMMAND as a declared subprocess tool, through the kernel and its OS sandbox.

    The tool's output passes through; the exit status is the command's, or 126 when the kernel
    denied the call or the sandbox stopped it.
    """
    from callgate.sandbox import probe_ahead

    probe_ahead(backend)  # type: ignore[arg-type]  # click.Choice; checked while the policy loads
    loaded = load_cli_policy(policy, preset, statements=False)
    kernel = kernel_for(loaded, audit=audit_target(audit_db, store_url),
                        decision_deadline_s=deadline)
    with kernel:
        try:
            result = kernel.run_subprocess(tool, list(command), backend=backend,  # type: ignore[arg-type]  # click.Choice
                                           allow_unconfined=unconfined)
        except Denied as denied:
            if denied.result is not None:
                _pass_through(denied.result.output)
            click.echo(f"callgate: {denied.decision.summary()}", err=True)
            sys.exit(DENIED_EXIT)
    _pass_through(result.output)
    code = result.output.get("exit_code") if isinstance(result.output, dict) else None
    sys.exit(code if isinstance(code, int) else 1)


#: Exit status of ``callgate exec`` when the call was denied or confined.
DENIED_EXIT = 126


def _pass_through(output: Any) -> None:
    if isinstance(output, dict):
        sys.stdout.write(str(output.get("stdout", "")))
        sys.stdout.flush()
        sys.stderr.write(str(output.get("stderr", "")))
        sys.stderr.flush()


