"""The ``callgate`` program: the Claude Code hook's fast path, else the command line.

``callgate hook claude-code`` runs for every tool call Claude Code makes, so it is dispatched
here before the command-line framework is imported (see ``integrations/claude_code/_client``).

Any other command starts with the cyclic garbage collector off. Start-up makes what lives as
long as the process (modules, classes, functions, compiled patterns): the collector, run again
and again over a heap that every imported module grows, finds nothing to free in it, and at
exit the interpreter collects that whole heap once more. Once the command's module is imported
(``callgate.cli.preload``), what start-up made is frozen (``gc.freeze``: left out of every later
collection, the one at exit included) and the collector is on again for whatever the command
does, however long it runs. A command deciding one call takes a fifth less time.
"""

from __future__ import annotations

import gc
import sys


def main() -> None:
    """Entry point of the ``callgate`` script."""
    if sys.argv[1:3] == ["hook", "claude-code"] and not {"-h", "--help"} & set(sys.argv[3:]):
        from callgate.integrations.claude_code._client import main as hook

        sys.exit(hook(sys.argv[3:]))
    collecting = gc.isenabled()
    gc.disable()
    try:
        from callgate import cli

        cli.preload(sys.argv[1:2])
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    cli.main()
