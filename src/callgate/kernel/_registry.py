"""The tools a kernel knows: declared tool policies, the manifest they form, and executor routes.

A policy file's declarations come first and cannot be replaced; an in-process tool declared in
code joins them, and every change gives a new manifest hash (which every later audit event
carries). Executors are routed by tool name, then by tool class.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from callgate._errors import CallgateError
from callgate._model import ToolCall, ToolResult
from callgate.policy._manifest import build_manifest, manifest_hash
from callgate.policy._schema import Policy, ToolPolicy

Executor = Callable[[ToolCall], Any]


class ToolRegistry:
    """Declared tools and executor routes of one kernel."""

    def __init__(self, policy: Policy, working_dir: str) -> None:
        self._policy = policy
        self._working_dir = working_dir
        self.tools: dict[str, ToolPolicy] = dict(policy.tools)
        self._executors: dict[str, Executor] = {}
        self.manifest_hash = manifest_hash(build_manifest(policy, self.tools))

    def get(self, name: str) -> ToolPolicy | None:
        """The policy declared for tool ``name``, or None."""
        return self.tools.get(name)

    def is_new(self, name: str, policy: ToolPolicy) -> bool:
        """Whether declaring ``policy`` for ``name`` changes anything; a policy file's own
        declaration cannot be replaced (``CallgateError``)."""
        if name in self._policy.tools and self._policy.tools[name] != policy:
            raise CallgateError(f"tool {name!r} is already declared by the policy file")
        return self.tools.get(name) != policy

    def add(self, name: str, policy: ToolPolicy) -> None:
        """Declare an in-process tool's policy; the manifest hash follows."""
        self.tools[name] = policy
        self.manifest_hash = manifest_hash(build_manifest(self._policy, self.tools))

    def base(self, declared: ToolPolicy | None) -> str:
        """The directory a tool's relative paths mean: its own working_dir, under the kernel's."""
        if declared is None or not declared.working_dir:
            return self._working_dir
        return os.path.normpath(os.path.join(self._working_dir, declared.working_dir))

    def route(self, key: str, executor: Executor) -> None:
        """Send calls of a tool name or tool class to ``executor``."""
        self._executors[key] = executor

    def executor_for(self, call: ToolCall) -> Executor:
        """The call's executor; without one, an executor answering with an error result."""
        run = self._executors.get(call.tool) or self._executors.get(call.tool_class)
        if run is not None:
            return run
        missing = f"executor.missing: no executor for tool {call.tool!r} ({call.tool_class})"
        return lambda c: ToolResult(call_id=c.id, status="error", error=missing)
