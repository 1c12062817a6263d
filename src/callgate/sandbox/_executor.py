"""The subprocess executor: argv only, never through a shell, always inside the OS sandbox.

The sandbox is derived from the tool's declared policy for every run. When the sandbox stopped
something (a write, a read, a connection, a withheld variable, a limit) the result is
``status="denied"`` with the sandbox's reason id, and the kernel records it as a denial. A tool
that declares no policy never runs: a subprocess needs a declared filesystem, network and
environment stance to be confined at all.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from callgate._errors import SandboxError
from callgate._model import Status, ToolCall, ToolResult
from callgate.policy._schema import ToolPolicy
from callgate.sandbox import BackendName, Sandbox, SandboxOutcome

#: Bytes of stdout / stderr kept in the result (the sandbox's own output limit stops floods).
MAX_KEPT_OUTPUT = 1 << 20


def _text(data: bytes) -> str:
    return data[:MAX_KEPT_OUTPUT].decode("utf-8", errors="replace")


def _output(outcome: SandboxOutcome) -> dict[str, Any]:
    return {"exit_code": outcome.exit_code, "stdout": _text(outcome.stdout),
            "stderr": _text(outcome.stderr), "backend": outcome.backend}


class SubprocessExecutor:
    """Runs a declared subprocess tool's argv in its sandbox."""

    tool_class = "shell"

    def __init__(self, policy: ToolPolicy | None, *, working_dir: str,
                 backend: BackendName = "auto", allow_unconfined: bool = False,
                 stdin: bytes | None = None) -> None:
        self._policy = policy
        self._working_dir = os.path.realpath(policy.working_dir or working_dir) if policy \
            else working_dir
        self._backend: BackendName = backend
        self._allow_unconfined = allow_unconfined
        self._stdin = stdin

    def __call__(self, call: ToolCall) -> ToolResult:
        return self.execute(call)

    def execute(self, call: ToolCall) -> ToolResult:
        """Run ``call.parameters["argv"]`` confined; a confined run is a denied result."""
        started = time.perf_counter()

        def result(status: Status, error: str | None, output: Any = None) -> ToolResult:
            return ToolResult(call_id=call.id, status=status, error=error, output=output,
                              duration_ms=(time.perf_counter() - started) * 1000)

        argv = _argv(call.parameters.get("argv"))
        if argv is None:
            return result("error", "params.invalid: a subprocess call needs argv, a list of "
                          "strings (command strings never reach a shell)")
        if self._policy is None:
            return result("denied", f"sandbox.undeclared: tool {call.tool!r} declares no policy; "
                          "a subprocess tool runs only with a declared policy")
        try:
            sandbox = Sandbox.for_policy(self._policy, working_dir=self._working_dir,
                                         backend=self._backend,
                                         allow_unconfined=self._allow_unconfined)
            outcome = sandbox.run(argv, stdin=self._stdin)
        except SandboxError as exc:
            return result("denied", f"sandbox.unavailable: {exc}")
        if outcome.confined:
            return result("denied", f"{outcome.reason_id}: {outcome.reason}", _output(outcome))
        status: Status = "ok" if outcome.exit_code == 0 else "error"
        error = None if status == "ok" else f"process.exit: exit status {outcome.exit_code}"
        return result(status, error, _output(outcome))


def _argv(value: Any) -> list[str] | None:
    if isinstance(value, Sequence) and not isinstance(value, str) and value and all(
            isinstance(a, str) for a in value):
        return list(value)
    return None
