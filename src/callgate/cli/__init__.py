"""The ``callgate`` command line: a thin layer over the public API, one module per command group.

Exit codes: 0 done (whatever the verdicts), 1 a check failed (broken audit chain, unsafe trace),
2 bad input (a policy that does not load, an unreadable file). A line of input that is not a
call (not UTF-8, not JSON, nested too deep, too long) is one denied, audited decision; the lines
after it are decided as usual.

``main`` knows every command by name, module and one-line help, and imports a command's module
only when that command runs: ``callgate --help`` loads neither the models nor the kernel.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

#: command name -> (module, attribute, one-line help as the command itself states it)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "approvals": ("callgate.cli._serve", "approvals_group",
                  "List and answer the sidecar's pending approvals (with an approver key)."),
    "audit": ("callgate.cli._audit", "audit_group",
              "Verify, read and export audit logs; manage their signed checkpoints."),
    "check": ("callgate.cli._check", "check_command",
              "Judge a recorded TRACE (or --db/--run) against a policy's behavior statements."),
    "compile": ("callgate.cli._compile", "compile_command",
                "Compile a skill's specification (SKILL.md) into behavior statements over a "
                "run's signature."),
    "decide": ("callgate.cli._decide", "decide",
               "Decide tool calls read as JSON lines on stdin (one run, in order)."),
    "demo": ("callgate.cli._demo", "demo",
             "A scripted agent run: prompt injection, credential theft attempt, quarantine, "
             "audit."),
    "doctor": ("callgate.cli._claude_code", "doctor_group",
               "Check that an integration is installed and working."),
    "eval": ("callgate.cli._eval", "eval_group",
             "Measure a monitor's detection on recorded agent runs."),
    "exec": ("callgate.cli._decide", "exec_",
             "Run COMMAND as a declared subprocess tool, through the kernel and its OS sandbox."),
    "hook": ("callgate.cli._claude_code", "hook_group",
             "Answer an agent's hook events (run by the agent, not by hand)."),
    "init": ("callgate.cli._claude_code", "init_group",
             "Install callgate into an agent's settings."),
    "keys": ("callgate.cli._serve", "keys_group",
             "Create and revoke the sidecar's API keys."),
    "lint-tools": ("callgate.cli._manifest", "lint_tools_command",
                   "Fail (exit 1) if a tool in MODULE (.py file or module name) uses an "
                   "undeclared capability."),
    "manifest": ("callgate.cli._manifest", "manifest_group",
                 "The permission manifest: what every tool may touch, and checks that it only "
                 "narrows."),
    "mcp": ("callgate.cli._mcp", "mcp_group",
            "Put callgate in front of MCP servers: proxy, serve, wrap, trust, pins."),
    "policy": ("callgate.cli._policy", "policy",
               "Work with policy files."),
    "replay": ("callgate.cli._replay", "replay_command",
               "Replay a recorded run (--audit DB --run ID, or a TRACE file) and diff its "
               "decisions."),
    "run": ("callgate.cli._run", "run_command",
            "Execute tool calls read as JSON lines on stdin through the kernel and its "
            "executors."),
    "serve": ("callgate.cli._serve", "serve_command",
              "Serve the kernel over HTTP: the sidecar every tool call of an agent goes through."),
}

#: the extras a command needs; without them it is not offered
_NEEDS: dict[str, tuple[str, ...]] = {"run": ("httpx", "sqlglot"), "mcp": ("mcp",),
                                      "serve": ("starlette", "uvicorn", "httpx", "sqlglot"),
                                      "approvals": ("httpx",)}


def _available(name: str) -> bool:
    return all(importlib.util.find_spec(extra) is not None for extra in _NEEDS.get(name, ()))


def preload(names: list[str]) -> None:
    """Import now the module of the command ``names`` starts with, when it is one offered (the
    module the command imports when it runs; ``callgate._entry`` imports it at start-up)."""
    if names and names[0] in COMMANDS and _available(names[0]):
        importlib.import_module(COMMANDS[names[0]][0])


class _LazyGroup(click.Group):
    """A group whose commands are imported when they are run, not when help is printed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if _available(name))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS or not _available(cmd_name):
            return None
        module, attribute, _ = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # as click would print them, from the table instead of the imported commands
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = [(name, click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit))
                for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup)
@click.version_option(package_name="callgate")
def main() -> None:
    """callgate: decide, audit and confine the tool calls of AI agents."""


if __name__ == "__main__":
    main()
