"""Finding the tools to describe: a policy file, or a Python module of declared tools.

A target ending in ``.yaml`` / ``.yml`` is a policy file (loaded with the strict loader); a
``.py`` path is imported from that file; anything else is a dotted module name imported from
``sys.path``. A module's tools are its module-level objects that carry a declaration from
``callgate.declare`` or are kernel tools (``@kernel.tool(...)``), whose policy the kernel holds.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from callgate._errors import CallgateError
from callgate.kernel._declare import Tool, declaration_of
from callgate.policy._loader import load_policy
from callgate.policy._manifest import ManifestError, build_manifest
from callgate.policy._schema import Policy, ToolPolicy


@dataclass(frozen=True, slots=True)
class DeclaredTool:
    """A tool found in a module: its name, its policy, and the function that implements it."""

    name: str
    policy: ToolPolicy | None
    function: Any
    tool_class: str | None = None


def is_policy_path(target: str) -> bool:
    """Whether a target names a policy file rather than a module."""
    return target.endswith((".yaml", ".yml"))


def import_target(target: str) -> ModuleType:
    """Import a ``.py`` file or a dotted module name; any failure is a ``ManifestError``."""
    try:
        if target.endswith(".py"):
            return _import_file(Path(target))
        # As `python -m` does: a module name is looked up from the current directory too.
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        return importlib.import_module(target)
    except CallgateError:
        raise
    except Exception as exc:  # importing runs user code: any failure is reported, not raised
        raise ManifestError(f"cannot import {target}: {type(exc).__name__}: {exc}") from exc


def _import_file(path: Path) -> ModuleType:
    resolved = path.resolve()
    if not resolved.is_file():
        raise ManifestError(f"cannot import {path}: no such file")
    # A private name per file that never shadows a package; the file is executed afresh each
    # time, so a file edited since the last look is judged as it is now.
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
    name = f"_callgate_tools_{resolved.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ManifestError(f"cannot import {path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up while they load
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _found(value: Any) -> DeclaredTool | None:
    if isinstance(value, Tool):
        return DeclaredTool(value.name, value.kernel.tool_policy(value.name), value.fn,
                            value.tool_class)
    found = declaration_of(value)
    if found is not None:
        return DeclaredTool(found.name, found.policy, value, found.tool_class)
    return None


def module_tools(module: ModuleType) -> dict[str, DeclaredTool]:
    """The declared tools among a module's attributes, by tool name."""
    tools: dict[str, DeclaredTool] = {}
    for value in vars(module).values():
        found = _found(value)
        if found is None:
            continue
        known = tools.get(found.name)
        if known is not None and known.policy != found.policy:
            raise ManifestError(f"tool {found.name!r} is declared twice in {module.__name__} "
                                "with different policies")
        tools[found.name] = found
    return tools


def _policies(tools: Mapping[str, DeclaredTool]) -> dict[str, ToolPolicy]:
    out: dict[str, ToolPolicy] = {}
    for name, tool in tools.items():
        if tool.policy is None:
            raise ManifestError(f"tool {name!r} has no declared policy")
        # The class given to declare() is part of what the tool is; show it in the manifest.
        if tool.policy.tool_class is None and tool.tool_class is not None:
            out[name] = tool.policy.model_copy(update={"tool_class": tool.tool_class})
        else:
            out[name] = tool.policy
    return out


def load_target(target: str, policy_file: str | None = None) -> tuple[Policy | None,
                                                                      dict[str, ToolPolicy]]:
    """The policy and code-declared tools a target names (``policy_file`` adds a policy)."""
    policy = load_policy(policy_file).policy if policy_file is not None else None
    if is_policy_path(target):
        if policy is not None:
            raise ManifestError("give the policy file either as the target or with --policy")
        return load_policy(target).policy, {}
    return policy, _policies(module_tools(import_target(target)))


def manifest_of(target: str, policy_file: str | None = None) -> dict[str, Any]:
    """The manifest of a target (see ``load_target``), without its hash."""
    policy, tools = load_target(target, policy_file)
    return build_manifest(policy, tools)
