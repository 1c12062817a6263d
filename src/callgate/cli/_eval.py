"""``callgate eval agentdojo``: measure detection on AgentDojo's published runs."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

import click

from callgate._errors import CallgateError


@click.group("eval")
def eval_group() -> None:
    """Measure a monitor's detection on recorded agent runs."""


@eval_group.command("agentdojo")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--pack", default=None, help="A policy set shipped with callgate (agentdojo).")
@click.option("--policy-dir", type=click.Path(file_okay=False),
              help="A folder with one policy per suite (SUITE.yaml).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False),
              help="Write the results as JSON here.")
@click.option("--report", type=click.Path(file_okay=False),
              help="Write report.md, flagged.md and PNG plots in this folder.")
@click.option("--engine", type=click.Choice(["incremental", "smt"]), default="incremental",
              show_default=True, help="The engine that judges the statements.")
def agentdojo_command(files: tuple[str, ...], pack: str | None, policy_dir: str | None,
                      json_out: str | None, report: str | None, engine: str) -> None:
    """Judge AgentDojo run FILES (.jsonl or .jsonl.gz) with one policy per suite and score
    the verdicts against the runs' labels."""
    import importlib.util

    from callgate.evaluation._evaluate import evaluate_agentdojo, policies_from_dir
    from callgate.evaluation._report import display_names, write_json, write_report
    from callgate.policy.packs import load_policy_set

    if pack is not None and policy_dir is not None:
        raise click.UsageError("give --pack or --policy-dir, not both")
    if report and importlib.util.find_spec("matplotlib") is None:
        click.echo("error: --report draws its plots with matplotlib: "
                   "pip install 'callgate[eval]'", err=True)
        sys.exit(2)
    started = time.perf_counter()
    try:
        policies = policies_from_dir(policy_dir) if policy_dir else \
            load_policy_set(pack or "agentdojo")
        result = evaluate_agentdojo(files, policies, engine=engine)  # type: ignore[arg-type]  # click.Choice gives one of the engines
    except CallgateError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    meta = {"policies": policy_dir or f"pack {pack or 'agentdojo'}", "engine": engine,
            "files": list(display_names(files).values())}
    if json_out:
        write_json(json_out, result.tally, result.scored, meta)
    if report:
        for path in write_report(report, result.tally, result.scored, meta):
            click.echo(f"wrote {path}", err=True)
    _summary(result.tally, time.perf_counter() - started)


def _summary(tally: Mapping[str, Any], seconds: float) -> None:
    from callgate.evaluation._report import display_names

    shown = display_names(tally["files"])
    rows: dict[str, Mapping[str, Any]] = {
        "all": tally["overall"], **{shown[k]: v for k, v in tally["files"].items()}}
    click.echo(f"{'file':<44} {'runs':>5} {'tp':>4} {'fp':>4} {'fn':>4} {'tn':>4} "
               f"{'prec':>6} {'recall':>6} {'f1':>6} {'no-atk':>6}")
    for name, r in rows.items():
        click.echo(f"{name:<44} {r['runs']:>5} {r['tp']:>4} {r['fp']:>4} {r['fn']:>4} "
                   f"{r['tn']:>4} {r['precision']:>6.3f} {r['recall']:>6.3f} {r['f1']:>6.3f} "
                   f"{r['no_attack_flagged_rate']:>6.3f}")
    click.echo(f"judged in {seconds:.1f} s", err=True)
