"""The database executor: sqlglot classification in front, a real read-only SQLite behind."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate import ExecutorError, TaintLabel, ToolResult
from callgate.executors import DatabaseExecutor, classify_sql
from callgate.executors._database import table_allowed
from callgate.executors._result import Refusal
from callgate.testing import tool_call as make_call


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER, amount REAL);
        CREATE TABLE secrets (token TEXT);
        INSERT INTO users VALUES (1, 'ada'), (2, 'grace'), (3, 'edsger');
        INSERT INTO orders VALUES (1, 1, 9.5), (2, 2, 3.0);
        INSERT INTO secrets VALUES ('s3cr3t');
        """
    )
    conn.commit()
    conn.close()
    return path


def executor(db: Path, **kwargs: object) -> DatabaseExecutor:
    options: dict[str, object] = {"allowed_tables": ["users", "orders"]}
    options.update(kwargs)
    return DatabaseExecutor(databases={"app": str(db)}, **options)  # type: ignore[arg-type]


def run(ex: DatabaseExecutor, action: str, sql: str, **params: object) -> ToolResult:
    return ex.execute(make_call("database", action, database="app", sql=sql, **params))


def reason(result: ToolResult) -> str:
    return str(result.error).split(":", 1)[0]


def count_users(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM users").fetchone()[0])


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("SELECT * FROM users", "read"),
        ("select u.name from users u join orders o on o.user_id = u.id", "read"),
        ("SELECT 1 UNION SELECT 2", "read"),
        ("INSERT INTO users VALUES (4, 'x')", "write"),
        ("/* select */ DELETE FROM users -- select", "write"),
        ("UPDATE users SET name = 'y'", "write"),
        ("WITH gone AS (DELETE FROM users RETURNING *) SELECT * FROM gone", "write"),
        ("SELECT * FROM users FOR UPDATE", "write"),
        ("SELECT * INTO copy FROM users", "ddl"),
        ("CREATE TABLE t (a INT)", "ddl"),
        ("DROP TABLE users", "ddl"),
        ("ALTER TABLE users ADD COLUMN x INT", "ddl"),
        ("PRAGMA writable_schema = 1", "other"),
        ("ATTACH DATABASE '/tmp/x.db' AS x", "other"),
        ("VACUUM INTO '/tmp/copy.db'", "other"),
        ("BEGIN", "other"),
        ("", "other"),
    ],
)
def test_statements_are_classified_by_what_they_do(sql: str, kind: str) -> None:
    assert classify_sql(sql).kind == kind


def test_tables_exclude_cte_names_and_keep_schemas() -> None:
    shape = classify_sql(
        "WITH recent AS (SELECT * FROM orders) "
        "SELECT * FROM recent JOIN aux.Users u ON 1 WHERE u.id IN (SELECT id FROM secrets)"
    )
    assert shape.tables == frozenset({"orders", "aux.users", "secrets"})
    assert shape.statements == 1


def test_unparseable_sql_raises_an_executor_error() -> None:
    with pytest.raises(ExecutorError, match="does not parse"):
        classify_sql("SELECT FROM WHERE (((")


def test_an_unqualified_allowed_table_covers_only_the_default_schemas() -> None:
    allowed = frozenset({"users"})
    assert table_allowed("users", allowed) and table_allowed("main.users", allowed)
    assert not table_allowed("aux.users", allowed)
    assert table_allowed("anything", None)


READS = ["SELECT * FROM users", "SELECT name FROM users WHERE id = 1", "SELECT 1"]
WRITES = ["DELETE FROM users", "UPDATE users SET name = 'x'", "INSERT INTO users VALUES (9, 'z')",
          "DROP TABLE users"]


@st.composite
def disguised(draw: st.DrawFn, statement: str) -> str:
    """A statement with random case, comments and whitespace around and inside it."""
    words = statement.split(" ")
    cased = [w.upper() if draw(st.booleans()) else w.lower() if w.isalpha() else w
             for w in words]
    seps = [draw(st.sampled_from([" ", "\n", "\t", " /* SELECT */ ", "  "])) for _ in words]
    body = "".join(w + s for w, s in zip(cased, seps, strict=True)).strip()
    prefix = draw(st.sampled_from(["", "-- select only\n", "/* read */ ", "\n"]))
    return prefix + body


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(WRITES).flatmap(disguised))
def test_comments_case_and_spacing_never_disguise_a_write_as_a_read(sql: str) -> None:
    assert classify_sql(sql).kind in ("write", "ddl")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(READS + WRITES), min_size=2, max_size=4),
       st.sampled_from([";", "; ", ";\n", " ; -- x\n"]))
def test_every_multi_statement_string_is_counted_and_refused(
    statements: list[str], sep: str
) -> None:
    sql = sep.join(statements)
    assert classify_sql(sql).statements == len(statements)
    ex = DatabaseExecutor(databases={"app": ":memory:"})
    result = ex.execute(make_call("database", "query", database="app", sql=sql))
    assert (result.status, reason(result)) == ("denied", "sql.multi-statement")


def test_a_read_query_returns_rows_tainted_with_the_database(db: Path) -> None:
    result = run(executor(db), "query", "SELECT id, name FROM users WHERE id <= ? ORDER BY id",
                 params=[2])
    assert result.status == "ok", result.error
    assert result.output["columns"] == ["id", "name"]
    assert result.output["rows"] == [[1, "ada"], [2, "grace"]]
    assert result.taint == (TaintLabel(source="tool-output", origin="database:app"),)


def test_rows_beyond_the_cap_are_cut_and_flagged(db: Path) -> None:
    result = run(executor(db, max_rows=2), "query", "SELECT * FROM users")
    assert len(result.output["rows"]) == 2
    assert result.output["truncated"] is True


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("DELETE FROM users", "sql.not-read"),
        ("SELECT 1; DELETE FROM users", "sql.multi-statement"),
        ("SELECT * FROM secrets", "sql.table"),
        ("SELECT * FROM users WHERE id IN (SELECT rowid FROM secrets)", "sql.table"),
        ("SELECT name FROM sqlite_master", "sql.table"),
        ("SELECT load_extension('/tmp/evil.so')", "sql.forbidden-function"),
        ("ATTACH DATABASE '/tmp/other.db' AS other", "sql.kind"),
        ("PRAGMA writable_schema = ON", "sql.kind"),
        ("SELEKT * FROM users", "sql.unparseable"),
    ],
)
def test_query_refuses_what_is_not_one_allowed_read(db: Path, sql: str, why: str) -> None:
    result = run(executor(db), "query", sql)
    assert (result.status, reason(result)) == ("denied", why)
    assert count_users(db) == 3


def test_the_engine_refuses_a_table_the_parser_missed(db: Path) -> None:
    """Defence in depth: run past the classifier, the SQLite authorizer still says no."""
    ex = executor(db)
    with pytest.raises(Refusal, match=r"^sql\.engine-refused"):
        ex._run_sqlite(str(db), "SELECT token FROM secrets", (), "read")


def test_the_read_only_connection_refuses_a_write_the_parser_missed(db: Path) -> None:
    ex = executor(db, allowed_tables=None)
    with pytest.raises(Refusal, match=r"^sql\.engine-refused"):
        ex._run_sqlite(str(db), "DELETE FROM users", (), "read")
    assert count_users(db) == 3


def test_execute_runs_a_write_with_bound_parameters(db: Path) -> None:
    result = run(executor(db), "execute", "INSERT INTO users (id, name) VALUES (:id, :name)",
                 params={"id": 7, "name": "barbara"})
    assert result.status == "ok", result.error
    assert count_users(db) == 4


def test_execute_refuses_ddl_unless_enabled(db: Path) -> None:
    denied = run(executor(db), "execute", "DROP TABLE orders")
    assert (denied.status, reason(denied)) == ("denied", "sql.ddl")
    enabled = executor(db, allow_ddl=True, allowed_tables=None)
    assert run(enabled, "execute", "CREATE TABLE notes (body TEXT)").status == "ok"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM notes").fetchone() == (0,)


def test_execute_cannot_write_a_table_outside_the_allow_list(db: Path) -> None:
    result = run(executor(db), "execute", "DELETE FROM secrets")
    assert (result.status, reason(result)) == ("denied", "sql.table")


def test_a_runaway_query_is_stopped_at_the_deadline(db: Path) -> None:
    sql = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
           "SELECT count(*) FROM c")
    started = time.monotonic()
    result = run(executor(db, timeout_s=0.3), "query", sql)
    assert (result.status, reason(result)) == ("error", "sql.timeout")
    assert time.monotonic() - started < 3


def test_unknown_databases_and_bad_parameters_are_refused(db: Path) -> None:
    ex = executor(db)
    call = make_call("database", "query", database="prod", sql="SELECT 1")
    assert reason(ex.execute(call)) == "sql.database"
    assert reason(run(ex, "query", "SELECT ?", params=[[1, 2]])) == "params.invalid"
    assert reason(run(ex, "query", "SELECT ?", params="1")) == "params.invalid"


def test_a_missing_sqlite_file_is_not_created_by_a_query(tmp_path: Path) -> None:
    ex = DatabaseExecutor(databases={"app": str(tmp_path / "missing.db")})
    result = ex.execute(make_call("database", "query", database="app", sql="SELECT 1"))
    assert (result.status, reason(result)) == ("error", "sql.connect")
    assert not (tmp_path / "missing.db").exists()


def test_the_engine_checks_reads_inside_a_cte_but_trusts_operator_views(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE VIEW user_tokens AS SELECT u.name, s.token FROM users u, secrets s")
    ex = executor(db, allowed_tables=["users", "user_tokens"])
    with pytest.raises(Refusal, match=r"^sql\.engine-refused"):
        ex._run_sqlite(str(db), "WITH y AS (SELECT token FROM secrets) SELECT * FROM y", (), "read")
    rows = ex._run_sqlite(str(db), "SELECT count(*) FROM user_tokens", (), "read")["rows"]
    assert rows == [[3]]
