"""The database executor against a throwaway PostgreSQL 15 cluster on 127.0.0.1.

The cluster is created with ``initdb`` in a temporary directory and stopped afterwards. When
the binaries are missing the tests are skipped with that reason; as root, the server runs as
the ``postgres`` system user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate import ToolResult
from callgate.executors import DatabaseExecutor
from callgate.executors._result import Refusal
from callgate.testing import tool_call as make_call

BIN = Path("/usr/lib/postgresql/15/bin")


def _as_server_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and no 'postgres' user to run PostgreSQL as")
    return [runuser, "-u", "postgres", "--"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def pg_dsn() -> Iterator[str]:
    if not (BIN / "initdb").exists() or not (BIN / "pg_ctl").exists():
        pytest.skip(f"PostgreSQL 15 binaries not found under {BIN}")
    try:
        import psycopg  # noqa: F401 - optional dependency
    except ImportError:
        pytest.skip("psycopg is not installed")
    prefix = _as_server_user()
    base = Path(tempfile.mkdtemp(prefix="callgate-pg-"))
    data = base / "data"
    if prefix:
        shutil.chown(base, "postgres")
    port = _free_port()
    run = lambda *args: subprocess.run(  # noqa: E731 - a one-line runner
        [*prefix, *args], check=True, capture_output=True, timeout=60
    )
    try:
        run(str(BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = f"-k {base} -p {port} -c listen_addresses=127.0.0.1 -F"
        run(str(BIN / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(base / "log"),
            "-w", "start")
    except (subprocess.SubprocessError, OSError) as exc:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"could not start a PostgreSQL cluster: {exc}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, str(BIN / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], capture_output=True, timeout=60, check=False)
        shutil.rmtree(base, ignore_errors=True)


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
