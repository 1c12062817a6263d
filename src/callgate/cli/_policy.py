"""``callgate policy``: work with policy files."""

from __future__ import annotations

import click

from callgate.cli._common import load_cli_policy


@click.group()
def policy() -> None:
    """Work with policy files."""


@policy.command("lint")
@click.argument("file", type=click.Path(dir_okay=False))
def policy_lint(file: str) -> None:
    """Load a policy, report errors (exit 2) and risky patterns (as warnings)."""
    from callgate.policy._lint import lint_policy

    loaded = load_cli_policy(file, None)
    warnings = lint_policy(loaded.policy)
    for warning in warnings:
        click.echo(f"warning: {warning}")
    p = loaded.policy
    grants = len(p.principal.capabilities) if p.principal else 0
    click.echo(f"ok: {file}: {grants} capabilities, {len(p.rules)} rules, {len(p.tools)} tools, "
               f"{len(p.behavior)} behavior statements, {len(warnings)} warnings")


