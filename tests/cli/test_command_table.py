"""``callgate`` lists every command from its table, and loads a command only to run it."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from callgate.cli import COMMANDS, main


def _command(name: str) -> click.Command:
    module, attribute, _ = COMMANDS[name]
    command = getattr(importlib.import_module(module), attribute)
    assert isinstance(command, click.Command)
    return command


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_table_names_each_command_by_its_own_name_and_first_paragraph(name: str) -> None:
    command = _command(name)
    assert command.name == name
    first = inspect.cleandoc(command.help or "").split("\n\n")[0].replace("\n", " ")
    assert COMMANDS[name][2] == first


def test_the_help_is_what_an_eager_group_of_the_same_commands_prints() -> None:
    eager = click.Group("callgate", help=main.help, params=list(main.params))
    for name in main.list_commands(click.Context(main)):
        eager.add_command(_command(name))
    lazy = CliRunner().invoke(main, ["--help"], prog_name="callgate")
    same = CliRunner().invoke(eager, ["--help"], prog_name="callgate")
    assert lazy.exit_code == same.exit_code == 0
    assert lazy.output == same.output


def test_help_loads_neither_the_models_nor_the_kernel() -> None:
    code = ("import sys\nfrom callgate.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "loaded = [m for m in ('pydantic', 'callgate.kernel', 'yaml') if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "decide" in done.stdout


def test_an_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["decidee"])
    assert result.exit_code == 2
    assert "No such command 'decidee'" in result.output
