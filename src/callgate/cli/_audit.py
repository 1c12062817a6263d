"""``callgate audit``: verify a log, sign a checkpoint now, create a signing key.

Exit codes: 0 done, 1 the log failed verification, 2 bad input (no such log, unreadable file
or key, a log that does not match its anchor when checkpointing).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from callgate._errors import CallgateError
from callgate.audit._checkpoint import key_id, public_key_of
from callgate.audit._files import default_anchor_path, default_key_path, verify_file
from callgate.audit._keys import create_key, display, public_path_for, public_pem, read_public_key
from callgate.audit._store import AuditStore
from callgate.cli._common import fail

_file = click.Path(dir_okay=False)


@click.group("audit")
def audit_group() -> None:
    """Verify audit logs and manage their signed checkpoints."""


@audit_group.command("verify")
@click.argument("db", type=_file)
@click.option("--public-key", type=_file,
              help="Ed25519 public key (PEM, raw or hex); default DB.key.pub when present.")
@click.option("--anchor", "anchor_path", type=_file,
              help="The anchor file (latest signed checkpoint); default DB.anchor.")
@click.option("--no-anchor", is_flag=True,
              help="Verify without an anchor (logs written with checkpoints off).")
def verify_command(db: str, public_key: str | None, anchor_path: str | None,
                   no_anchor: bool) -> None:
    """Recompute the chain, the runs and the checkpoints; exit 1 naming the first bad row."""
    if not Path(db).is_file():
        fail(f"error: audit log {display(db)} does not exist")
    try:
        key = read_public_key(public_key) if public_key else None
        report = verify_file(db, public_key=key, anchor_path=anchor_path,
                             require_anchor=not no_anchor)
    except CallgateError as exc:
        fail(f"error: {exc}")
    if not report.ok:
        where = f"{report.table} row {report.row}" if report.table else "log"
        click.echo(f"BROKEN at {where}: {report.problem}")
        sys.exit(1)
    anchor = "no anchor" if report.anchor is None else f"anchor at sequence {report.anchor}"
    signed = "signatures checked" if report.signatures else \
        "signatures not checked (no public key: pass --public-key)"
    click.echo(f"ok: {report.checked} records, chain intact; {anchor}; {signed}")


@audit_group.command("checkpoint")
@click.argument("db", type=_file)
@click.option("--key", "key_path", type=_file,
              help="Signing key (created if absent, mode 0600); default DB.key.")
@click.option("--anchor", "anchor_path", type=_file, help="The anchor file; default DB.anchor.")
def checkpoint_command(db: str, key_path: str | None, anchor_path: str | None) -> None:
    """Sign a checkpoint of the log's head and runs now and move the anchor forward to it.

    Refuses (exit 2) a log that no longer matches its anchor.
    """
    if not Path(db).is_file():
        fail(f"error: audit log {display(db)} does not exist")
    try:
        with AuditStore.open(db, key_path=key_path, anchor_path=anchor_path) as store:
            cp = store.checkpoint()
    except CallgateError as exc:
        fail(f"error: {exc}")
    anchor = anchor_path or default_anchor_path(db)
    click.echo(f"checkpoint at sequence {cp.seq} ({cp.runs} runs) signed by key {cp.key_id};"
               f" anchor {display(anchor)}")


@audit_group.command("keygen")
@click.argument("key", type=_file, required=False)
@click.option("--for", "db", type=_file, help="Use the default key of this log: DB.key.")
def keygen_command(key: str | None, db: str | None) -> None:
    """Create a signing key at KEY (mode 0600, public key at KEY.pub) and print its public key.

    An existing key is never replaced: its public key is printed.
    """
    if (key is None) == (db is None):
        fail("error: give exactly one of KEY or --for DB")
    target = Path(key) if key is not None else default_key_path(str(db))
    try:
        private, created = create_key(target)
        public = public_key_of(private)
        if read_public_key(public_path_for(target)) != public:
            fail(f"error: {display(public_path_for(target))} is not the public key of"
                 f" {display(target)}")
    except CallgateError as exc:
        fail(f"error: {exc}")
    state = "created" if created else "exists, kept"
    click.echo(f"signing key {display(target)} ({state}); key id {key_id(public)};"
               f" public key {display(public_path_for(target))}:", err=True)
    click.echo(public_pem(private), nl=False)
