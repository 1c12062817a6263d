"""The database executor against a throwaway PostgreSQL cluster on 127.0.0.1 (the session's,
``tests/postgres.py``)."""

from __future__ import annotations

import pytest

from callgate import ToolResult
from callgate.executors import DatabaseExecutor
from callgate.executors._result import Refusal
from callgate.testing import tool_call as make_call
from tests.postgres import Cluster


@pytest.fixture(scope="module")
def pg_dsn(postgres: Cluster) -> str:
    """A database of this module's own in the session's cluster."""
    import psycopg

    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS executor_test")
        conn.execute("CREATE DATABASE executor_test")
    return postgres.url.rsplit("/", 1)[0] + "/executor_test"


@pytest.fixture(scope="module")
def seeded(pg_dsn: str) -> str:
    ddl = DatabaseExecutor(databases={"pg": pg_dsn}, allow_ddl=True)
    for sql in ("CREATE TABLE users (id int PRIMARY KEY, name text)",
                "CREATE TABLE secrets (token text)",
                "INSERT INTO users VALUES (1, 'ada'), (2, 'grace')",
                "INSERT INTO secrets VALUES ('s3cr3t')"):
        result = ddl.execute(make_call("database", "execute", database="pg", sql=sql))
        assert result.status == "ok", result.error
    return pg_dsn


def run(ex: DatabaseExecutor, action: str, sql: str, **params: object) -> ToolResult:
    return ex.execute(make_call("database", action, database="pg", sql=sql, **params))


def test_postgres_read_query_returns_rows(seeded: str) -> None:
    ex = DatabaseExecutor(databases={"pg": seeded}, allowed_tables=["users"])
    result = run(ex, "query", "SELECT name FROM users WHERE id = %s", params=[2])
    assert result.status == "ok", result.error
    assert result.output["rows"] == [["grace"]]


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("SELECT * FROM secrets", "sql.table"),
        ("DELETE FROM users", "sql.not-read"),
        ("SELECT 1; DELETE FROM users", "sql.multi-statement"),
        ("WITH d AS (DELETE FROM users RETURNING *) SELECT * FROM d", "sql.not-read"),
        ("SELECT pg_read_file('/etc/passwd')", "sql.forbidden-function"),
        ("COPY users TO '/tmp/out.csv'", "sql.kind"),
    ],
)
def test_postgres_query_refuses_what_is_not_one_allowed_read(
    seeded: str, sql: str, why: str
) -> None:
    ex = DatabaseExecutor(databases={"pg": seeded}, allowed_tables=["users"])
    result = run(ex, "query", sql)
    assert (result.status, str(result.error).split(":", 1)[0]) == ("denied", why)


def test_postgres_read_only_transaction_refuses_a_write_the_parser_missed(seeded: str) -> None:
    ex = DatabaseExecutor(databases={"pg": seeded})
    with pytest.raises(Refusal, match=r"^sql\.engine-refused"):
        ex._run_postgres(seeded, "DELETE FROM users", None, "read")
    assert run(ex, "query", "SELECT count(*) FROM users").output["rows"] == [[2]]


def test_postgres_statement_timeout_stops_a_runaway_query(seeded: str) -> None:
    ex = DatabaseExecutor(databases={"pg": seeded}, timeout_s=0.5)
    result = run(ex, "query", "SELECT count(*) FROM generate_series(1, 2000000000)")
    assert (result.status, str(result.error).split(":", 1)[0]) == ("error", "sql.timeout")
