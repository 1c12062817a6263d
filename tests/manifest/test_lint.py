"""Declare-vs-do: each capability pattern is caught, through aliases and helpers; clean passes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from callgate.manifest import Finding, ManifestError, lint_module
from tests.manifest.conftest import TOOLS_MODULE

HEADER = """\
import callgate
from callgate import ToolPolicy, declare

"""


def lint_source(tmp_path: Path, body: str, name: str = "tools_under_test") -> list[Finding]:
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER + textwrap.dedent(body))
    return lint_module(str(path))


def single_tool(imports: str, statement: str, policy: str = "ToolPolicy()") -> str:
    return f"""
{imports}

@declare({policy})
def tool(path: str = "x", url: str = "http://127.0.0.1:9") -> object:
    return {statement}
"""


# (imports, statement, expected rule id, a policy that grants it)
PATTERNS: list[tuple[str, str, str, str, str]] = [
    ("open write", "", "open(path, 'w')", "lint.filesystem.write",
     "ToolPolicy(filesystem={'write': ['./out/**']})"),
    ("open append keyword", "", "open(path, mode='a')", "lint.filesystem.write",
     "ToolPolicy(filesystem={'write': ['./out/**']})"),
    ("open exclusive", "", "open(path, 'xb')", "lint.filesystem.write",
     "ToolPolicy(filesystem={'write': ['./out/**']})"),
    ("open update", "", "open(path, 'r+')", "lint.filesystem.write",
     "ToolPolicy(filesystem={'write': ['./out/**']})"),
    ("open computed mode", "", "open(path, path)", "lint.filesystem.write",
     "ToolPolicy(filesystem={'write': ['./out/**']})"),
    ("open read", "", "open(path)", "lint.filesystem.read",
     "ToolPolicy(filesystem={'read': ['./data/**']})"),
    ("io.open alias", "from io import open as io_open", "io_open(path, 'w')",
     "lint.filesystem.write", "ToolPolicy(filesystem={'write': ['./**']})"),
    ("pathlib write_text", "from pathlib import Path as P", "P(path).write_text('x')",
     "lint.filesystem.write", "ToolPolicy(filesystem={'write': ['./**']})"),
    ("pathlib write_bytes", "import pathlib", "pathlib.Path(path).write_bytes(b'x')",
     "lint.filesystem.write", "ToolPolicy(filesystem={'write': ['./**']})"),
    ("pathlib open append", "from pathlib import Path", "(Path(path) / 'a').open('a')",
     "lint.filesystem.write", "ToolPolicy(filesystem={'write': ['./**']})"),
    ("pathlib unlink", "from pathlib import Path", "Path(path).unlink()",
     "lint.filesystem.write", "ToolPolicy(filesystem={'write': ['./**']})"),
    ("pathlib rename", "from pathlib import Path", "Path(path).resolve().rename('b')",
     "lint.filesystem.write", "ToolPolicy(filesystem={'write': ['./**']})"),
    ("pathlib unbound method", "from pathlib import Path", "Path.write_text(Path(path), 'x')",
     "lint.filesystem.write", "ToolPolicy(filesystem={'write': ['./**']})"),
    ("pathlib read_text", "from pathlib import Path", "Path(path).read_text()",
     "lint.filesystem.read", "ToolPolicy(filesystem={'read': ['./**']})"),
    ("os.remove", "import os", "os.remove(path)", "lint.filesystem.write",
     "ToolPolicy(filesystem={'write': ['./**']})"),
    ("os.unlink alias", "from os import unlink as rm", "rm(path)", "lint.filesystem.write",
     "ToolPolicy(filesystem={'write': ['./**']})"),
    ("os.open for writing", "import os", "os.open(path, os.O_WRONLY | os.O_CREAT)",
     "lint.filesystem.write", "ToolPolicy(filesystem={'write': ['./**']})"),
    ("os.open read-only", "import os", "os.open(path, os.O_RDONLY)", "lint.filesystem.read",
     "ToolPolicy(filesystem={'read': ['./**']})"),
    ("os.rmdir module alias", "import os as operating", "operating.rmdir(path)",
     "lint.filesystem.write", "ToolPolicy(filesystem={'write': ['./**']})"),
    ("shutil", "import shutil as sh", "sh.copytree(path, 'b')", "lint.filesystem.write",
     "ToolPolicy(filesystem={'write': ['./**']})"),
    ("shutil from import", "from shutil import rmtree", "rmtree(path)", "lint.filesystem.write",
     "ToolPolicy(filesystem={'write': ['./**']})"),
    ("subprocess", "import subprocess", "subprocess.run(['ls'])", "lint.exec",
     "ToolPolicy(exec='allow')"),
    ("subprocess alias", "import subprocess as sp", "sp.Popen(['ls'])", "lint.exec",
     "ToolPolicy(exec='allow')"),
    ("subprocess from import", "from subprocess import check_output as co", "co(['ls'])",
     "lint.exec", "ToolPolicy(exec='allow')"),
    ("os.system", "import os", "os.system('ls')", "lint.exec", "ToolPolicy(exec='allow')"),
    ("os.popen", "from os import popen", "popen('ls')", "lint.exec",
     "ToolPolicy(exec='allow')"),
    ("os.exec", "import os", "os.execvp('ls', ['ls'])", "lint.exec",
     "ToolPolicy(exec='allow')"),
    ("socket", "import socket", "socket.create_connection(('127.0.0.1', 9))", "lint.network",
     "ToolPolicy(network='allow')"),
    ("socket alias", "from socket import socket as sock", "sock()", "lint.network",
     "ToolPolicy(network='allow')"),
    ("httpx", "import httpx", "httpx.get(url)", "lint.network", "ToolPolicy(network='allow')"),
    ("httpx client", "import httpx as hx", "hx.Client().get(url)", "lint.network",
     "ToolPolicy(network={'hosts': ['a.org'], 'proxy': 'http://127.0.0.1:3128'})"),
    # Not installed here: the import may fail at run time, the source still says what it does.
    ("requests", "try:\n    import requests\nexcept ImportError:\n    pass",
     "requests.post(url)", "lint.network",
     "ToolPolicy(network='allow')"),
    ("urllib", "from urllib import request", "request.urlopen(url)", "lint.network",
     "ToolPolicy(network='allow')"),
    ("urllib full", "import urllib.request", "urllib.request.urlopen(url)", "lint.network",
     "ToolPolicy(network='allow')"),
    ("aiohttp", "try:\n    import aiohttp\nexcept ImportError:\n    pass",
     "aiohttp.ClientSession()", "lint.network",
     "ToolPolicy(network='allow')"),
    ("os.environ subscript", "import os", "os.environ['HOME']", "lint.environment",
     "ToolPolicy(environment={'allow': ['HOME']})"),
    ("os.environ from import", "from os import environ as env", "env.get('HOME')",
     "lint.environment", "ToolPolicy(environment={'allow': ['HOME']})"),
    ("getenv", "import os", "os.getenv('HOME')", "lint.environment",
     "ToolPolicy(environment={'allow': ['HOME']})"),
    ("getenv alias", "from os import getenv as ge", "ge('HOME')", "lint.environment",
     "ToolPolicy(environment={'allow': ['HOME']})"),
    ("environ copied", "import os", "dict(os.environ)", "lint.environment",
     "ToolPolicy(environment={'allow': ['HOME']})"),
    ("module-level alias", "import subprocess\nrun = subprocess.run", "run(['ls'])",
     "lint.exec", "ToolPolicy(exec='allow')"),
    ("local alias", "import os", "(lambda f: f)(os.system)", "lint.exec",
     "ToolPolicy(exec='allow')"),
]


@pytest.mark.parametrize(("imports", "statement", "rule", "grant"), [p[1:] for p in PATTERNS],
                         ids=[p[0] for p in PATTERNS])
def test_each_capability_pattern_is_caught_and_passes_once_declared(
        tmp_path: Path, imports: str, statement: str, rule: str, grant: str) -> None:
    findings = lint_source(tmp_path, single_tool(imports, statement), "denied_tools")
    assert rule in [f.rule_id for f in findings]
    assert all(f.tool == "tool" and f.severity == "error" for f in findings)
    assert lint_source(tmp_path, single_tool(imports, statement, grant), "granted_tools") == []


def test_finding_names_the_line_and_the_missing_declaration(tmp_path: Path) -> None:
    findings = lint_source(tmp_path, """
        import subprocess

        @declare(ToolPolicy(exec="deny"), name="build")
        def build_tool() -> None:
            x = 1
            subprocess.run(["make"], check=True)
    """)
    assert len(findings) == 1
    finding = findings[0]
    assert finding.line == 10
    assert finding.tool == "build"
    assert str(finding).startswith("[error] lint.exec build: ")
    assert ":10: subprocess.run" in finding.message
    assert "exec: allow" in finding.message


def test_helper_functions_in_the_module_are_followed(tmp_path: Path) -> None:
    findings = lint_source(tmp_path, """
        import os

        def _inner(path):
            os.remove(path)

        def _outer(path):
            _inner(path)

        def _recursive(n):
            return _recursive(n - 1) if n else 0

        @declare(ToolPolicy(filesystem={"write": []}))
        def clean(path: str) -> None:
            _recursive(3)
            _outer(path)
    """)
    assert [(f.rule_id, f.line) for f in findings] == [("lint.filesystem.write", 19)]
    assert "via _outer -> _inner (line 8)" in findings[0].message


def test_mutually_recursive_helpers_are_followed_from_every_tool(tmp_path: Path) -> None:
    findings = lint_source(tmp_path, """
        import subprocess

        def _ping(n):
            return _pong(n - 1) if n else 0

        def _pong(n):
            subprocess.run(["true"])
            return _ping(n)

        @declare(ToolPolicy(), name="first")
        def first() -> int:
            return _ping(3)

        @declare(ToolPolicy(), name="second")
        def second() -> int:
            return _pong(3)
    """)
    assert sorted((f.tool, f.rule_id) for f in findings) == [("first", "lint.exec"),
                                                              ("second", "lint.exec")]


def test_methods_of_a_class_built_by_the_tool_are_followed(tmp_path: Path) -> None:
    findings = lint_source(tmp_path, """
        import shutil

        class Archive:
            def __init__(self, root):
                self.root = root

            def pack(self):
                shutil.make_archive(self.root, "zip")

        @declare(ToolPolicy(filesystem={"read": ["./**"]}))
        def archive(root: str) -> None:
            Archive(root).pack()
    """)
    assert [f.rule_id for f in findings] == ["lint.filesystem.write"]
    assert "via Archive (line 12)" in findings[0].message


def test_helper_passed_as_a_callback_is_followed(tmp_path: Path) -> None:
    findings = lint_source(tmp_path, """
        import subprocess

        def _run(cmd):
            return subprocess.run(cmd)

        @declare(ToolPolicy())
        def many(cmds: list) -> list:
            return list(map(_run, cmds))
    """)
    assert [f.rule_id for f in findings] == ["lint.exec"]


@pytest.mark.parametrize("statement", [
    "eval('__import__(\"os\").system(\"ls\")')",
    "__import__('subprocess').run(['ls'])",
    "importlib.import_module('sub' + 'process')",
    "getattr(os, 'sys' + 'tem')('ls')",
])
def test_code_that_cannot_be_seen_through_fails_whatever_the_policy(
        tmp_path: Path, statement: str) -> None:
    grant_all = ("ToolPolicy(filesystem={'read': ['/**'], 'write': ['/**']}, exec='allow', "
                 "network='allow', environment={'allow': ['HOME']})")
    findings = lint_source(tmp_path, single_tool("import importlib\nimport os", statement,
                                                 grant_all))
    assert [f.rule_id for f in findings] == ["lint.dynamic"]
    assert "cannot be checked" in findings[0].message


def test_getattr_on_ordinary_objects_is_not_dynamic(tmp_path: Path) -> None:
    assert lint_source(tmp_path, single_tool("", "getattr(path, 'upper')()")) == []


def test_environment_variable_must_be_among_the_declared_ones(tmp_path: Path) -> None:
    findings = lint_source(tmp_path, """
        import os

        @declare(ToolPolicy(environment={"allow": ["HOME"]}))
        def env_tool() -> tuple:
            return os.environ["HOME"], os.getenv("AWS_SECRET_ACCESS_KEY")
    """)
    assert [f.rule_id for f in findings] == ["lint.environment"]
    assert "AWS_SECRET_ACCESS_KEY" in findings[0].message


def test_unspecified_counts_as_not_granted(tmp_path: Path) -> None:
    findings = lint_source(tmp_path, """
        import os

        @declare(ToolPolicy(filesystem={"read": ["./**"]}))
        def writer(path: str) -> None:
            with open(path, "w") as handle:
                handle.write(os.getenv("X", ""))
    """)
    assert sorted(f.rule_id for f in findings) == ["lint.environment", "lint.filesystem.write"]


def test_declaring_more_than_used_passes(tmp_path: Path) -> None:
    assert lint_source(tmp_path, """
        @declare(ToolPolicy(filesystem={"read": ["./**"], "write": ["./**"]}, exec="allow",
                            network="allow", environment={"allow": ["HOME"]}))
        def idle(text: str) -> str:
            return text.replace("a", "b").upper()
    """) == []


def test_write_glob_grants_reads(tmp_path: Path) -> None:
    assert lint_source(tmp_path, """
        @declare(ToolPolicy(filesystem={"write": ["./out/**"]}))
        def append(path: str) -> str:
            with open(path) as handle:
                return handle.read()
    """) == []


def test_kernel_tools_and_callgate_declare_are_both_found(tmp_path: Path) -> None:
    findings = lint_source(tmp_path, """
        import subprocess
        from callgate import Kernel, Policy

        kernel = Kernel(Policy(name="p", version=1))

        @kernel.tool(policy=ToolPolicy(exec="deny"))
        def by_kernel() -> None:
            subprocess.run(["ls"])

        @callgate.declare(ToolPolicy(exec="deny"))
        def by_declare() -> None:
            subprocess.run(["ls"])

        def not_a_tool() -> None:
            subprocess.run(["ls"])
    """)
    assert sorted(f.tool for f in findings) == ["by_declare", "by_kernel"]


def test_string_methods_named_like_path_methods_are_not_writes(tmp_path: Path) -> None:
    assert lint_source(tmp_path, """
        @declare(ToolPolicy(filesystem={"read": [], "write": []}))
        def rename(text: str) -> str:
            return text.replace("a", "b").encode().decode()
    """) == []


def test_decorated_tool_without_a_policy_fails(tmp_path: Path) -> None:
    findings = lint_source(tmp_path, """
        from callgate import Kernel, Policy

        kernel = Kernel(Policy(name="p", version=1))

        @kernel.tool()
        def undeclared() -> None:
            pass
    """)
    assert [f.rule_id for f in findings] == ["lint.policy.missing"]


def test_example_module_is_clean() -> None:
    assert lint_module(str(TOOLS_MODULE)) == []


def test_module_by_dotted_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "lintpkg_for_tests"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tools.py").write_text(HEADER + single_tool("import os", "os.system('ls')"))
    monkeypatch.syspath_prepend(str(tmp_path))
    findings = lint_module("lintpkg_for_tests.tools")
    assert [f.rule_id for f in findings] == ["lint.exec"]
    assert findings[0].message.startswith("lintpkg_for_tests.tools:")


def test_unimportable_or_unparsable_module_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "syntax_error_tools.py"
    bad.write_text("def broken(:\n")
    with pytest.raises(ManifestError, match="cannot import"):
        lint_module(str(bad))
    with pytest.raises(ManifestError, match="no such file"):
        lint_module(str(tmp_path / "missing.py"))
