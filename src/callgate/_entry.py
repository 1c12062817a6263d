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

While the command's module is imported, pydantic plugins are off (``PYDANTIC_DISABLE_PLUGINS``,
unless the variable is set already; it is restored before the command runs, so no child sees
it): a plugin is another distribution's code, and one hooked into callgate's models would be
handed every call they validate. Looking the plugins up also costs a scan of every installed
distribution's entry points.

The commands that decide or run one call (``ONE_SHOT``) leave without tearing the interpreter
down: once the command has returned its exit status, and when no other thread runs, the exit
handlers run (``atexit``: logging's flush, the sandbox's temporary directories), the standard
streams are flushed and the process exits. Tearing down the heap start-up made would only free
memory the process is about to give back, and takes longer than the call's decision.
"""

from __future__ import annotations

import gc
import os
import sys

#: Commands that decide or run one call and then exit (see the module docstring).
ONE_SHOT = frozenset({"decide", "check", "exec"})
_NO_PLUGINS = "PYDANTIC_DISABLE_PLUGINS"


def main() -> None:
    """Entry point of the ``callgate`` script."""
    if sys.argv[1:3] == ["hook", "claude-code"] and not {"-h", "--help"} & set(sys.argv[3:]):
        from callgate.integrations.claude_code._client import main as hook

        sys.exit(hook(sys.argv[3:]))
    collecting = gc.isenabled()
    gc.disable()
    plugins_off = _NO_PLUGINS not in os.environ
    if plugins_off:
        os.environ[_NO_PLUGINS] = "__all__"
    try:
        from callgate import cli

        cli.preload(sys.argv[1:2])
    finally:
        if plugins_off:
            os.environ.pop(_NO_PLUGINS, None)
        gc.freeze()
        if collecting:
            gc.enable()
    try:
        cli.main()
    except SystemExit as done:
        if sys.argv[1:2] and sys.argv[1] in ONE_SHOT:
            _leave(done)
        raise


def _leave(done: SystemExit) -> None:
    """Exit now with ``done``'s status, as the interpreter would but without its teardown;
    returns (the caller exits the usual way) when that cannot be done faithfully."""
    import atexit
    import threading

    code = 0 if done.code is None else done.code
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if not isinstance(code, int) or run_exit_handlers is None or threading.active_count() > 1:
        return
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: the interpreter exits 120 then
            code = code or 120
    os._exit(code)
