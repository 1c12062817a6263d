"""The MCP gateway: every tool of every MCP server an agent uses passes callgate.

``callgate mcp proxy -- SERVER_COMMAND`` is a stdio MCP server in front of one server;
``callgate mcp serve`` is a Streamable HTTP endpoint in front of the servers a policy's ``mcp:``
section names (their tools shown as ``SERVER__TOOL``); ``callgate mcp wrap`` rewrites a client's
``mcpServers`` configuration so that every server runs behind the proxy. Each ``tools/call`` is a
kernel decision on the call ``mcp__SERVER__TOOL`` (class ``mcp``); tool definitions are pinned
against rug pulls. See ``docs/mcp.md``.

Names are loaded on first use: the ``mcp`` SDK (the ``mcp`` extra) is imported only by what
needs it.
"""

from __future__ import annotations

from callgate._lazy import lazy as _lazy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from callgate.integrations.mcp._gate import Gate, call_of, kernel_tool
    from callgate.integrations.mcp._gateway import Gateway
    from callgate.integrations.mcp._pins import PinnedTool, PinStore, default_state_dir, fingerprint
    from callgate.integrations.mcp._run import run_proxy, serve_http
    from callgate.integrations.mcp._wrap import WrapReport, wrap_config

_HOME = {
    "Gate": "_gate", "call_of": "_gate", "kernel_tool": "_gate",
    "Gateway": "_gateway",
    "PinStore": "_pins", "PinnedTool": "_pins", "fingerprint": "_pins",
    "default_state_dir": "_pins", "run_proxy": "_run", "serve_http": "_run",
    "WrapReport": "_wrap", "wrap_config": "_wrap",
}

__all__ = ["Gate", "Gateway", "PinStore", "PinnedTool", "WrapReport", "call_of",
           "default_state_dir", "fingerprint", "kernel_tool", "run_proxy", "serve_http",
           "wrap_config"]


__getattr__ = _lazy(__name__, _HOME, globals())
