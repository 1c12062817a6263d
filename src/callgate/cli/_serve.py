"""``callgate serve`` (the sidecar), ``callgate keys`` (its API keys) and ``callgate approvals``
(answering its pending approvals over HTTP with an approver key).

``keys add`` prints the new key alone on one stdout line and everything else on stderr, so
``KEY=$(callgate keys add agent --keys keys.json)`` captures exactly the key.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from callgate._errors import CallgateError
from callgate.cli._common import fail, load_cli_policy

#: ``--keys FILE``: the sidecar's keys file (digests only).
keys_option = click.option("--keys", "keys", required=True, type=click.Path(dir_okay=False),
                           help="The keys file (SHA-256 digests of the keys).")


@click.command("serve")
@click.option("--policy", "policy", required=True, type=click.Path(dir_okay=False),
              help="Policy YAML file.")
@keys_option
@click.option("--audit", "audit", type=click.Path(dir_okay=False),
              help="SQLite audit log (default: audit.db in the state directory).")
@click.option("--store", "store", default=None, metavar="URL", envvar="CALLGATE_STORE",
              help="postgresql://… : runs, approvals and the receipt key shared with every "
                   "sidecar given this URL, a run's decisions serialised across them (also "
                   "$CALLGATE_STORE: a password there stays out of process listings).")
@click.option("--audit-key", "audit_key", type=click.Path(dir_okay=False), default=None,
              help="The audit log's checkpoint signing key (created on first use, mode 0600; "
                   "default: beside the log, or per host for a store). Sidecars sharing a "
                   "store share one key, so one public key verifies every checkpoint.")
@click.option("--listen", default=None, help="HOST:PORT to listen on (default 127.0.0.1:8787).")
@click.option("--unix", type=click.Path(dir_okay=False), default=None,
              help="Listen on this Unix socket instead.")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="Runs, approvals and the receipt key (default: AUDIT.sidecar, or "
                   ".callgate-sidecar).")
@click.option("--working-dir", type=click.Path(file_okay=False), default=None,
              help="Relative paths in calls resolve against it (default: the current "
                   "directory).")
@click.option("--approval-ttl", type=float, default=300.0, show_default=True,
              help="Seconds a pending approval stays open.")
@click.option("--allow-remote", is_flag=True, help="Listen on a non-loopback address.")
@click.option("--otlp-endpoint", default=None,
              help="Also send each decided call as an OpenTelemetry span to this OTLP/HTTP "
                   "traces URL (the otel extra; arguments and outputs redacted).")
def serve_command(policy: str, keys: str, audit: str | None, store: str | None,
                  audit_key: str | None, listen: str | None,
                  unix: str | None, state_dir: str | None, working_dir: str | None,
                  approval_ttl: float, allow_remote: bool, otlp_endpoint: str | None) -> None:
    """Serve the kernel over HTTP: the sidecar every tool call of an agent goes through."""
    if listen is not None and unix is not None:
        fail("give at most one of --listen and --unix")
    if store is not None and not store.startswith(("postgresql://", "postgres://")):
        fail("--store: only postgresql://… URLs are known")
    if store is not None and audit is not None:
        # sidecars sharing runs must share one log: a run resumed elsewhere would find no start
        fail("give --store or --audit, not both: with --store the audit log is the store's")
    loaded = load_cli_policy(policy, None)
    from callgate.executors._wiring import build_executors
    from callgate.integrations.sidecar._server import serve

    wd = os.path.realpath(working_dir or loaded.policy.working_dir or os.getcwd())
    try:
        executors = build_executors(loaded.policy, working_dir=wd)
        sys.exit(serve(loaded, policy_path=policy, keys=keys, listen=listen, unix=unix,
                       audit=audit, state_dir=state_dir, working_dir=wd,
                       approval_ttl_s=approval_ttl, allow_remote=allow_remote,
                       executors=executors, otlp_endpoint=otlp_endpoint, store=store,
                       audit_key=audit_key))
    except CallgateError as exc:
        fail(f"error: {exc}")


@click.group("keys")
def keys_group() -> None:
    """Create and revoke the sidecar's API keys."""


@keys_group.command("add")
@click.argument("name")
@keys_option
@click.option("--principal", default=None,
              help="The principal the key binds (default: the policy the sidecar serves).")
@click.option("--role", type=click.Choice(["agent", "approver"]), default="agent",
              show_default=True)
@click.option("--policy", "policy", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Bind the key to this policy file: a sidecar serving any other policy "
                   "(another file, or this one changed) refuses it.")
def keys_add(name: str, keys: str, principal: str | None, role: str,
             policy: str | None) -> None:
    """Create key NAME; the key is printed once, alone, on stdout."""
    import hashlib
    from pathlib import Path

    from callgate.integrations.sidecar._keys import add_key

    digest = hashlib.sha256(Path(policy).read_bytes()).hexdigest() if policy else None
    try:
        key = add_key(keys, name, principal=principal, role=role,  # type: ignore[arg-type]  # click.Choice gives one of the roles
                      policy_sha256=digest)
    except CallgateError as exc:
        fail(f"error: {exc}")
    click.echo(f"key {name!r} ({role}) added to {keys}; it is shown once, keep it secret",
               err=True)
    click.echo(key)


@keys_group.command("revoke")
@click.argument("name")
@keys_option
def keys_revoke(name: str, keys: str) -> None:
    """Revoke key NAME (a running sidecar refuses it from its next request)."""
    from callgate.integrations.sidecar._keys import revoke_key

    try:
        count = revoke_key(keys, name)
    except CallgateError as exc:
        fail(f"error: {exc}")
    if not count:
        fail(f"no live key named {name!r}", 1)
    click.echo(f"revoked {name!r}", err=True)


_URL = click.option("--url", default="http://127.0.0.1:8787", show_default=True,
                    help="The sidecar's URL.")
_KEY = click.option("--key", envvar="CALLGATE_APPROVER_KEY", required=True,
                    help="An approver key (or CALLGATE_APPROVER_KEY).")


def _client(url: str, key: str) -> Any:
    from callgate.client import Client

    return Client(url, key)


@click.group("approvals")
def approvals_group() -> None:
    """List and answer the sidecar's pending approvals (with an approver key)."""


@approvals_group.command("list")
@_URL
@_KEY
@click.option("--state", default="pending", show_default=True)
def approvals_list(url: str, key: str, state: str) -> None:
    """Print approvals in STATE, one JSON object a line."""
    with _client(url, key) as client:
        for item in client.approvals(state=state):
            click.echo(json.dumps(item, sort_keys=True))


def _answer(url: str, key: str, approval_id: str, approve: bool) -> None:
    from callgate.client import SidecarError

    with _client(url, key) as client:
        try:
            click.echo(json.dumps(client.answer_approval(approval_id, approve), sort_keys=True))
        except SidecarError as exc:
            fail(f"error: {exc}", 1)


@approvals_group.command("approve")
@_URL
@_KEY
@click.argument("approval_id")
def approvals_approve(url: str, key: str, approval_id: str) -> None:
    """Approve APPROVAL_ID."""
    _answer(url, key, approval_id, True)


@approvals_group.command("deny")
@_URL
@_KEY
@click.argument("approval_id")
def approvals_deny(url: str, key: str, approval_id: str) -> None:
    """Deny APPROVAL_ID."""
    _answer(url, key, approval_id, False)


__all__ = ["approvals_group", "keys_group", "serve_command"]
