"""``callgate init|doctor|hook claude-code``: the Claude Code integration's commands."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from callgate._errors import CallgateError
from callgate.integrations.claude_code import doctor, install, uninstall


def _targets(directory: str | None, user: bool) -> tuple[Path, Path, Path | None]:
    """(settings file, state directory, project directory or None for a user install)."""
    if user:
        home = Path.home()
        return home / ".claude" / "settings.json", home / ".callgate" / "claude-code", None
    project = Path(directory or os.getcwd()).resolve()
    return project / ".claude" / "settings.json", project / ".callgate", project


def _emit(lines: list[str], warnings: list[str]) -> None:
    for line in lines:
        click.echo(line)
    for warning in warnings:
        click.secho(warning, fg="red", bold=True, err=True)


#: ``--dir``, shared by the commands that act on one project's settings
_project_dir = click.option("--dir", "directory", type=click.Path(file_okay=False),
                            help="The project (default: the current directory).")


@click.group("init")
def init_group() -> None:
    """Install callgate into an agent's settings."""


@init_group.command("claude-code")
@_project_dir
@click.option("--user", is_flag=True, help="Install in ~/.claude/settings.json instead.")
@click.option("--policy", type=click.Path(dir_okay=False, exists=True),
              help="The policy file the hook enforces (default: a copy of the preset).")
@click.option("--preset", default="coding-agent", show_default=True,
              help="The preset copied when no --policy is given.")
@click.option("--store", metavar="URL",
              help="Keep the audit log in this PostgreSQL store (postgresql://…), written into "
                   "the hook's command; keep its password in ~/.pgpass, not in the URL.")
@click.option("--uninstall", "remove", is_flag=True, help="Remove exactly what init added.")
def init_claude_code(directory: str | None, user: bool, policy: str | None, preset: str,
                     store: str | None, remove: bool) -> None:
    """Register callgate's hook for every tool call and session event of Claude Code."""
    settings, state, project = _targets(directory, user)
    try:
        report = uninstall(settings) if remove else install(
            settings, state, project, policy=Path(policy) if policy else None, preset=preset,
            store=store)
    except CallgateError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    _emit(report.lines, report.warnings)


@click.group("doctor")
def doctor_group() -> None:
    """Check that an integration is installed and working."""


@doctor_group.command("claude-code")
@_project_dir
@click.option("--user", is_flag=True, help="Check ~/.claude/settings.json instead.")
def doctor_claude_code(directory: str | None, user: bool) -> None:
    """Check the hook registration, the policy, and an allowed and a denied self-test call."""
    settings, _, _ = _targets(directory, user)
    report = doctor(settings)
    _emit(report.lines, report.warnings)
    click.echo("all checks passed" if report.ok else "some checks failed")
    sys.exit(0 if report.ok else 1)


@click.group("hook")
def hook_group() -> None:
    """Answer an agent's hook events (run by the agent, not by hand)."""


@hook_group.command("claude-code", context_settings={"ignore_unknown_options": True})
@click.option("--policy", help="The policy file new sessions start under.")
@click.option("--state", help="The state directory (default: PROJECT/.callgate).")
@click.option("--dir", "directory", help="The project directory (default: the session's cwd).")
@click.option("--defer-allowed", is_flag=True,
              help="Leave allowed calls to Claude Code's own permission prompts.")
@click.option("--deadline", type=float, help="Seconds to wait for a decision (default 20).")
@click.option("--store", metavar="URL",
              help="Keep the audit log in this PostgreSQL store (default: $CALLGATE_STORE, "
                   "else STATE/audit.db).")
def hook_claude_code(policy: str | None, state: str | None, directory: str | None,
                     defer_allowed: bool, deadline: float | None, store: str | None) -> None:
    """Read one Claude Code hook event on stdin and print callgate's answer."""
    from callgate.integrations.claude_code._client import main

    argv = [f for flag, value in (("--policy", policy), ("--state", state), ("--dir", directory),
                                  ("--deadline", deadline), ("--store", store))
            if value is not None for f in (flag, str(value))]
    sys.exit(main(argv + (["--defer-allowed"] if defer_allowed else [])))
