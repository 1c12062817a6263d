"""The ``callgate`` program: the Claude Code hook's fast path, else the command line.

``callgate hook claude-code`` runs for every tool call Claude Code makes, so it is dispatched
here before the command-line framework is imported (see ``integrations/claude_code/_client``).
"""

from __future__ import annotations

import sys


def main() -> None:
    """Entry point of the ``callgate`` script."""
    if sys.argv[1:3] == ["hook", "claude-code"] and not {"-h", "--help"} & set(sys.argv[3:]):
        from callgate.integrations.claude_code._client import main as hook

        sys.exit(hook(sys.argv[3:]))
    from callgate.cli import main as cli

    cli()
