"""The unconfined backend: an explicit, loud opt-out for hosts with no sandbox at all.

It is never chosen silently: ``Sandbox.for_policy`` uses it only with
``allow_unconfined=True``, and every run logs a warning through ``logging`` and writes the same
line to stderr. What it still does: a cleared environment holding only declared variables,
the declared working directory, and the resource limits (rlimits, wall time, output size).
It confines no path and no connection.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from callgate._errors import SandboxError

logger = logging.getLogger("callgate.sandbox")

WARNING = (
    "callgate: UNCONFINED: running {argv0!r} with NO OS sandbox (allow_unconfined=True); "
    "filesystem, network and namespaces are not confined"
)


def warn_unconfined(argv: Sequence[str]) -> None:
    """Say loudly, on every run, that this command runs without a sandbox."""
    message = WARNING.format(argv0=argv[0] if argv else "")
    logger.warning(message)
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # pragma: no cover - a closed stderr still has the log line
        pass


def none_argv(argv: Sequence[str], *, prefix: Sequence[str] = ()) -> list[str]:
    """The command line the unconfined backend runs (limits only)."""
    if not argv:
        raise SandboxError("an empty command cannot run")
    return [*prefix, *argv]
