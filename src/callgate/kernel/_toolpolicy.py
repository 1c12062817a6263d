"""The declared policy of a tool: usage constraints and the in-process path gate (Layer 1).

Unlike a gate that looks only at absolute paths, every path-like argument is checked: relative
ones resolve against the kernel's working directory, and every path goes through realpath, so a
symlink whose target leaves the declared globs is denied and ``..`` cannot escape. A tool that
declares writes has each path judged by the role its parameter declares (``path_params``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from callgate._model import Reason, ToolCall
from callgate.matchers._paths import PathRejected, check_paths, intent_of, path_arguments
from callgate.policy._schema import ToolPolicy


def check_usage(call: ToolCall, policy: ToolPolicy, completed: Mapping[str, int],
                invoked: Mapping[str, int]) -> tuple[str, str] | None:
    """(reason id, message) when the tool's usage constraints forbid this call now."""
    c = policy.constraints
    if c.forbidden:
        return "tool.forbidden", f"tool {call.tool!r} is forbidden"
    if c.max_invocations is not None and invoked.get(call.tool, 0) >= c.max_invocations:
        return ("tool.max-invocations",
                f"tool {call.tool!r} reached its limit of {c.max_invocations} invocations")
    missing = [name for name in c.only_after if completed.get(name, 0) == 0]
    if missing:
        return ("tool.only-after",
                f"tool {call.tool!r} may only run after {', '.join(missing)} completed")
    return None


def check_stance(call: ToolCall, policy: ToolPolicy, working_dir: str, *,
                 resolved: Collection[str] = ()) -> tuple[str, str] | None:
    """(reason id, message) when the call's arguments exceed the tool's declared stance;
    ``resolved``: the canonical paths validation made for this call."""
    if policy.exec == "deny" and call.tool_class == "shell":
        return "tool.exec", f"tool {call.tool!r} declares exec: deny"
    if policy.network == "deny" and call.tool_class == "http":
        return "tool.network", f"tool {call.tool!r} declares network: deny"
    fs = policy.filesystem
    if fs is None or (fs.read is None and fs.write is None):
        return None
    wd = policy.working_dir or working_dir
    try:
        if fs.write and (policy.path_params or call.tool_class != "shell"):
            # A tool that may write: each path is judged by its parameter's declared role, and
            # one under a parameter without a role as a write (the narrower stance), never by
            # a guess from names or from the action. A subprocess tool's argv has no roles:
            # its sandbox mounts read roots read-only, which decides read against write.
            args = path_arguments(call.parameters, default_intent="write",
                                  roles=policy.path_params)
        else:
            args = path_arguments(call.parameters, policy.path_params,
                                  default_intent=intent_of(call.action))
        verdict = check_paths(args, fs.read if fs.read is not None else (),
                              fs.write if fs.write is not None else (), wd,
                              fs.follow_symlinks, resolved=resolved)
    except PathRejected as exc:
        return "tool.filesystem", str(exc)
    if verdict is not None:
        return "tool.filesystem", verdict.reason
    return None


def check_tool(call: ToolCall, policy: ToolPolicy, completed: Mapping[str, int],
               invoked: Mapping[str, int], working_dir: str, *,
               resolved: Collection[str] = ()) -> Reason | None:
    """The tool-policy step: the declared tool's usage constraints, then its stance."""
    found = check_usage(call, policy, completed, invoked) or check_stance(
        call, policy, working_dir, resolved=resolved)
    return None if found is None else Reason(id=found[0], check="tool-policy", message=found[1])
