"""Framework adapters: callgate inside the agent frameworks people already use.

One module per framework, each an optional extra, each translation only (no policy of its own):

- ``callgate.integrations.adapters.openai_agents``: guardrails and approvals for the OpenAI
  Agents SDK (``callgate[openai-agents]``);
- ``callgate.integrations.adapters.langchain``: an ``AgentMiddleware`` for LangChain's
  ``create_agent`` (``callgate[langchain]``);
- ``callgate.integrations.adapters.pydantic_ai``: a ``WrapperToolset`` for pydantic-ai
  (``callgate[pydantic-ai]``);
- ``callgate.integrations.adapters.claude_agent_sdk``: hooks and ``can_use_tool`` for the Claude
  Agent SDK (``callgate[claude-agent-sdk]``).

Each takes a ``Gate``: an embedded ``callgate.Kernel`` or the sidecar's client. See
``docs/adapters.md``.
"""

from __future__ import annotations

from callgate.integrations.adapters._gate import Gate, Mediation, ToolClass

__all__ = ["Gate", "Mediation", "ToolClass"]
