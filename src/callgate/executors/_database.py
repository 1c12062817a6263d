"""The database executor: SQLite (and PostgreSQL when configured), classified before it runs.

Every statement is parsed with a real SQL parser (sqlglot), never matched with a regex, and
classified as ``read``, ``write``, ``ddl`` or ``other``. Only one statement per call; the tables
it names must be allowed; functions that reach the file system, the network or the server's
state (``load_extension``, ``pg_read_file``, ``dblink`` …) are refused.

The parser is not trusted alone. ``query`` runs on a connection the engine itself keeps
read-only (SQLite ``mode=ro`` + ``query_only``; PostgreSQL ``default_transaction_read_only``
and a read-only transaction). On SQLite an authorizer callback re-checks every table the engine
actually touches and refuses ``ATTACH``, ``PRAGMA`` and the forbidden functions, so a statement
the parser misread still cannot reach further. Each call has a deadline and a row cap.
"""

from __future__ import annotations

import pathlib
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from callgate._errors import ExecutorError
from callgate._model import TaintLabel, ToolCall, ToolResult
from callgate.executors._result import (
    Outcome,
    check_action,
    denied,
    failed,
    guarded,
    param_str,
)

SqlKind = Literal["read", "write", "ddl", "other"]
_RANK: dict[str, int] = {"read": 0, "write": 1, "ddl": 2, "other": 3}
_WRITE_NODES: tuple[type[exp.Expr], ...] = (
    exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Lock,
)
_DDL_NODES: tuple[type[exp.Expr], ...] = (
    exp.Create, exp.Drop, exp.Alter, exp.TruncateTable, exp.Into,
)
#: Functions that read or write files, reach other servers, sleep, or change server state.
FORBIDDEN_FUNCTIONS: frozenset[str] = frozenset({
    "load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "zipfile",
    "pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "pg_ls_logdir",
    "pg_ls_waldir", "pg_ls_tmpdir", "lo_import", "lo_export", "lo_get", "lo_put", "lo_from_bytea",
    "dblink", "dblink_exec", "dblink_connect", "pg_sleep", "pg_sleep_for", "pg_sleep_until",
    "set_config", "pg_terminate_backend", "pg_cancel_backend", "pg_reload_conf",
    "pg_rotate_logfile", "pg_promote", "pg_advisory_lock", "pg_advisory_xact_lock",
    "nextval", "setval", "query_to_xml", "query_to_xml_and_xmlschema", "txid_current",
    "pg_switch_wal", "pg_create_restore_point", "current_setting",
})
_DEFAULT_SCHEMAS = frozenset({"", "main", "public"})
_SQLITE_OK = 0
_SQLITE_DENY = 1


@dataclass(frozen=True, slots=True)
class SqlClass:
    """What a SQL string does: its most dangerous ``kind``, the tables and functions it names,
    and how many statements it holds (``ddl`` outranks ``write`` outranks ``read``; ``other`` —
    PRAGMA, ATTACH, transaction control, anything unrecognised — outranks all)."""

    kind: SqlKind
    tables: frozenset[str]
    functions: frozenset[str]
    statements: int


def classify_sql(sql: str, dialect: str = "sqlite") -> SqlClass:
    """Parse ``sql`` with sqlglot and classify it; raises ``ExecutorError`` if it does not parse.

    Table names are lower-cased and schema-qualified when the SQL qualifies them
    (``"aux.users"``); names defined by a ``WITH`` clause are not tables.
    """
    try:
        statements = sqlglot.parse(sql, read=dialect)
        # A comment after the last semicolon parses as a bare Semicolon: not a statement.
        parsed = [s for s in statements if s is not None and not isinstance(s, exp.Semicolon)]
    except SqlglotError as exc:
        raise ExecutorError(f"SQL does not parse as {dialect}: {exc}") from exc
    kind: SqlKind = "read"
    tables: set[str] = set()
    functions: set[str] = set()
    for statement in parsed:
        own = _kind_of(statement)
        if _RANK[own] > _RANK[kind]:
            kind = own
        tables |= _tables_of(statement)
        functions |= _functions_of(statement)
    if not parsed:
        kind = "other"
    return SqlClass(kind, frozenset(tables), frozenset(functions), len(parsed))


def _kind_of(statement: exp.Expr) -> SqlKind:
    if isinstance(statement, exp.Command | exp.Pragma | exp.Attach | exp.Detach | exp.Copy):
        return "other"
    nodes = list(statement.walk())
    if any(isinstance(node, _DDL_NODES) for node in nodes):
        return "ddl"
    if any(isinstance(node, _WRITE_NODES) for node in nodes):
        return "write"
    if isinstance(statement, exp.Query):
        return "read"
    return "other"


def _tables_of(statement: exp.Expr) -> set[str]:
    ctes = {cte.alias_or_name.lower() for cte in statement.find_all(exp.CTE)}
    names: set[str] = set()
    for table in statement.find_all(exp.Table):
        name = table.name.lower()
        if not name or (name in ctes and not table.db):
            continue
        schema = table.db.lower()
        names.add(f"{schema}.{name}" if schema else name)
    return names


def _functions_of(statement: exp.Expr) -> set[str]:
    names: set[str] = set()
    for func in statement.find_all(exp.Func):
        if isinstance(func, exp.Anonymous):
            names.add(str(func.name).lower())
        else:
            names.add(func.sql_name().lower())
    return names


def table_allowed(table: str, allowed: frozenset[str] | None) -> bool:
    """Whether ``table`` (``name`` or ``schema.name``) is in ``allowed`` (``None`` = any).

    An unqualified allowed name covers the default schemas (``main``, ``public``) only, so an
    allowed ``users`` never opens ``other_schema.users``.
    """
    if allowed is None:
        return True
    schema, _, name = table.rpartition(".")
    if table in allowed:
        return True
    return schema in _DEFAULT_SCHEMAS and name in allowed


class DatabaseExecutor:
    """SQL with a parser in front and a read-only engine behind: ``query`` and ``execute``.

    ``databases`` maps a name to a SQLite file path or a ``postgresql://`` DSN. ``query`` takes
    one read statement; ``execute`` takes one write statement, or DDL when ``allow_ddl``.
    Parameters: ``database``, ``sql``, ``params`` (a list or a mapping of bound values).
    Output: ``columns``, ``rows``, ``truncated``, ``rowcount``; tainted ``tool-output`` with
    origin ``database:<name>``.
    """

    tool_class = "database"

    def __init__(
        self,
        *,
        databases: Mapping[str, str],
        allowed_tables: Sequence[str] | None = None,
        timeout_s: float = 5.0,
        max_rows: int = 1000,
        allow_ddl: bool = False,
    ) -> None:
        if timeout_s <= 0 or max_rows <= 0:
            raise ExecutorError("timeout_s and max_rows must be positive")
        self._databases = dict(databases)
        self._allowed = None if allowed_tables is None else frozenset(
            t.lower() for t in allowed_tables
        )
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.allow_ddl = allow_ddl

    def __call__(self, call: ToolCall) -> ToolResult:
        """Same as ``execute``: lets the executor be registered where a callable is expected."""
        return self.execute(call)

    def execute(self, call: ToolCall) -> ToolResult:
        """Classify and run one allowed SQL statement."""

        def run() -> Outcome:
            check_action(call, self.tool_class, ("query", "execute"))
            params = call.parameters
            name = param_str(params, "database")
            target = self._databases.get(name)
            if target is None:
                raise denied("sql.database", f"database {name!r} is not configured")
            is_pg = target.startswith(("postgresql://", "postgres://"))
            sql = param_str(params, "sql")
            kind = self._check(sql, "postgres" if is_pg else "sqlite", call.action)
            bound = _bound_params(params.get("params"))
            runner = self._run_postgres if is_pg else self._run_sqlite
            output = runner(target, sql, bound, kind)
            return Outcome(output, [TaintLabel(source="tool-output", origin=f"database:{name}")])

        return guarded(call, run)

    def _check(self, sql: str, dialect: str, action: str) -> SqlKind:
        try:
            shape = classify_sql(sql, dialect)
        except ExecutorError as exc:
            raise denied("sql.unparseable", str(exc)) from exc
        if shape.statements != 1:
            raise denied("sql.multi-statement", f"{shape.statements} statements; exactly 1 allowed")
        if shape.kind == "other":
            raise denied("sql.kind", "only SELECT, INSERT/UPDATE/DELETE and DDL statements run")
        if action == "query" and shape.kind != "read":
            raise denied("sql.not-read", f"query takes read statements only, got {shape.kind}")
        if shape.kind == "ddl" and not self.allow_ddl:
            raise denied("sql.ddl", "DDL statements are not enabled on this executor")
        forbidden = sorted(shape.functions & FORBIDDEN_FUNCTIONS)
        if forbidden:
            raise denied("sql.forbidden-function", f"refused functions: {', '.join(forbidden)}")
        for table in sorted(shape.tables):
            if not table_allowed(table, self._allowed):
                raise denied("sql.table", f"table {table!r} is not allowed")
        return "read" if action == "query" else shape.kind

    # -- SQLite ----------------------------------------------------------------------------
    def _run_sqlite(self, path: str, sql: str, bound: Any, kind: SqlKind) -> dict[str, Any]:
        mode = "ro" if kind == "read" else "rwc"
        if path == ":memory:":
            uri = "file::memory:"
        else:
            uri = f"{pathlib.Path(path).resolve().as_uri()}?mode={mode}"
        deadline = time.monotonic() + self.timeout_s
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=self.timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise failed("sql.connect", f"cannot open database: {exc}") from exc
        try:
            if kind == "read":
                conn.execute("PRAGMA query_only = ON")
            conn.set_authorizer(self._authorizer(kind, conn))
            conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
            cursor = conn.execute(sql, bound)
            return self._collect(cursor.description, cursor.fetchmany, cursor.rowcount)
        except sqlite3.Error as exc:
            if time.monotonic() > deadline:
                raise failed("sql.timeout", f"statement ran past {self.timeout_s}s") from exc
            code = getattr(exc, "sqlite_errorcode", None)
            if code in (sqlite3.SQLITE_AUTH, sqlite3.SQLITE_READONLY):
                raise denied("sql.engine-refused", f"the engine authorizer refused: {exc}") from exc
            raise failed("sql.error", str(exc)) from exc
        finally:
            conn.close()

    def _authorizer(self, kind: SqlKind, conn: sqlite3.Connection) -> Callable[
        [int, str | None, str | None, str | None, str | None], int
    ]:
        """The engine-level check: tables really touched, functions really called.

        SQLite reports reads made on behalf of a view or trigger with that object's name as
        ``source``; those objects were defined by the operator, so their inner accesses pass.
        A CTE name is also reported as a ``source`` but is *not* trusted: reads inside a CTE are
        checked like any other. Reads of names that are not real tables (CTE results) pass,
        since the reads that fill them are checked themselves, and so do reads of no column
        (``count(*)``), which reveal a row count but no values.
        """
        schema = conn.execute("SELECT type, lower(name) FROM sqlite_master").fetchall()
        objects = {name for type_, name in schema if type_ in ("view", "trigger")}
        real_tables = {name for type_, name in schema if type_ == "table"}
        schema_tables = {"sqlite_master", "sqlite_temp_master", "sqlite_schema"}
        writes = {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}
        reads = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE}
        allowed = self._allowed

        def permitted(table: str, column: str | None, db: str | None, source: str | None) -> bool:
            if (source or "").lower() in objects or not table:
                return True
            if column == "":
                return True  # no column is read (count(*) over a flattened view): no values
            if db is None and table not in real_tables | schema_tables:
                return True  # a CTE or subquery result, not a stored table
            return table_allowed(table, allowed)

        def authorize(
            action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None
        ) -> int:
            if action == sqlite3.SQLITE_FUNCTION:
                return _SQLITE_DENY if (arg2 or "").lower() in FORBIDDEN_FUNCTIONS else _SQLITE_OK
            if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_PRAGMA):
                return _SQLITE_DENY
            table = (arg1 or "").lower()
            if kind == "ddl" and table in schema_tables:
                return _SQLITE_OK  # DDL updates the schema table itself
            if action in reads or (action in writes and kind in ("write", "ddl")):
                return _SQLITE_OK if permitted(table, arg2, db, source) else _SQLITE_DENY
            return _SQLITE_OK if kind == "ddl" and action not in writes | reads else _SQLITE_DENY

        return authorize

    # -- PostgreSQL ------------------------------------------------------------------------
    def _run_postgres(self, dsn: str, sql: str, bound: Any, kind: SqlKind) -> dict[str, Any]:
        try:
            import psycopg
        except ImportError as exc:
            raise failed("sql.driver", "PostgreSQL needs the 'postgres' extra (psycopg)") from exc
        options = f"-c statement_timeout={int(self.timeout_s * 1000)}"
        if kind == "read":
            options += " -c default_transaction_read_only=on"
        try:
            with psycopg.connect(
                dsn, connect_timeout=max(1, int(self.timeout_s)), options=options
            ) as conn:
                conn.read_only = kind == "read"
                with conn.cursor() as cursor:
                    cursor.execute(sql, bound if bound else None)
                    output = self._collect(cursor.description, cursor.fetchmany, cursor.rowcount)
                if kind == "read":
                    conn.rollback()
                return output
        except psycopg.errors.QueryCanceled as exc:
            raise failed("sql.timeout", f"statement ran past {self.timeout_s}s") from exc
        except psycopg.errors.ReadOnlySqlTransaction as exc:
            raise denied("sql.engine-refused", f"read-only transaction refused: {exc}") from exc
        except psycopg.Error as exc:
            raise failed("sql.error", str(exc).strip()) from exc

    def _collect(
        self, description: Any, fetchmany: Callable[[int], list[Any]], rowcount: int
    ) -> dict[str, Any]:
        if not description:
            return {"columns": [], "rows": [], "truncated": False, "rowcount": rowcount}
        rows = fetchmany(self.max_rows + 1)
        truncated = len(rows) > self.max_rows
        return {
            "columns": [str(col[0]) for col in description],
            "rows": [[_plain(v) for v in row] for row in rows[: self.max_rows]],
            "truncated": truncated,
            "rowcount": len(rows[: self.max_rows]),
        }


def _bound_params(raw: Any) -> Any:
    if raw is None:
        return ()
    if isinstance(raw, Mapping):
        return {str(k): _scalar(v) for k, v in raw.items()}
    if isinstance(raw, list | tuple):
        return tuple(_scalar(v) for v in raw)
    raise failed("params.invalid", "parameter 'params' must be a list or a mapping")


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise failed("params.invalid", f"bound values must be scalars, got {type(value).__name__}")


def _plain(value: Any) -> Any:
    """A JSON-friendly form of a column value (bytes as hex, other objects as text)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)
