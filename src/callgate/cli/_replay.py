"""``callgate replay``: a recorded run through a fresh kernel, the same decisions or a diff.

``--audit DB --run ID`` replays a run of an audit log (verified first) under its recorded
policy, or under ``--policy FILE`` / ``--preset NAME`` (the what-if). ``TRACE.jsonl`` replays a
trace file (the lines ``callgate check`` reads) under ``--policy`` / ``--preset``: a line with
``status: "denied"`` was denied then, any other call was allowed.

Exit status: 0 every decision is the same, 1 something changed, 2 bad input (an unknown run, a
log that does not verify, a run recorded without what replay needs, a policy that does not load).
"""

from __future__ import annotations

import json

import click

from callgate._errors import CallgateError
from callgate.cli._common import audit_target, fail, load_cli_policy, preset_option, store_option


@click.command("replay")
@click.argument("trace", required=False, type=click.Path(dir_okay=False))
@click.option("--audit", "db", type=click.Path(dir_okay=False),
              help="Audit log holding the run.")
@store_option
@click.option("--run", "run_id", help="Run id in the audit log (with --audit).")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False),
              help="What-if: replay under this policy file instead of the recorded one.")
@preset_option
@click.option("--no-anchor", is_flag=True,
              help="Verify the log without its anchor (a log written with checkpoints off).")
@click.option("--public-key", "public_key_path", type=click.Path(dir_okay=False, exists=True),
              help="Verify the log's checkpoints with this Ed25519 public key (kept apart from "
                   "the log; default: the one beside it).")
@click.option("--anchor", "anchor_path", type=click.Path(dir_okay=False, exists=True),
              help="Verify the log against this anchor file (default: the one beside it).")
@click.option("--expect-policy", "expected", type=click.Path(dir_okay=False, exists=True),
              help="Exit 1 unless the run was recorded under this policy file.")
@click.option("--verbose", "-v", is_flag=True, help="List every call with its decision.")
@click.option("--json", "as_json", is_flag=True, help="Print the changes as JSON.")
def replay_command(trace: str | None, db: str | None, store_url: str | None,
                   run_id: str | None,
                   policy_path: str | None, preset: str | None, no_anchor: bool,
                   public_key_path: str | None, anchor_path: str | None,
                   expected: str | None, verbose: bool, as_json: bool) -> None:
    """Replay a recorded run (--audit DB --run ID, or a TRACE file) and diff its decisions.

    --store URL reads the run from a PostgreSQL audit store instead of --audit DB.

    Exit status: 0 every decision is the same, 1 a decision changed, 2 bad input.
    """
    from callgate.replay import ReplayError, read_recording, render, replay
    from callgate.replay._trace import trace_recording

    db = audit_target(db, store_url, name="--audit DB")
    if (trace is None) == (db is None) or (db is not None and run_id is None):
        fail("give --audit DB with --run ID, or a TRACE file")
    other = None
    name = None
    if policy_path is not None or preset is not None:
        other = load_cli_policy(policy_path, preset).policy
        name = policy_path or f"preset {preset}"
    elif trace is not None:
        fail("a trace file records no policy: give --policy FILE or --preset NAME")
    try:
        if db is not None:
            assert run_id is not None
            key = None
            if public_key_path is not None:
                from callgate.audit._keys import read_public_key

                key = read_public_key(public_key_path)
            recording = read_recording(db, run_id, require_anchor=not no_anchor,
                                       public_key=key, anchor_path=anchor_path)
        else:
            assert trace is not None and other is not None
            recording = trace_recording(trace, other)
        outcome = replay(recording, other)
    except ReplayError as exc:
        fail(f"error: {exc}")
    except CallgateError as exc:
        fail(f"error: {exc}")
    mismatch = _policy_mismatch(recording.policy_sha256, expected)
    if as_json:
        click.echo(json.dumps({
            "run_id": outcome.run_id, "recorded_policy": recording.policy.name,
            "recorded_policy_sha256": recording.policy_sha256,
            "policy_as_expected": None if expected is None else mismatch is None,
            "calls": outcome.calls, "identical": outcome.identical,
            "changes": [{"call": c.index, "call_id": c.call_id, "label": c.label,
                         "differ": c.fields,
                         "before": c.before.model_dump(mode="json"),
                         "after": c.after.model_dump(mode="json")} for c in outcome.changes],
            "violations_before": outcome.violations_before,
            "violations_after": outcome.violations_after}, indent=2))
    else:
        if db is not None:
            click.echo(f"recorded under policy {recording.policy.name!r} "
                       f"(sha256 {recording.policy_sha256[:16]}…)")
        click.echo(render(outcome, what_if=name, verbose=verbose))
        if mismatch is not None:
            click.echo(mismatch)
    raise click.exceptions.Exit(0 if outcome.identical and mismatch is None else 1)


def _policy_mismatch(recorded_sha256: str, expected: str | None) -> str | None:
    """Why the run was not recorded under the ``expected`` policy file, or None."""
    if expected is None:
        return None
    from callgate.kernel._recording import policy_digest
    from callgate.policy._loader import load_policy

    try:
        wanted = policy_digest(load_policy(expected).policy)
    except CallgateError as exc:
        fail(f"error: {exc}")
    if wanted == recorded_sha256:
        return None
    return (f"POLICY DIFFERS: the run was recorded under {recorded_sha256[:16]}…, not under "
            f"{expected} ({wanted[:16]}…)")
