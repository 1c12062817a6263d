"""Command line: ``callgate manifest generate|verify`` and ``callgate lint-tools``.

Exit codes follow the main CLI: 0 clean, 1 a check failed (a widening, an undeclared use),
2 bad input (a policy that does not load, a module that does not import, a tampered baseline).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from callgate._errors import CallgateError
from callgate.manifest._discover import manifest_of
from callgate.manifest._findings import Finding
from callgate.manifest._lint_tools import lint_module
from callgate.manifest._verify import verify_manifest
from callgate.policy._manifest import Format, is_manifest_file, load_manifest, render


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _format_for(out: str | None, fmt: str | None) -> Format:
    if fmt == "yaml" or (fmt is None and out is not None and out.endswith((".yaml", ".yml"))):
        return "yaml"
    return "json"


def _current(target: str, policy: str | None) -> dict[str, Any]:
    if policy is None and is_manifest_file(target):
        return load_manifest(target)
    return manifest_of(target, policy)


def _report(findings: list[Finding], clean: str) -> None:
    for finding in findings:
        click.echo(str(finding))
    if findings:
        sys.exit(1)
    click.echo(clean, err=True)


@click.group(name="manifest")
def manifest_group() -> None:
    """The permission manifest: what every tool may touch, and checks that it only narrows.

    A TARGET is a policy file (.yaml/.yml), a Python file (.py) or a module name whose
    module-level functions carry a declaration; add --policy FILE to combine a policy file with
    a module's tools.
    """


@manifest_group.command("generate")
@click.argument("target")
@click.option("--policy", "policy", metavar="FILE", help="A policy file to combine with a module.")
@click.option("--out", "out", metavar="FILE", help="Write here instead of standard output.")
@click.option("--format", "fmt", type=click.Choice(["json", "yaml"]),
              help="Output format (default: from --out's extension, else json).")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 if --out does not hold exactly this manifest.")
def generate(target: str, policy: str | None, out: str | None, fmt: str | None,
             check: bool) -> None:
    """Write the manifest of TARGET: deterministic, keys sorted, with its sha256."""
    try:
        text = render(manifest_of(target, policy), _format_for(out, fmt))
    except CallgateError as exc:
        _fail(str(exc))
    if check:
        _check_current(text, out)
        return
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        _fail(f"cannot write {out}: {exc.strerror or exc}")


def _check_current(text: str, out: str | None) -> None:
    if out is None:
        _fail("--check needs --out FILE (the committed manifest)")
    try:
        stored = Path(out).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        stored = None
    if stored != text:
        click.echo(f"{out} is out of date: regenerate it with 'generate --out {out}' and "
                   "review the difference", err=True)
        sys.exit(1)


@manifest_group.command("verify")
@click.option("--baseline", required=True, metavar="FILE", help="The reviewed manifest.")
@click.option("--policy", "policy", metavar="FILE", help="A policy file to combine with a module.")
@click.argument("current")
def verify(baseline: str, policy: str | None, current: str) -> None:
    """Fail (exit 1) if CURRENT allows anything BASELINE did not, one line per finding.

    CURRENT is a target (regenerated now) or a generated manifest file (.json, or YAML with a
    callgate_manifest key).
    """
    try:
        findings = verify_manifest(load_manifest(baseline), _current(current, policy))
    except CallgateError as exc:
        _fail(str(exc))
    _report(findings, "no widening")


@click.command("lint-tools")
@click.argument("module")
def lint_tools_command(module: str) -> None:
    """Fail (exit 1) if a tool in MODULE (.py file or module name) uses an undeclared capability."""
    try:
        findings = lint_module(module)
    except CallgateError as exc:
        _fail(str(exc))
    _report(findings, "every tool uses only what it declares")


@click.group(name="callgate-manifest")
def standalone() -> None:
    """Manifest and declare-vs-do checks, as python -m callgate.manifest."""


standalone.add_command(generate)
standalone.add_command(verify)
standalone.add_command(lint_tools_command)
