"""Declaring in-process tools: a decorator that routes every call through the kernel.

    @kernel.tool(policy=ToolPolicy(filesystem={"write": ["./out/**"]},
                                   path_params={"path": "write"}))
    def write_report(path: str, text: str) -> str: ...

Calling ``write_report(...)`` builds a ``ToolCall`` from the bound arguments, decides it, and
runs the function only when allowed; a denial raises ``callgate.Denied`` with the decision.

The function receives what was checked: every string the path gate treats as a path (in a
path-named or declared parameter, or shaped like a path anywhere) is made canonical and absolute
against the tool's working directory before the call is decided, so a relative ``./x`` cannot be
checked in one directory and opened in the process's current one. ``os.PathLike`` values and
bytes in path parameters are handed over as those canonical strings. A tool whose policy
declares filesystem writes must give each of its path parameters a role (``path_params``);
declaring one without is refused with ``PolicyError``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from callgate._errors import ExecutorError, PolicyError, Problem
from callgate._model import ToolCall, ToolResult
from callgate.matchers._paths import PathRejected, canonical_parameters, is_path_name, root_escape
from callgate.policy._roots import tool_roots
from callgate.policy._schema import ToolPolicy

if TYPE_CHECKING:
    from callgate.kernel._kernel import Kernel

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
        return self._call(self._bind(*args, **kwargs))

    def _bind(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def _call(self, arguments: Mapping[str, Any]) -> ToolCall:
        declared = self.kernel.tool_policy(self.name)
        roles = declared.path_params if declared is not None else {}
        params = {k: _path_text(v) if is_path_name(k, roles) else v for k, v in arguments.items()}
        params = {k: _jsonable(v) for k, v in params.items()}
        wd = (declared.working_dir if declared is not None else None) or self.kernel.working_dir
        # Left as written when a value cannot be canonical: every path check that would judge
        # the others judges that one too, and refuses it.
        with contextlib.suppress(PathRejected):
            params = canonical_parameters(params, wd, roles, shaped=True)
        return ToolCall(tool=self.name, tool_class=self.tool_class, action=self.action,
                        parameters=params)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        originals = self._bind(*args, **kwargs)
        call = self._call(originals)
        declared = self.kernel.tool_policy(self.name)
        roles = declared.path_params if declared is not None else {}

        def run(checked: ToolCall) -> Any:
            # The function gets the checked values (canonical paths included). Objects the log
            # shows by repr are passed on as the caller gave them, unless they are paths.
            merged = {k: checked.parameters.get(k, v)
                      if _jsonable(v) is v or is_path_name(k, roles) else v
                      for k, v in originals.items()}
            # Passed back the way the signature takes them: positional-only parameters by
            # position, *args spread, **kwargs as keywords.
            bound = inspect.BoundArguments(self._signature, merged)
            return self.fn(*bound.args, **bound.kwargs)

        result: ToolResult = self.kernel.execute(call, executor=run)
        if result.status != "ok":
            raise ExecutorError(f"tool {self.name!r} failed: {result.error}")
        return result.output  # type: ignore[no-any-return]  # the tool's own return value


def _path_text(value: Any) -> Any:
    """A path given as ``os.PathLike`` or bytes, as the text the gate checks and the tool gets."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return os.fsdecode(value) if isinstance(value, bytes) else value


def check_declaration(name: str, policy: ToolPolicy, fn: Callable[..., Any] | None,
                      working_dir: str) -> None:
    """Refuse a tool declaration the path gate could only guess about, or whose roots escape.

    With filesystem writes declared, every path parameter of ``fn`` (path-named, or named in
    ``path_params``) needs a role, and ``path_params`` may name only parameters ``fn`` has.
    Every filesystem root must stay where it was written (``root_escape``). Raises
    ``PolicyError`` listing each problem.
    """
    source = f"<tool {name}>"
    problems = [Problem(why, source) for root in tool_roots(name, policy, working_dir)
                if (why := root_escape(root.pattern, root.base, follow=root.follow))]
    if fn is not None:
        problems += [Problem(why, source) for why in _role_problems(policy, fn)]
    if problems:
        raise PolicyError(problems)


def _role_problems(policy: ToolPolicy, fn: Callable[..., Any]) -> list[str]:
    parameters = inspect.signature(fn).parameters
    kinds = {p.kind for p in parameters.values()}
    roles = policy.path_params
    found = []
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        found += [f"path_params names {n!r}, which is not a parameter of the function"
                  for n in roles if n not in parameters]
    fs = policy.filesystem
    if fs is not None and fs.write:
        if inspect.Parameter.VAR_KEYWORD in kinds and not roles:
            found.append("the function takes **kwargs and the tool declares filesystem writes: "
                         "give path_params a role for each path parameter")
        missing = [n for n in parameters if is_path_name(n, ()) and n not in roles]
        if missing:
            found.append(f"the tool declares filesystem writes but path parameter(s) "
                         f"{', '.join(map(repr, missing))} have no role: declare path_params: "
                         f"{{{missing[0]}: read | write}}")
    return found


def tool_decorator(kernel: Kernel, name: str | None, policy: ToolPolicy | None,
                   tool_class: str | None, action: str) -> Callable[[Callable[P, R]], Tool[P, R]]:
    """The body of ``Kernel.tool``: declare the policy, wrap the function."""

    def wrap(fn: Callable[P, R]) -> Tool[P, R]:
        found = declaration_of(fn)
        tool_name = name or (found.name if found else fn.__name__)
        chosen = policy or (found.policy if found else None) or kernel.tool_policy(tool_name)
        if chosen is not None:
            check_declaration(tool_name, chosen, fn, chosen.working_dir or kernel.working_dir)
            kernel.declare_tool(tool_name, chosen)
        declared = kernel.tool_policy(tool_name)
        cls = (tool_class or (found.tool_class if found else None)
               or (declared.tool_class if declared else None) or "function")
        act = found.action if found is not None and action == "call" else action
        return Tool(kernel, fn, name=tool_name, tool_class=cls, action=act)

    return wrap
