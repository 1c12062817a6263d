"""The compiled build: which modules it compiles, and (run on it) that they are the compiled ones.

``make test-native`` builds the wheel with the mypyc hook and runs the tests of the compiled
modules on it with ``CALLGATE_NATIVE=1``; the pure build runs this file too, and checks only
that the list of compiled modules names modules that exist.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import callgate

ROOT = Path(__file__).resolve().parents[1]
NATIVE = os.environ.get("CALLGATE_NATIVE") == "1"


def _compiled_modules() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    paths = config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]["include"]
    return [p.removeprefix("src/").removesuffix(".py").replace("/", ".") for p in paths]


def test_the_compiled_modules_are_modules_of_the_package() -> None:
    modules = _compiled_modules()
    assert modules and len(set(modules)) == len(modules)
    for name in modules:
        assert (ROOT / "src" / (name.replace(".", "/") + ".py")).is_file(), name


def test_the_build_hook_is_off_unless_asked_for() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    hook = config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]
    assert hook["enable-by-default"] is False  # a plain install needs no compiler


@pytest.mark.skipif(not NATIVE, reason="runs on the compiled build (make test-native)")
def test_on_the_compiled_build_every_listed_module_is_an_extension_outside_the_tree() -> None:
    assert not Path(callgate.__file__).resolve().is_relative_to(ROOT / "src")
    for name in _compiled_modules():
        module = importlib.import_module(name)
        assert module.__file__ is not None and module.__file__.endswith(".so"), name


def test_the_docs_list_exactly_the_compiled_modules() -> None:
    text = (ROOT / "docs" / "kernel.md").read_text(encoding="utf-8")
    section = text.split("## The compiled build", 1)[1].split("\n## ", 1)[0]
    listed = set()
    for package, modules in re.findall(r"^\| `(callgate\.\w+)` \| (.+) \|$", section, re.M):
        listed |= {f"{package}.{name}" for name in re.findall(r"`(\w+)`", modules)}
    assert listed == set(_compiled_modules())


_SUSPEND = """
import base64, sys
from pathlib import Path
from tests.kernel.test_suspend import _stateful_run
print(base64.b64encode(_stateful_run(Path(sys.argv[1])).suspend()).decode())
"""
_RESUME = """
import base64, sys
from pathlib import Path
from callgate import Kernel
from callgate.policy import parse_policy
from tests.kernel.test_suspend import STATEFUL
kernel = Kernel(parse_policy(STATEFUL), working_dir=Path(sys.argv[1]), run_id="r",
                resume=base64.b64decode(sys.stdin.read()))
print(kernel.run_state.quarantine is not None, len(kernel._tokens._tokens))
"""


@pytest.mark.skipif(not NATIVE, reason="runs on the compiled build (make test-native)")
def test_a_run_suspended_on_one_build_resumes_on_the_other(tmp_path: Path) -> None:
    pure = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    compiled = {**os.environ, "PYTHONPATH": f"{os.environ['PYTHONPATH']}{os.pathsep}{ROOT}"}
    for made, read in ((pure, compiled), (compiled, pure)):
        blob = subprocess.run([sys.executable, "-c", _SUSPEND, str(tmp_path)], env=made,
                              cwd=ROOT, capture_output=True, text=True, check=True).stdout
        out = subprocess.run([sys.executable, "-c", _RESUME, str(tmp_path)], env=read,
                             cwd=ROOT, input=blob, capture_output=True, text=True, check=True)
        assert out.stdout.split() == ["True", "2"]


@pytest.mark.skipif(NATIVE, reason="the pure build's own check")
def test_the_source_tree_holds_no_compiled_module() -> None:
    # the mypyc hook compiles in place: an extension left beside its source would be imported
    # instead of it, and the pure build's tests would run compiled code unawares
    assert [p for p in (ROOT / "src").rglob("*.so")] == []
    assert importlib.import_module("callgate.kernel._kernel").__file__.endswith(".py")
