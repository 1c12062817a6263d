"""What a ``callgate`` process deciding one call loads: no extra it does not use, no YAML on a
warm policy cache, the command catalog from its compiled form, the collector back on.

Each run is a fresh process started as the console script starts it (``callgate._entry``), with
its own ``XDG_CACHE_HOME`` (``conftest.private_cache``); what it loaded is read from
``sys.modules`` at its end, never from timing (``benchmarks/bench_cli.py`` times it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from callgate.abstraction import _catalog
from tests.conftest import EXAMPLE

ROOT = Path(__file__).resolve().parents[2]
#: Extras and heavy packages no single-call command uses.
NEVER = ("z3", "httpx", "starlette", "uvicorn", "mcp", "opentelemetry", "sqlglot", "psycopg")
#: What a warm policy cache spares: the YAML parser and the loader's YAML stage.
WARM_SPARES = ("yaml", "callgate.policy._compose")
#: What a command given no audit log spares: the stores.
NO_LOG_SPARES = ("callgate.audit._store", "callgate.audit._open", "sqlite3")
CALL = {"tool": "fetch", "tool_class": "http", "action": "get",
        "parameters": {"url": "https://api.github.com/repos/x/y"}}
STATEMENTS = """\
name: coding
version: 1
behavior:
  - id: no-env-upload
    rule: abs(action = curl and data_file ~ "*.env*")
"""
SHELL = {"tool": "Bash", "parameters": {"command": "ls -la"}, "status": "ok", "output": "x"}

# The program as the console script runs it; at exit, the packages it loaded and the state of
# the cyclic garbage collector, on stderr (stdout is the command's).
SCRIPT = """\
import atexit, gc, json, sys

def report():
    import os
    loaded = sorted({name.partition(".")[0] for name in sys.modules} | set(sys.modules))
    loader = sys.modules.get("pydantic.plugin._loader")
    sys.stderr.write("\\nREPORT " + json.dumps({
        "loaded": loaded, "collecting": gc.isenabled(), "frozen": gc.get_freeze_count(),
        "plugins_variable": os.environ.get("PYDANTIC_DISABLE_PLUGINS"),
        "plugins_looked_up": loader is not None and loader._plugins is not None}) + "\\n")

atexit.register(report)
sys.argv = ["callgate", *sys.argv[1:]]
from callgate._entry import main
main()
"""


def start(args: list[str], cwd: Path, stdin: str = "", env: dict[str, str] | None = None
          ) -> tuple[str, dict[str, object]]:
    """Run ``callgate ARGS`` in a fresh process (the environment without
    ``PYDANTIC_DISABLE_PLUGINS``, plus ``env``): its output and what it reported at exit."""
    environ = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, *args], input=stdin, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**environ, **(env or {})})
    report = done.stderr.rpartition("\nREPORT ")[2]
    assert report, done.stderr
    return done.stdout, json.loads(report)


def loaded_of(report: dict[str, object], names: tuple[str, ...]) -> list[str]:
    loaded = report["loaded"]
    assert isinstance(loaded, list)
    return [name for name in names if name in loaded]


def test_decide_on_a_warm_cache_loads_no_yaml_and_no_extra(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "agent.yaml")
    args = ["decide", "--policy", "agent.yaml"]
    cold_out, cold = start(args, tmp_path, json.dumps(CALL) + "\n")
    warm_out, warm = start(args, tmp_path, json.dumps(CALL) + "\n")
    assert json.loads(warm_out)["verdict"] == "allow"
    assert warm_out == cold_out
    assert loaded_of(cold, WARM_SPARES) == list(WARM_SPARES)  # validated, then cached
    assert loaded_of(warm, (*NEVER, *WARM_SPARES, *NO_LOG_SPARES, "tree_sitter")) == []
    logged_out, logged = start([*args, "--audit", "audit.db"], tmp_path, json.dumps(CALL) + "\n")
    assert logged_out == warm_out
    assert loaded_of(logged, NO_LOG_SPARES) == list(NO_LOG_SPARES)


def test_check_of_a_shell_call_on_a_warm_cache_loads_no_yaml_and_no_extra(
        tmp_path: Path) -> None:
    (tmp_path / "coding.yaml").write_text(STATEMENTS)
    (tmp_path / "trace.jsonl").write_text(json.dumps(SHELL) + "\n")
    args = ["check", "--policy", "coding.yaml", "trace.jsonl"]
    start(args, tmp_path)
    out, warm = start(args, tmp_path)
    assert "1 statement(s) hold" in out
    assert loaded_of(warm, (*NEVER, *WARM_SPARES, "callgate.kernel")) == []


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_exec_on_a_warm_cache_loads_no_yaml_and_no_extra(tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "builder.yaml", tmp_path / "builder.yaml")
    (tmp_path / "src").mkdir()
    (tmp_path / "build").mkdir()
    args = ["exec", "--policy", "builder.yaml", "--tool", "builder", "--", "echo", "built"]
    start(args, tmp_path)
    out, warm = start(args, tmp_path)
    assert out == "built\n"
    assert loaded_of(warm, (*NEVER, *WARM_SPARES, *NO_LOG_SPARES)) == []


def test_the_collector_is_on_again_once_the_command_is_loaded(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "agent.yaml")
    _, report = start(["decide", "--policy", "agent.yaml"], tmp_path, json.dumps(CALL))
    assert report["collecting"] is True
    frozen = report["frozen"]
    assert isinstance(frozen, int) and frozen > 0  # start-up's objects, kept out of collections


def test_help_still_names_every_command_through_the_console_script(tmp_path: Path) -> None:
    out, report = start(["--help"], tmp_path)
    assert "decide" in out and "exec" in out
    assert loaded_of(report, ("pydantic", "callgate.kernel", "yaml")) == []
    assert report["collecting"] is True


# --------------------------------------------------------------------------- the catalog's JSON


def shipped(name: str) -> bytes:
    return resources.files("callgate.abstraction").joinpath(name).read_bytes()


def test_the_shipped_catalog_json_is_the_catalog_yaml_compiled() -> None:
    assert shipped(_catalog.COMPILED).decode() == \
        _catalog.compiled_catalog(shipped(_catalog.SOURCE)), \
        "catalog.yaml changed: python -c 'import callgate.abstraction._catalog as c; " \
        "c.write_compiled()'"


def test_the_catalog_read_from_json_is_the_catalog_read_from_yaml() -> None:
    from_json = _catalog.parse_catalog(json.loads(shipped(_catalog.COMPILED))["catalog"])
    from_yaml = _catalog.parse_catalog(_catalog._yaml_data(shipped(_catalog.SOURCE)))
    assert from_json == from_yaml
    assert _catalog.default_catalog() == from_yaml


def catalog_folder(tmp_path: Path, yaml_text: bytes, json_text: bytes | None) -> Path:
    (tmp_path / _catalog.SOURCE).write_bytes(yaml_text)
    if json_text is not None:
        (tmp_path / _catalog.COMPILED).write_bytes(json_text)
    return tmp_path


def test_an_edited_catalog_is_read_from_its_yaml_until_compiled_again(tmp_path: Path) -> None:
    edited = shipped(_catalog.SOURCE).replace(b"  rmdir:\n", b"  rmdir-edited:\n", 1)
    folder = catalog_folder(tmp_path, edited, shipped(_catalog.COMPILED))
    data = _catalog.catalog_data(folder)
    assert "rmdir-edited" in data["programs"] and "rmdir" not in data["programs"]
    assert _catalog.write_compiled(folder) == folder / _catalog.COMPILED
    assert json.loads((folder / _catalog.COMPILED).read_bytes())["source_sha256"] == \
        hashlib.sha256(edited).hexdigest()
    assert _catalog.parse_catalog(_catalog.catalog_data(folder)) == \
        _catalog.parse_catalog(data)


@pytest.mark.parametrize("json_text", [None, b"{not json", b"[]", b'{"catalog": {}}'])
def test_a_missing_or_damaged_catalog_json_leaves_the_yaml(tmp_path: Path,
                                                          json_text: bytes | None) -> None:
    folder = catalog_folder(tmp_path, shipped(_catalog.SOURCE), json_text)
    assert _catalog.catalog_data(folder) == _catalog._yaml_data(shipped(_catalog.SOURCE))


def test_a_catalog_json_cannot_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="JSON"):
        _catalog.compiled_catalog(b"programs: {}\nwrappers: {}\nshells: []\nwhen: 2024-01-01\n")


def test_pydantic_plugins_are_not_looked_up_and_the_environment_is_left_as_it_was(
        tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "agent.yaml")
    args = ["decide", "--policy", "agent.yaml"]
    out, report = start(args, tmp_path, json.dumps(CALL) + "\n")
    assert json.loads(out)["verdict"] == "allow"
    assert report["plugins_looked_up"] is False  # no distribution's entry points were scanned
    assert report["plugins_variable"] is None  # what the command and its children see
    _, chosen = start(args, tmp_path, json.dumps(CALL) + "\n",
                      env={"PYDANTIC_DISABLE_PLUGINS": "some-plugin"})
    assert chosen["plugins_variable"] == "some-plugin"  # a user's own setting is kept


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_exec_leaves_without_teardown_yet_runs_its_exit_handlers(tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "builder.yaml", tmp_path / "builder.yaml")
    (tmp_path / "src").mkdir()
    (tmp_path / "build").mkdir()
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    done = subprocess.run(
        [str(Path(sys.executable).with_name("callgate")), "exec", "--policy", "builder.yaml",
         "--tool", "builder", "--", "sh", "-c", "echo out; echo err >&2; exit 3"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "TMPDIR": str(temporary)})
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    # the sandbox made its mask directory there and removed it at exit (an exit handler)
    assert list(temporary.iterdir()) == []
