"""Module paths of the earlier layout keep working: each is the module that holds it now."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

from callgate import _aliases

# the extras a moved module may need; without them it cannot be imported under either name
_NEEDS_EXTRA = {"callgate.temporal._smt": "z3", "callgate.executors._http": "httpx",
                "callgate.executors._database": "sqlglot"}


@pytest.mark.parametrize(("old", "new"), sorted(_aliases.MOVED.items()))
def test_an_old_module_path_is_the_module_now_holding_it(old: str, new: str) -> None:
    extra = _NEEDS_EXTRA.get(new)
    if extra is not None:
        pytest.importorskip(extra)
    assert importlib.import_module(old) is importlib.import_module(new)


def test_names_import_from_their_old_modules() -> None:
    from callgate.audit.store import AuditStore
    from callgate.presets import load_preset
    from callgate.sandbox.executor import SubprocessExecutor
    from callgate.temporal.parser import parse_statement

    assert AuditStore is importlib.import_module("callgate.audit").AuditStore
    assert load_preset is importlib.import_module("callgate.policy").load_preset
    assert SubprocessExecutor.__module__ == "callgate.sandbox._executor"
    assert parse_statement("bresp[3](action = a, action = b)").bound == 3


def test_an_old_path_imported_first_in_a_fresh_interpreter_works() -> None:
    # nothing imported beforehand: the hook is installed by importing the package on the way
    code = ("import callgate.temporal.cli as c, callgate.cli._check as k; "
            "assert c is k and c.check_command.name == 'check'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr


def test_an_unknown_module_under_callgate_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("callgate.audit.nothing_here")


def test_a_module_imported_by_its_old_name_keeps_its_own_spec() -> None:
    # a package reached by its old path is still a package: its data files stay readable
    code = ("import importlib.resources, callgate.presets, callgate.policy.presets as p\n"
            "assert p.__spec__.name == 'callgate.policy.presets'\n"
            "assert p.__spec__.submodule_search_locations\n"
            "assert importlib.resources.files('callgate.policy.presets').joinpath("
            "'strict.yaml').is_file()\n"
            "from callgate.presets import preset_names; assert 'strict' in preset_names()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("old", "new"), sorted(_aliases.MOVED.items()))
def test_an_old_path_never_stands_in_for_a_name_its_package_uses(old: str, new: str) -> None:
    # importing ``pkg.name`` sets the attribute ``name`` of ``pkg`` to the module: a function
    # of the package called ``name`` would be replaced by it for the package's own code
    parent, _, child = old.rpartition(".")
    held = vars(importlib.import_module(parent)).get(child)
    assert held is None or isinstance(held, types.ModuleType), (
        f"{parent} uses the name {child!r} for a {type(held).__name__}; importing {old} "
        "would replace it with a module")
