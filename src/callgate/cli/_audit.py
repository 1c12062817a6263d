"""``callgate audit``: verify a log, sign a checkpoint now, create a signing key; read a log
(``runs``, ``show``, ``tail``).

Exit codes: 0 done, 1 the log failed verification, 2 bad input (no such log, a file that is
not an audit log, an unknown run, unreadable file or key, a log that does not match its anchor
when checkpointing).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from callgate._errors import CallgateError
from callgate._text import lines_of
from callgate.audit._checkpoint import key_id, public_key_of
from callgate.audit._files import default_anchor_path, default_key_path, verify_file
from callgate.audit._keys import create_key, display, public_path_for, public_pem, read_public_key
from callgate.audit._open import AuditLog, open_store
from callgate.audit._store import AuditRecord, AuditStore
from callgate.audit._target import is_store_url
from callgate.audit._verify import VerifyReport
from callgate.cli._common import audit_target, fail, store_option

_file = click.Path(dir_okay=False)


@click.group("audit")
def audit_group() -> None:
    """Verify, read and export audit logs; manage their signed checkpoints."""


@audit_group.command("verify")
@click.argument("db", type=_file, required=False)
@store_option
@click.option("--public-key", type=_file,
              help="Ed25519 public key (PEM, raw or hex); default DB.key.pub when present.")
@click.option("--anchor", "anchor_path", type=_file,
              help="The anchor file (latest signed checkpoint); default DB.anchor.")
@click.option("--no-anchor", is_flag=True,
              help="Verify without an anchor (logs written with checkpoints off).")
def verify_command(db: str | None, store_url: str | None, public_key: str | None,
                   anchor_path: str | None, no_anchor: bool) -> None:
    """Recompute the chain, the runs and the checkpoints; exit 1 naming the first bad row.

    DB is a SQLite log; ``--store URL`` verifies a PostgreSQL store instead (its anchor is
    the --anchor file when given, else its anchor row)."""
    db = _log_target(db, store_url)
    try:
        key = read_public_key(public_key) if public_key else None
        if is_store_url(db):
            report = _verify_store(db, key, anchor_path, no_anchor)
        else:
            if not Path(db).is_file():
                fail(f"error: audit log {display(db)} does not exist")
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


def _log_target(db: str | None, store_url: str | None) -> str:
    """DB or ``--store URL`` (exactly one; exit 2 otherwise)."""
    target = audit_target(db, store_url, name="DB")
    if target is None:
        fail("error: give the audit log: DB (a SQLite file) or --store URL")
    return target


def _verify_store(url: str, key: bytes | None, anchor_path: str | None,
                  no_anchor: bool) -> VerifyReport:
    """Verify a PostgreSQL store (read-only; the anchor file when given, else its row)."""
    from callgate.audit._anchor import read_anchor
    from callgate.audit._postgres import PostgresAuditStore

    anchor = None
    if anchor_path is not None:
        anchor = read_anchor(anchor_path)
        if anchor is None:
            fail(f"error: no anchor at {display(anchor_path)}")
    store = open_store(url, read_only=True)
    assert isinstance(store, PostgresAuditStore)
    with store:
        return store.verify(public_key=key, anchor=anchor, require_anchor=not no_anchor)


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


# -- reading a log: runs, show, tail ---------------------------------------------------------

_VERDICT_STYLE = {"allow": "green", "deny": "bold red", "require-approval": "yellow"}


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def _read_log(db: str) -> AuditLog:
    """The log (a file or a store URL) opened read-only, or exit 2 saying why not."""
    from callgate.audit._view import open_log

    try:
        if is_store_url(db):
            return open_store(db, read_only=True)
        return open_log(db)
    except CallgateError as exc:
        fail(f"error: {exc}")


def _when(timestamp: str | None) -> str:
    """An ISO timestamp as ``YYYY-MM-DD HH:MM:SS`` (UTC, as recorded)."""
    return "-" if not timestamp else timestamp.replace("T", " ")[:19]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


@audit_group.command("runs")
@click.argument("db", type=_file, required=False)
@store_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run, one a line.")
def runs_command(db: str | None, store_url: str | None, as_json: bool) -> None:
    """List the runs of an audit log: principal, policy, start and end, calls, denials,
    quarantine."""
    db = _log_target(db, store_url)
    from callgate.audit._view import list_runs

    with _read_log(db) as store:
        try:
            runs = list_runs(store)
        except CallgateError as exc:
            fail(f"error: {exc}")
    if as_json:
        for run in runs:
            click.echo(json.dumps(run.to_json(), sort_keys=True))
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"{len(runs)} runs in {display(db)}", title_justify="left")
    for name in ("run", "principal", "policy", "started (UTC)", "ended (UTC)", "calls",
                 "denied", "approval", "quarantine"):
        table.add_column(name, overflow="fold",
                         justify="right" if name in ("calls", "denied", "approval") else "left")
    for run in runs:
        table.add_row(escape(run.run_id), escape(run.principal), escape(run.policy),
                      _when(run.started_at), _when(run.ended_at) if run.ended_at else "open",
                      str(run.calls), f"[red]{run.denials}[/]" if run.denials else "0",
                      str(run.approvals),
                      f"[bold red]{escape(run.quarantine)}[/]" if run.quarantine else "-")
    _console().print(table)


@audit_group.command("show")
@click.argument("db_and_run", metavar="[DB] RUN", nargs=-1, required=True)
@store_option
@click.option("--json", "as_json", is_flag=True, help="The run as one JSON object.")
def show_command(db_and_run: tuple[str, ...], store_url: str | None, as_json: bool) -> None:
    """Show one run's decided calls (the log is DB, or --store URL): verdict, the rule or
    statement, the reason, the witness, taint, and how long deciding and running took."""
    if len(db_and_run) > 2:
        fail("error: give [DB] RUN")
    *given, run_id = db_and_run
    db = _log_target(given[0] if given else None, store_url)
    from callgate.audit._view import view_run

    with _read_log(db) as store:
        try:
            run = view_run(store, run_id)
        except CallgateError as exc:
            fail(f"error: {exc}")
    if as_json:
        click.echo(json.dumps(run.to_json(), indent=2, sort_keys=True))
        return
    _render_run(run)


def _render_run(run: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    s = run.summary
    console = _console()
    ended = f"ended {_when(s.ended_at)}" if s.ended_at else "still open"
    console.print(f"[bold]run {escape(s.run_id)}[/]  principal {escape(s.principal)}  policy "
                  f"{escape(s.policy)}  started {_when(s.started_at)}  {ended}")
    console.print(f"{s.calls} calls: {s.allowed} allowed, {s.denials} denied, "
                  f"{s.approvals} awaiting approval"
                  + (f"; [bold red]quarantined by {escape(s.quarantine)}[/]" if s.quarantine
                     else ""))
    table = Table()
    for name in ("seq", "call", "verdict", "by", "why", "witness", "taint in→out",
                 "decide ms", "run ms"):
        table.add_column(name, overflow="fold", no_wrap=name not in ("call", "why", "witness"),
                         justify="right" if name in ("seq", "decide ms", "run ms") else "left")
    for c in run.calls:
        call = c.call
        target = _target(call.get("parameters"))
        style = _VERDICT_STYLE.get(c.verdict, "magenta")
        reasons = c.reasons
        witness = c.witness
        seen = (f"{witness.get('statement')} @ {', '.join(map(str, witness.get('events', [])))}"
                if witness else "")
        taint = f"{','.join(c.taint_seen) or '-'}→{','.join(c.taint_out) or '-'}"
        table.add_row(str(c.decision.seq),
                      escape(f"{call.get('tool')} {call.get('tool_class')}.{call.get('action')}"
                             f"{' ' + target if target else ''}"),
                      f"[{style}]{escape(c.verdict)}[/]",
                      escape(", ".join(str(r.get("id")) for r in reasons) or "-"),
                      escape("; ".join(str(r.get("message")) for r in reasons)),
                      escape(seen), escape(taint), _ms(c.decided_ms),
                      _ms(c.ran_ms) if c.status in (None, "ok") else
                      f"{_ms(c.ran_ms)} ({escape(str(c.status))})")
    console.print(table)
    for record in run.system:
        data = record.payload.get("data")
        detail = ""
        if isinstance(data, dict):
            detail = str(data.get("reason") or data.get("message") or "")
        console.print(f"  system {record.seq}: [bold]{escape(str(record.payload.get('kind')))}"
                      f"[/] {escape(detail)}")


def _target(parameters: Any, width: int = 48) -> str:
    """The call's most telling argument (url, path, command…), cut to ``width``."""
    if not isinstance(parameters, dict):
        return ""
    for key in ("url", "path", "file_path", "command", "query", "to", "recipient"):
        value = parameters.get(key)
        if isinstance(value, str) and value:
            return value if len(value) <= width else value[:width - 1] + "…"
    return ""


@audit_group.command("tail")
@click.argument("db", type=_file, required=False)
@store_option
@click.option("-n", "--lines", "count", type=click.IntRange(min=0), default=10, show_default=True,
              help="Decisions already in the log to print first.")
@click.option("-f", "--follow", is_flag=True,
              help="Keep printing decisions as other processes append them (Ctrl-C stops).")
@click.option("--json", "as_json", is_flag=True, help="Each decision as one JSON line.")
@click.option("--all", "every_kind", is_flag=True,
              help="Every event (run starts and ends, results, system events), not only "
                   "decisions.")
@click.option("--interval", type=click.FloatRange(min=0.01), default=0.25, show_default=True,
              help="Seconds between two looks at the log with --follow.")
def tail_command(db: str | None, store_url: str | None, count: int, follow: bool,
                 as_json: bool, every_kind: bool, interval: float) -> None:
    """Print the last decisions of an audit log; with --follow, each new one as it is written.

    Reads the log's segment without locking it, so the writer (a kernel, the sidecar, the
    Claude Code hook) is never held up; never writes to the log. A PostgreSQL store
    (``--store URL``) is polled for events past the last one printed.
    """
    from collections import deque

    backlog: deque[AuditRecord] = deque(maxlen=count)
    caught_up = False

    def keep_going() -> bool:  # called each time the reader has read all there is
        nonlocal caught_up
        if not caught_up:
            caught_up = True
            for old in backlog:
                _print_event(old, as_json)
        return follow

    db = _log_target(db, store_url)
    try:
        for record in _follow(db, interval, keep_going):
            if not (every_kind or record.kind == "decision"):
                continue
            if caught_up:
                _print_event(record, as_json)
            else:
                backlog.append(record)
    except CallgateError as exc:
        fail(f"error: {exc}")
    except KeyboardInterrupt:
        return


def _follow(db: str, interval: float, keep_going: Callable[[], bool]
            ) -> Iterator[AuditRecord]:
    """The records of the log in order, then each new one while ``keep_going()``."""
    from callgate.audit._view import follow as follow_log

    if not is_store_url(db):
        yield from follow_log(db, poll_s=interval, keep_going=keep_going)
        return
    from callgate.audit._postgres import PostgresAuditStore, wait_for_records

    store = open_store(db, read_only=True)
    assert isinstance(store, PostgresAuditStore)
    with store:
        yield from wait_for_records(store, poll_s=interval, keep_going=keep_going)


def _print_event(record: AuditRecord, as_json: bool) -> None:
    """One event as a line: time, sequence, run, verdict, the call, the first reason."""
    from callgate.audit._view import CallView

    if as_json:
        out: dict[str, Any] = {"seq": record.seq, "hash": record.hash, "kind": record.kind,
                               "run_id": record.run_id, "timestamp": record.timestamp}
        if record.kind == "decision":
            out.update(CallView(record).to_json())
        else:
            out["payload"] = record.payload
        line = json.dumps(out, sort_keys=True)
    elif record.kind == "decision":
        view = CallView(record)
        call, first = view.call, (view.reasons or [{}])[0]
        target = _target(call.get("parameters"), width=60)
        line = (f"{_when(record.timestamp)} {record.seq:>6} {record.run_id} {view.verdict:<7}"
                f" {call.get('tool')} {call.get('tool_class')}.{call.get('action')}"
                f"{' ' + target if target else ''}  [{first.get('id', '-')}]"
                f" {first.get('message', '')}")
    else:
        kind = record.payload.get("kind") if record.kind == "system" else ""
        line = (f"{_when(record.timestamp)} {record.seq:>6} {record.run_id} {record.kind}"
                f"{' ' + str(kind) if kind else ''}")
    click.echo(line)
    sys.stdout.flush()


# -- export ------------------------------------------------------------------------------------


@audit_group.command("export")
@click.argument("db", type=_file, required=False)
@store_option
@click.option("--format", "fmt", type=click.Choice(["jsonl", "otlp"]), default="jsonl",
              show_default=True, help="jsonl: one span a line on stdout (or --output); otlp: "
                                      "sent to a collector over OTLP/HTTP.")
@click.option("--endpoint", default=None,
              help="OTLP/HTTP traces URL (default http://127.0.0.1:4318/v1/traces).")
@click.option("--run", "run_id", default=None, help="Only this run.")
@click.option("--output", type=_file, default=None, help="Write the jsonl spans to this file.")
@click.option("--include-arguments", is_flag=True,
              help="Put each call's arguments (and the reason messages, which quote them) in "
                   "its span.")
@click.option("--include-outputs", is_flag=True, help="Put each call's output in its span.")
def export_command(db: str | None, store_url: str | None, fmt: str, endpoint: str | None,
                   run_id: str | None, output: str | None, include_arguments: bool,
                   include_outputs: bool) -> None:
    """Export every decided call as an OpenTelemetry span (GenAI conventions), with its place
    in the audit chain; arguments and outputs are redacted unless asked for."""
    from callgate.audit._export import export_spans

    db = _log_target(db, store_url)
    if fmt == "jsonl" and endpoint is not None:
        fail("error: --endpoint is for --format otlp")
    if fmt == "otlp" and output is not None:
        fail("error: --output is for --format jsonl")
    with _read_log(db) as store:
        try:
            if run_id is not None and not store.records(run_id):
                fail(f"error: the audit log has no run {run_id!r}")
            spans = list(export_spans(store, run_id=run_id, include_arguments=include_arguments,
                                      include_outputs=include_outputs))
        except CallgateError as exc:
            fail(f"error: {exc}")
    if fmt == "jsonl":
        text = "".join(json.dumps(s.to_json(), sort_keys=True, ensure_ascii=False) + "\n"
                       for s in spans)
        if output is None:
            click.echo(text, nl=False)
        else:
            Path(output).write_text(text, encoding="utf-8")
        return
    try:
        from callgate.audit._otel import DEFAULT_ENDPOINT, send_spans

        target = endpoint or DEFAULT_ENDPOINT
        sent = send_spans(spans, target)
    except CallgateError as exc:
        fail(f"error: {exc}")
    click.echo(f"sent {sent} spans to {target}")


@audit_group.command("check-export")
@click.argument("db_or_spans", metavar="[DB] SPANS", type=_file, nargs=-1, required=True)
@store_option
@click.option("--complete", is_flag=True,
              help="Also require a span for every decided call of each run the spans name.")
def check_export_command(db_or_spans: tuple[str, ...], store_url: str | None,
                         complete: bool) -> None:
    """Check exported spans (jsonl) against the log (DB, or --store URL), which must verify:
    each span is rebuilt from the records its callgate.audit.seq names and must say what they
    say (name, ids, times, status, every attribute; a redacted export may leave out arguments,
    outputs and reason messages); exit 1 naming each span that differs."""
    from callgate.audit._export import check_spans

    if len(db_or_spans) > 2:
        fail("error: give [DB] SPANS")
    *given, spans = db_or_spans
    db = _log_target(given[0] if given else None, store_url)

    try:
        lines = lines_of(Path(spans).read_text(encoding="utf-8"))
        parsed = [json.loads(line) for line in lines if line.strip()]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        fail(f"error: cannot read spans from {display(spans)}: {exc}")
    if not all(isinstance(span, dict) for span in parsed):
        fail(f"error: {display(spans)} holds a line that is not a span object")
    with _read_log(db) as store:
        try:
            verified = store.verify()
            count, problems = check_spans(store, parsed, complete=complete)
        except CallgateError as exc:
            fail(f"error: {exc}")
    if not verified.ok:
        problems.insert(0, f"the log itself does not verify: {verified.problem}")
    for problem in problems:
        click.echo(problem)
    if problems:
        click.echo(f"BROKEN: {len(problems)} problems in {count} spans and the log")
        sys.exit(1)
    click.echo(f"ok: {count} spans match the log, record by record"
               + (", and every decided call has one" if complete else ""))
