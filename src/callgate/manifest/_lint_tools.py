"""Declare-vs-do: a tool may not do more than its policy declares.

``lint_module`` reads a module's source with ``ast``, finds its tools (functions decorated with
``declare(...)``, ``callgate.declare(...)`` or ``<kernel>.tool(...)``, and any module-level object
carrying a declaration), extracts what each body does (``_extract``), imports the module to
read each tool's declared ``ToolPolicy``, and reports every use the policy does not grant, with
its line. Declaring more than a tool uses passes: over-declaration is a manifest-review matter.

What each use needs (``unspecified`` counts as not granted):

* a file write, delete, ``shutil`` call: ``filesystem.write`` with at least one glob;
* a file read: ``filesystem.read`` or ``filesystem.write`` with at least one glob;
* a process: ``exec: allow``;
* a socket or HTTP client: ``network: allow`` or a host list;
* the environment: ``environment.allow`` with variables, holding the variable when its name is
  a literal;
* code the extractor cannot see through (``eval``, ``exec``, dynamic imports, ``getattr`` on a
  capability module): never granted, since what it does cannot be compared (fail closed).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType

from callgate.manifest._discover import import_target, module_tools
from callgate.manifest._extract import (
    DYNAMIC,
    ENVIRONMENT,
    EXEC,
    FS_READ,
    FS_WRITE,
    NETWORK,
    ModuleUses,
    Use,
    aliases_of,
    qualify,
)
from callgate.manifest._findings import Finding
from callgate.policy._manifest import ManifestError
from callgate.policy._schema import EnvironmentPolicy, NetworkHosts, ToolPolicy

SEVERITY = "error"
_RULE_IDS = {FS_READ: "lint.filesystem.read", FS_WRITE: "lint.filesystem.write",
             EXEC: "lint.exec", NETWORK: "lint.network", ENVIRONMENT: "lint.environment",
             DYNAMIC: "lint.dynamic"}
_NEEDS = {
    FS_READ: "declare filesystem.read (or write) globs",
    FS_WRITE: "declare filesystem.write globs",
    EXEC: "declare exec: allow",
    NETWORK: "declare network: allow or a host list",
    ENVIRONMENT: "declare the variables under environment.allow",
}


def _source_of(target: str, module: ModuleType) -> tuple[str, str]:
    """The module's source text and the name to show in findings."""
    if target.endswith(".py"):
        path = Path(target)
    else:
        spec = importlib.util.find_spec(target)
        origin = spec.origin if spec is not None else None
        if origin is None or not origin.endswith(".py"):
            raise ManifestError(f"cannot find the source of {target}")
        path = Path(origin)
    try:
        return path.read_text(encoding="utf-8"), (target if target.endswith(".py")
                                                  else module.__name__)
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}") from exc


def _is_tool_decorator(node: ast.expr, names: dict[str, str]) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute) and target.attr == "tool":
        return True
    name = qualify(target, names)
    return name is not None and (name in ("callgate.declare", "callgate.kernel.declare")
                                 or name.endswith(("._tools.declare", "._declare.declare")))


def decorated_tools(tree: ast.Module) -> list[str]:
    """Module-level functions whose decorators declare them as tools, in source order."""
    names = aliases_of(tree)
    return [n.name for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            and any(_is_tool_decorator(d, names) for d in n.decorator_list)]


def granted(policy: ToolPolicy, use: Use) -> bool:
    """Whether ``policy`` grants the capability ``use`` needs (dynamic code: never provable)."""
    if use.capability == DYNAMIC:
        return False
    fs = policy.filesystem
    if use.capability == FS_WRITE:
        return fs is not None and bool(fs.write)
    if use.capability == FS_READ:
        return fs is not None and bool(fs.read or fs.write)
    if use.capability == EXEC:
        return policy.exec == "allow"
    if use.capability == NETWORK:
        return policy.network == "allow" or isinstance(policy.network, NetworkHosts)
    env = policy.environment
    if not isinstance(env, EnvironmentPolicy) or not env.allow:
        return False
    return use.variable is None or use.variable in env.allow


def _finding(tool: str, shown: str, use: Use) -> Finding:
    what = use.what + (f" ({use.variable})" if use.variable else "")
    through = f" via {use.via}" if use.via else ""
    if use.capability == DYNAMIC:
        why = "cannot be checked against the policy; call what the tool needs by name"
    else:
        why = f"is not granted by the policy; {_NEEDS[use.capability]} or remove the call"
    return Finding(SEVERITY, _RULE_IDS[use.capability], tool,
                   f"{shown}:{use.line}: {what}{through} {why}", line=use.line)


def lint_module(path_or_name: str) -> list[Finding]:
    """Every capability a module's tools use without declaring it (empty: all declared).

    ``path_or_name`` is a ``.py`` file or a dotted module name; the module is imported (to read
    each tool's policy) and its source parsed. Raises ``ManifestError`` if it cannot be.
    """
    module = import_target(path_or_name)
    source, shown = _source_of(path_or_name, module)
    try:
        tree = ast.parse(source, filename=shown)
    except SyntaxError as exc:
        raise ManifestError(f"{shown}:{exc.lineno}: cannot parse: {exc.msg}") from exc
    analysis = ModuleUses(tree)
    declared = {t.function.__name__: t for t in module_tools(module).values()
                if getattr(t.function, "__name__", None) in analysis.functions}
    findings: list[Finding] = []
    for fn_name in sorted(set(decorated_tools(tree)) | set(declared),
                          key=lambda n: analysis.functions[n].lineno):
        tool = declared.get(fn_name)
        if tool is None or tool.policy is None:
            line = analysis.functions[fn_name].lineno
            findings.append(Finding(SEVERITY, "lint.policy.missing", fn_name,
                                    f"{shown}:{line}: decorated as a tool but no declared "
                                    "policy was found on the imported object", line=line))
            continue
        for use in sorted(analysis.uses(fn_name), key=lambda u: u.line):
            if not granted(tool.policy, use):
                findings.append(_finding(tool.name, shown, use))
    return findings
