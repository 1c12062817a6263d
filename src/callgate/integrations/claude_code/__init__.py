"""Claude Code: every tool call and session event of a Claude Code session passes callgate.

``callgate init claude-code`` registers a command hook for ``PreToolUse``, ``PostToolUse``,
``PostToolUseFailure``, ``UserPromptSubmit``, ``Stop``, ``SubagentStop``, ``SessionStart`` and
``SessionEnd``; the hook (``callgate hook claude-code``) hands each event to a resident decision
process of the project, which answers through the kernel (``HookService``) and keeps one run per
session. See ``docs/claude-code.md``.

Names are loaded on first use: the hook's client imports this package and must not pay for the
kernel and the models.
"""

from __future__ import annotations

from callgate._lazy import lazy as _lazy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from callgate.integrations.claude_code._service import EVENTS, Answer, HookService
    from callgate.integrations.claude_code._sessions import SessionStore, StateError
    from callgate.integrations.claude_code._settings import (
        MIN_CLAUDE,
        Report,
        doctor,
        hook_command,
        install,
        uninstall,
    )
    from callgate.integrations.claude_code._tools import to_call

_HOME = {
    "EVENTS": "_service", "Answer": "_service", "HookService": "_service",
    "SessionStore": "_sessions", "StateError": "_sessions",
    "MIN_CLAUDE": "_settings", "Report": "_settings", "doctor": "_settings",
    "hook_command": "_settings", "install": "_settings", "uninstall": "_settings",
    "to_call": "_tools",
}

__all__ = ["EVENTS", "MIN_CLAUDE", "Answer", "HookService", "Report", "SessionStore",
           "StateError", "doctor", "hook_command", "install", "to_call", "uninstall"]


__getattr__ = _lazy(__name__, _HOME, globals())
