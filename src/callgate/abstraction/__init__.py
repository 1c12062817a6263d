"""Trace abstraction: raw tool calls to typed events with grounded arguments.

Shell lines are parsed with tree-sitter-bash and each simple command is grounded by the command
catalog (``catalog.yaml``); scripts an interpreter runs are read for their effects; coding-agent
tools and function calls map to stable action names; value flow links each argument to the
earlier outputs it appeared in. See ``docs/abstraction.md``.
"""

from __future__ import annotations

from callgate._model import DeclaredOutput
from callgate.abstraction._abstractor import Abstractor
from callgate.abstraction._agentdojo import (
    AgentDojoStep,
    abstract_agentdojo_run,
    agentdojo_steps,
    message_text,
)
from callgate.abstraction._catalog import Catalog, default_catalog, ground, ground_words
from callgate.abstraction._drafts import CLAUDE_CODE_TOOLS, ScriptContext, script_source_drafts
from callgate.abstraction._shell import Redirect, ShellCommand
from callgate.abstraction._shell import parse_commands as _parse_commands
from callgate.abstraction._trace import (
    format_signature,
    load_raw_trace,
    signature,
    signature_option,
)


def abstract_shell(command: str) -> list[ShellCommand]:
    """The simple commands of a shell line, wrappers peeled, in execution order.

    Never raises: a line that does not parse gives commands carrying ``parse_error``.
    """
    return _parse_commands(command)


__all__ = [
    "CLAUDE_CODE_TOOLS",
    "Abstractor",
    "AgentDojoStep",
    "Catalog",
    "DeclaredOutput",
    "Redirect",
    "ScriptContext",
    "ShellCommand",
    "abstract_agentdojo_run",
    "abstract_shell",
    "agentdojo_steps",
    "default_catalog",
    "format_signature",
    "ground",
    "ground_words",
    "load_raw_trace",
    "message_text",
    "script_source_drafts",
    "signature",
    "signature_option",
]
