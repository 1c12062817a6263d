"""Executors built from a policy: scopes from the principal's grants, settings from the policy."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate._errors import ExecutorError
from callgate.executors._shell import ShellExecutor
from callgate.executors._wiring import (
    ExecutorSettings,
    HttpSettings,
    build_executors,
    executor_scope,
    static_resolver,
)
from callgate.matchers._paths import WRITE_ACTIONS
from callgate.policy._schema import Policy
from callgate.testing import tool_call


def policy(capabilities: list[dict[str, Any]], **extra: Any) -> Policy:
    return Policy.model_validate({"name": "p", "version": 1,
                                  "principal": {"name": "a", "capabilities": capabilities},
                                  **extra})


def reason(result: Any) -> str:
    return str(result.error).split(":", 1)[0] if result.error else result.status


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("doc")
    (tmp_path / "out").mkdir()
    (tmp_path / "secret.txt").write_text("s")
    return tmp_path


def test_file_scopes_come_from_the_grants(work: Path) -> None:
    p = policy([{"tool_class": "file", "actions": ["read"],
                 "constraints": {"allowed_paths": ["./docs/**"]}},
                {"tool_class": "file", "actions": ["write"],
                 "constraints": {"allowed_paths": ["./out/**"]}}])
    files = build_executors(p, working_dir=str(work))["file"]
    assert files(tool_call("file", "read", path="docs/a.md")).status == "ok"
    assert reason(files(tool_call("file", "read", path="secret.txt"))) == "path.outside-allowed"
    assert files(tool_call("file", "write", path="out/r.md", content="x")).status == "ok"
    assert reason(files(tool_call("file", "write", path="docs/b.md", content="x"))) == \
        "path.outside-allowed"


def test_no_writing_grant_means_no_write_scope(work: Path) -> None:
    p = policy([{"tool_class": "file", "actions": ["read"]}])
    files = build_executors(p, working_dir=str(work))["file"]
    assert files(tool_call("file", "read", path="secret.txt")).status == "ok"
    assert reason(files(tool_call("file", "write", path="out/x", content="x"))) == \
        "path.outside-allowed"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["..", ".", "docs", "out", "..\\..", "/etc", "passwd"]),
                min_size=1, max_size=6))
def test_generated_paths_never_read_outside_the_scope(tmp_path_factory: Any,
                                                      parts: list[str]) -> None:
    root = tmp_path_factory.mktemp("w")
    work = root / "work"
    (work / "docs").mkdir(parents=True)
    (root / "passwd").write_text("outside")
    p = policy([{"tool_class": "file", "actions": ["read"],
                 "constraints": {"allowed_paths": ["./**"]}}])
    files = build_executors(p, working_dir=str(work))["file"]
    result = files(tool_call("file", "read", path="/".join(parts)))
    if result.status == "ok":
        assert result.output["path"].startswith(str(work.resolve()) + "/")


def test_globs_the_file_executor_cannot_hold_widen_to_their_directory() -> None:
    assert executor_scope("./src/*.py") == "./src/**"
    assert executor_scope("./a/*/b/**") == "./a/**"
    assert executor_scope("/srv/**") == "/srv/**"
    assert executor_scope("*.md") == "./**"
    assert executor_scope("~/notes/**") == str(Path.home() / "notes") + "/**"


def _spell(value: int, radix: str) -> str:
    return {"dec": str(value), "oct": "0" + format(value, "o"), "hex": hex(value)}[radix]


@st.composite
def ipv4_spellings(draw: st.DrawFn) -> str:
    """An internal IPv4 address written the way inet_aton reads it: 1 to 4 parts, each in
    decimal, octal or hex, the last part holding the remaining bytes."""
    address = draw(st.sampled_from([(169, 254, 169, 254), (127, 0, 0, 1), (10, 1, 2, 3),
                                    (192, 168, 0, 1), (0, 0, 0, 0), (172, 16, 5, 4)]))
    parts = draw(st.integers(min_value=1, max_value=4))
    head = list(address[:parts - 1])
    tail = 0
    for byte in address[parts - 1:]:
        tail = tail * 256 + byte
    radixes = draw(st.lists(st.sampled_from(["dec", "oct", "hex"]), min_size=parts,
                            max_size=parts))
    return ".".join(_spell(v, r) for v, r in zip([*head, tail], radixes, strict=True))


@settings(max_examples=80, deadline=None)
@given(ipv4_spellings(), st.sampled_from(["/", "/latest/meta-data/", "/admin"]))
def test_generated_internal_address_spellings_are_refused(spelling: str, path: str) -> None:
    p = policy([{"tool_class": "http"}])
    settings_ = ExecutorSettings(http=HttpSettings(system_dns=False))
    http = build_executors(p, working_dir=".", settings=settings_)["http"]
    result = http(tool_call("http", "get", url=f"http://{spelling}{path}"))
    assert result.status == "denied"
    assert reason(result).startswith("ssrf.")


@pytest.mark.parametrize("host", ["[::ffff:127.0.0.1]", "[::1]", "[::ffff:a9fe:a9fe]",
                                  "[64:ff9b::a9fe:a9fe]"])
def test_ipv6_forms_of_internal_addresses_are_refused(host: str) -> None:
    settings_ = ExecutorSettings(http=HttpSettings(system_dns=False))
    http = build_executors(policy([{"tool_class": "http"}]), working_dir=".",
                           settings=settings_)["http"]
    assert reason(http(tool_call("http", "get", url=f"http://{host}/"))).startswith("ssrf.")


def test_opened_address_and_static_hosts_reach_a_local_server() -> None:
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, *args: Any) -> None:
            return

    server = http.server.HTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        settings_ = ExecutorSettings(http=HttpSettings(
            allowed_addresses=("127.0.0.1",), hosts={"docs.example": "127.0.0.1"},
            system_dns=False))
        http = build_executors(policy([{"tool_class": "http"}]), working_dir=".",
                               settings=settings_)["http"]
        assert http(tool_call("http", "get", url=f"http://docs.example:{port}/")).output["body"] \
            == "hello"
        unknown = http(tool_call("http", "get", url=f"http://other.example:{port}/"))
        assert reason(unknown) == "http.resolve"
    finally:
        server.shutdown()
        server.server_close()


def test_static_resolver_falls_back_or_refuses() -> None:
    resolve = static_resolver({"A.example.": "127.0.0.2"}, fallback=None)
    assert resolve("a.example", 80) == ["127.0.0.2"]
    with pytest.raises(OSError):
        resolve("b.example", 80)
    fallback = static_resolver({}, fallback=lambda h, p: ["192.0.2.1"])
    assert fallback("b.example", 80) == ["192.0.2.1"]


def test_databases_are_the_configured_ones_the_grant_names(work: Path) -> None:
    with sqlite3.connect(work / "shop.db") as db:
        db.execute("CREATE TABLE orders (id INTEGER)")
        db.execute("CREATE TABLE staff (id INTEGER)")
    p = policy([{"tool_class": "database", "constraints": {
        "allowed_databases": ["shop"], "allowed_tables": ["orders"]}}],
        executors={"databases": {"shop": "shop.db", "hr": "hr.db"}})
    database = build_executors(p, working_dir=str(work))["database"]
    assert database(tool_call("database", "query", database="shop",
                         sql="SELECT count(*) FROM orders")).status == "ok"
    assert reason(database(tool_call("database", "query", database="shop",
                                sql="SELECT * FROM staff"))) == "sql.table"
    assert reason(database(tool_call("database", "query", database="hr",
                                sql="SELECT 1"))) == "sql.database"


def test_no_database_configured_means_no_database_executor(work: Path) -> None:
    built = build_executors(policy([{"tool_class": "database"}]), working_dir=str(work))
    assert "database" not in built and "retrieval" not in built


def test_shell_allow_list_comes_from_the_grants_and_declared_tools_get_their_sandbox(
        work: Path) -> None:
    p = policy([{"tool_class": "shell", "constraints": {"allowed_commands": ["ls"]}}],
               tools={"build": {"tool_class": "shell", "filesystem": {"read": ["./**"],
                                                                       "write": ["./out/**"]},
                                "network": "deny", "environment": "deny"}})
    built = build_executors(p, working_dir=str(work))
    assert isinstance(built["shell"], ShellExecutor) and isinstance(built["build"],
                                                                    ShellExecutor)
    assert built["shell"].allowed is not None and "ls" in built["shell"].allowed
    assert built["build"].policy.filesystem is not None
    refused = built["shell"](tool_call("shell", "exec", argv=["cat", "docs/a.md"]))
    assert reason(refused) == "shell.command-not-allowed"


def test_no_shell_grant_allows_no_program(work: Path) -> None:
    built = build_executors(policy([]), working_dir=str(work))
    refused = built["shell"](tool_call("shell", "exec", argv=["ls"]))
    assert reason(refused) == "shell.command-not-allowed"


def test_policy_file_sections_validate_strictly() -> None:
    with pytest.raises(ValueError):
        Policy.model_validate({"name": "p", "version": 1, "executors": {"htp": {}}})
    with pytest.raises(ValueError):
        Policy.model_validate({"name": "p", "version": 1, "guards": {"egress": {"x": 1}}})
    loaded = Policy.model_validate({"name": "p", "version": 1,
                                    "guards": {"egress": {"drip_budget_bytes": 10}}})
    assert loaded.guards is not None and loaded.guards.egress.drip_budget_bytes == 10


def test_a_file_scope_whose_root_is_symlinked_out_is_refused_unless_followed(
    work: Path, tmp_path_factory: Any
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (work / "build").symlink_to(elsewhere)
    constraints: dict[str, Any] = {"allowed_paths": ["./build/**"]}
    grant = {"tool_class": "file", "actions": ["write"], "constraints": constraints}
    with pytest.raises(ExecutorError, match="leads through a symlink"):
        build_executors(policy([grant]), working_dir=str(work))
    constraints["follow_symlinks"] = ["./build/**"]
    files = build_executors(policy([grant]), working_dir=str(work))["file"]
    # The kernel hands the executor the canonical path it checked.
    target = str(elsewhere.resolve() / "x")
    assert files(tool_call("file", "write", path=target, content="x")).status == "ok"
    assert (elsewhere / "x").read_text() == "x"


def test_a_scope_created_as_a_symlink_after_building_reaches_nothing_through_it(
    work: Path, tmp_path_factory: Any
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    grant = {"tool_class": "file", "actions": ["write"],
             "constraints": {"allowed_paths": ["./late/**"]}}
    files = build_executors(policy([grant]), working_dir=str(work))["file"]
    (work / "late").symlink_to(elsewhere)
    assert reason(files(tool_call("file", "write", path="late/x", content="x"))) != "ok"
    assert not (elsewhere / "x").exists()


@pytest.mark.parametrize("action", sorted(WRITE_ACTIONS))
def test_every_write_action_of_the_gate_gives_a_grant_a_write_scope(
    work: Path, action: str
) -> None:
    p = policy([{"tool_class": "file", "actions": [action],
                 "constraints": {"allowed_paths": ["./out/**"]}}])
    files = build_executors(p, working_dir=str(work))["file"]
    assert files(tool_call("file", "write", path="out/r.md", content="x")).status == "ok"


def test_configured_files_are_relative_to_the_working_directory_and_checked(
    work: Path, tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    (work / "corpus").mkdir()
    p = policy([], executors={"retrieval_root": "corpus", "retrieval_index": "index.db"})
    build_executors(p, working_dir=str(work))
    assert (work / "index.db").exists()
    (work / "db").symlink_to("/etc")
    bad = policy([{"tool_class": "database"}], executors={"databases": {"main": "db/app.db"}})
    with pytest.raises(ExecutorError, match="leads through a symlink"):
        build_executors(bad, working_dir=str(work))
