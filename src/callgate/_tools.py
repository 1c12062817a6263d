"""Declaring in-process tools: a decorator that routes every call through the kernel.

    @kernel.tool(policy=ToolPolicy(filesystem={"write": ["./out/**"]}))
    def write_report(path: str, text: str) -> str: ...

Calling ``write_report(...)`` builds a ``ToolCall`` from the bound arguments, decides it, and
runs the function only when allowed; a denial raises ``callgate.Denied`` with the decision.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from callgate._errors import ExecutorError
from callgate._model import ToolCall, ToolResult
from callgate._policy import ToolPolicy

if TYPE_CHECKING:
    from callgate._kernel import Kernel

P = ParamSpec("P")
R = TypeVar("R")


def _jsonable(value: Any) -> Any:
    """Arguments as the audit log can store them: JSON values, anything else by repr."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


F = TypeVar("F", bound=Callable[..., Any])
DECLARATION_ATTR = "__callgate_tool__"


@dataclass(frozen=True, slots=True)
class ToolDeclaration:
    """A tool's declared policy, attached to its function by ``callgate.declare``."""

    name: str
    policy: ToolPolicy
    tool_class: str | None = None
    action: str = "call"


def declare(policy: ToolPolicy, *, name: str | None = None, tool_class: str | None = None,
            action: str = "call") -> Callable[[F], F]:
    """Declare a tool's policy in code, without a kernel (for manifests and static checks).

    The function is returned unchanged but for the attached declaration; ``kernel.tool()`` on a
    declared function uses it.
    """

    def mark(fn: F) -> F:
        setattr(fn, DECLARATION_ATTR, ToolDeclaration(name or fn.__name__, policy, tool_class,
                                                      action))
        return fn

    return mark


def declaration_of(fn: Any) -> ToolDeclaration | None:
    """The declaration attached by ``declare``, if any."""
    found = getattr(fn, DECLARATION_ATTR, None)
    return found if isinstance(found, ToolDeclaration) else None


class Tool(Generic[P, R]):
    """An in-process tool bound to a kernel. Calling it is a mediated tool call."""

    def __init__(self, kernel: Kernel, fn: Callable[P, R], *, name: str, tool_class: str,
                 action: str) -> None:
        self.kernel = kernel
        self.fn = fn
        self.name = name
        self.tool_class = tool_class
        self.action = action
        self._signature = inspect.signature(fn)
        functools.update_wrapper(self, fn)

    def call_for(self, *args: P.args, **kwargs: P.kwargs) -> ToolCall:
        """The ToolCall a call with these arguments is decided as."""
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        params = {k: _jsonable(v) for k, v in bound.arguments.items()}
        return ToolCall(tool=self.name, tool_class=self.tool_class, action=self.action,
                        parameters=params)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        originals = dict(bound.arguments)

        def run(call: ToolCall) -> Any:
            # JSON values are passed on as checked (canonical paths included); other objects,
            # which the log shows by repr, are passed on as the caller gave them.
            merged = {k: call.parameters.get(k, v) if _jsonable(v) is v else v
                      for k, v in originals.items()}
            return self.fn(**merged)  # type: ignore[call-arg]

        result: ToolResult = self.kernel.execute(self.call_for(*args, **kwargs), executor=run)
        if result.status != "ok":
            raise ExecutorError(f"tool {self.name!r} failed: {result.error}")
        return result.output  # type: ignore[no-any-return]


def tool_decorator(kernel: Kernel, name: str | None, policy: ToolPolicy | None,
                   tool_class: str | None, action: str) -> Callable[[Callable[P, R]], Tool[P, R]]:
    """The body of ``Kernel.tool``: declare the policy, wrap the function."""

    def wrap(fn: Callable[P, R]) -> Tool[P, R]:
        found = declaration_of(fn)
        tool_name = name or (found.name if found else fn.__name__)
        chosen = policy or (found.policy if found else None)
        if chosen is not None:
            kernel.declare_tool(tool_name, chosen)
        declared = kernel.tool_policy(tool_name)
        cls = (tool_class or (found.tool_class if found else None)
               or (declared.tool_class if declared else None) or "function")
        act = found.action if found is not None and action == "call" else action
        return Tool(kernel, fn, name=tool_name, tool_class=cls, action=act)

    return wrap
