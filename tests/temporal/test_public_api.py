"""The package facade exports exactly what it lists."""

from __future__ import annotations

import click

import callgate.temporal as temporal


def test_all_lists_each_name_once_and_every_name_is_exported() -> None:
    assert len(set(temporal.__all__)) == len(temporal.__all__)
    for name in temporal.__all__:
        assert hasattr(temporal, name), name


def test_the_kernel_api_is_present_and_the_check_command_still_answers_from_here() -> None:
    for name in ("parse_statement", "compile_behavior", "BehaviorSet", "Violation", "Monitor",
                 "load_trace"):
        assert name in temporal.__all__
    # the language holds no command line; the command's old name delegates to its one home
    from callgate.cli._check import check_command

    assert "check_command" not in temporal.__all__
    assert temporal.check_command is check_command
    assert isinstance(temporal.check_command, click.Command)
    assert temporal.check_command.name == "check"
