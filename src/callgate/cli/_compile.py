"""``callgate compile``: a skill's specification to behavior statements over a signature."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from callgate._errors import CallgateError
from callgate.cli._common import fail


@click.command("compile")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--trace", type=click.Path(dir_okay=False),
              help="A sample trace (the JSONL `callgate check` reads): its actions, arguments "
                   "and values are the vocabulary.")
@click.option("--tools", type=click.Path(dir_okay=False),
              help="The tools' declared schemas (MCP tools/list or OpenAI functions, JSON or "
                   "YAML) as the vocabulary.")
@click.option("--out", "out", type=click.Path(dir_okay=False),
              help="Write the policy here (default: stdout; the summary goes to stderr).")
@click.option("--model", default=None, metavar="PROVIDER:MODEL",
              help="A model for what the phrasing rules do not compile: openai:MODEL "
                   "(OpenAI-compatible chat completions, local servers included) or "
                   "anthropic:MODEL (also $CALLGATE_COMPILE_MODEL).")
@click.option("--base-url", default=None,
              help="The model service's base URL (default from the provider's variables).")
@click.option("--offline", is_flag=True, help="The phrasing rules alone, no model.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Where model answers are kept (default ~/.cache/callgate/compile).")
@click.option("--no-cache", is_flag=True, help="Ask the model again even if it was asked.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the statements and what was not compiled as JSON instead.")
def compile_command(spec: str, trace: str | None, tools: str | None, out: str | None,
                    model: str | None, base_url: str | None, offline: bool,
                    cache_dir: str | None, no_cache: bool, as_json: bool) -> None:
    """Compile a skill's specification (SKILL.md) into behavior statements over a run's
    signature.

    The vocabulary is a sample --trace or the declared --tools. Exit 0: every requirement
    compiled; 1: some could not be (they are listed, with why, and left out of the policy);
    2: bad input.
    """
    from callgate.compile import (
        ResponseCache,
        compile_spec,
        default_cache_dir,
        provider_from,
        signature_of_tools,
        signature_of_trace,
    )

    if (trace is None) == (tools is None):
        fail("give the vocabulary: --trace SAMPLE.jsonl or --tools TOOLS.json")
    model = None if offline else (model or os.environ.get("CALLGATE_COMPILE_MODEL") or None)
    text = _read_spec(spec)
    try:
        signature = signature_of_trace(trace) if trace else signature_of_tools(tools or "")
        provider = provider_from(model, base_url=base_url) if model else None
        cache = None if no_cache else ResponseCache(cache_dir or default_cache_dir())
        compiled = compile_spec(text, signature, provider=provider, cache=cache, source=spec)
        policy = compiled.policy_yaml()
    except (CallgateError, ValueError) as exc:
        fail(f"error: {exc}")
    if not compiled.spec.requirements:
        fail(f"error: {spec} holds no requirement sentence (must, never, only, before, …)")
    if as_json:
        click.echo(json.dumps({
            "statements": [{"id": s.id, "rule": s.rule, "requirement": s.requirement,
                            "line": s.line, "origin": s.origin} for s in compiled.statements],
            "approvals": [{"id": a.id, "action": a.action, "requirement": a.requirement,
                           "line": a.line} for a in compiled.approvals],
            "unsupported": [{"requirement": u.requirement, "line": u.line, "why": u.why}
                            for u in compiled.unsupported]}, indent=2))
    elif out is None:
        click.echo(policy, nl=False)
    if out is not None:
        try:
            Path(out).write_text(policy, encoding="utf-8")
        except OSError as exc:
            fail(f"error: cannot write {out}: {exc.strerror or exc}")
    click.echo(compiled.summary() + (f"\nwrote {out}" if out else ""), err=True)
    sys.exit(1 if compiled.unsupported else 0)


def _read_spec(spec: str) -> str:
    """The specification's text; a clear error (exit 2) when it cannot be read, is too large
    or is not UTF-8 (naming the line and column)."""
    from callgate._text import NotUtf8Error, decode_utf8
    from callgate.compile import MAX_SPEC_BYTES

    try:
        with open(spec, "rb") as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        fail(f"error: cannot read {spec}: {exc.strerror or exc}")
    if len(data) > MAX_SPEC_BYTES:
        fail(f"error: {spec}: a specification is at most {MAX_SPEC_BYTES} bytes")
    try:
        return decode_utf8(data)
    except NotUtf8Error as exc:
        fail(f"error: {spec}:{exc.line}:{exc.column}: not valid UTF-8")
