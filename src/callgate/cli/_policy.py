"""``callgate policy``: work with policy files."""

from __future__ import annotations

import sys

import click

from callgate._errors import CallgateError, PolicyError
from callgate.cli._common import fail, load_cli_policy


@click.group()
def policy() -> None:
    """Work with policy files."""


@policy.command("lint")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--strict", is_flag=True, help="Fail (exit 1) when there is any warning.")
def policy_lint(file: str, strict: bool) -> None:
    """Load a policy, report errors (exit 2), risky patterns and dead rules (as warnings)."""
    from callgate.policy._lint import dead_rules, lint_policy

    loaded = load_cli_policy(file, None)
    warnings = [*(str(p) for p in dead_rules(loaded)), *lint_policy(loaded.policy)]
    for warning in warnings:
        click.echo(f"warning: {warning}")
    p = loaded.policy
    grants = len(p.principal.capabilities) if p.principal else 0
    click.echo(f"ok: {file}: {grants} capabilities, {len(p.rules)} rules, {len(p.tools)} tools, "
               f"{len(p.behavior)} behavior statements, {len(warnings)} warnings")
    if strict and warnings:
        sys.exit(1)


@policy.command("test")
@click.argument("policy_file", metavar="[POLICY]", required=False,
                type=click.Path(dir_okay=False))
@click.argument("tests_file", metavar="[TESTS]", required=False, type=click.Path(dir_okay=False))
@click.option("--generate", is_flag=True,
              help="Write cases pinning a recorded run (--audit DB --run ID) instead; needs no "
                   "POLICY (the run's own decisions are pinned).")
@click.option("--audit", "audit_db", type=click.Path(dir_okay=False),
              help="The audit log to generate from (a file, or a postgresql:// store URL); it "
                   "must verify.")
@click.option("--run", "run_id", help="The run to generate from.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Where --generate writes (default: stdout).")
def policy_test(policy_file: str | None, tests_file: str | None, generate: bool,
                audit_db: str | None, run_id: str | None, output: str | None) -> None:
    """Run the table-driven cases of TESTS against POLICY (exit 1 if any fails, 2 on bad input).

    With --generate, write cases pinning what run ID of the audit log DB decided instead.
    """
    if generate:
        _generate(audit_db, run_id, output, tests_file)
        return
    if policy_file is None or tests_file is None:
        fail("give POLICY and TESTS, the test file to run (or --generate --audit DB --run ID)")
    loaded = load_cli_policy(policy_file, None)
    from callgate.policytest import load_tests, render, run_tests

    try:
        tests = load_tests(tests_file)
        outcomes = run_tests(loaded, tests)
    except PolicyError as exc:
        fail(f"test file error:\n{exc}")
    except CallgateError as exc:
        fail(f"error: {exc}")
    failed = [o for o in outcomes if not o.passed]
    for outcome in failed:
        click.echo(render(outcome))
    click.echo(f"{len(outcomes) - len(failed)} passed, {len(failed)} failed: {tests_file} "
               f"against {policy_file}")
    if failed:
        sys.exit(1)


def _generate(audit_db: str | None, run_id: str | None, output: str | None,
              tests_file: str | None) -> None:
    if audit_db is None or run_id is None:
        fail("--generate needs --audit DB and --run ID")
    if tests_file is not None:
        fail("--generate writes to -o FILE (or stdout), not to TESTS")
    from callgate.policytest import generate_tests

    try:
        generated = generate_tests(audit_db, run_id)
    except CallgateError as exc:
        fail(f"error: {exc}")
    for why in generated.skipped:
        click.echo(f"skipped: {why}", err=True)
    if output is None:
        click.echo(generated.text, nl=False)
        return
    try:
        with open(output, "w", encoding="utf-8") as out:
            out.write(generated.text)
    except OSError as exc:
        fail(f"error: cannot write {output}: {exc.strerror or exc}")
    click.echo(f"wrote {generated.steps} steps of run {run_id} to {output}", err=True)
