"""What a function body does: capabilities found by reading its source with ``ast``.

The extractor names each use of a capability with its line: file writes and deletes
(``open`` in a writing mode, ``pathlib`` writes, ``os.remove`` and friends, ``shutil``), file
reads, processes (``subprocess``, ``os.system``, ``os.popen``, ``os.exec*``, ``os.spawn*``),
network (``socket``, ``httpx``, ``requests``, ``urllib.request``, ``aiohttp``, ...) and the
environment (``os.environ``, ``os.getenv``), with the variable's name when it is a literal.

Names are followed through ``import x as y``, ``from x import y as z`` and module-level
assignments (``run = subprocess.run``); a reference counts as a use even when it is not called
there (``fn = os.system``). Functions and classes defined in the same module are followed.
``eval``, ``exec``, dynamic imports and ``getattr`` on a capability module are reported as
``dynamic`` uses (nothing can be proved about them). Invisible: helpers in other modules and
methods of objects of unknown type; the OS sandbox covers that residue.
"""

from __future__ import annotations

import ast
import builtins
from collections import deque
from dataclasses import dataclass

FS_READ, FS_WRITE, EXEC, NETWORK, ENVIRONMENT = "fs.read", "fs.write", "exec", "network", "env"
#: Code the extractor cannot see through (eval, dynamic imports, getattr on a capability module).
DYNAMIC = "dynamic"

_OPEN = frozenset({"open", "io.open", "codecs.open", "builtins.open"})
_OS_WRITE = frozenset({
    "os.remove", "os.unlink", "os.rmdir", "os.removedirs", "os.rename", "os.renames",
    "os.replace", "os.mkdir", "os.makedirs", "os.truncate", "os.chmod", "os.chown", "os.lchown",
    "os.symlink", "os.link", "os.mkfifo", "os.mknod", "os.utime",
})
_SHUTIL_READ_ONLY = frozenset({"shutil.which", "shutil.disk_usage", "shutil.get_terminal_size",
                               "shutil.Error"})
_EXEC_PREFIXES = ("subprocess.", "os.exec", "os.spawn", "os.posix_spawn")
_EXEC = frozenset({"os.system", "os.popen", "os.fork", "os.forkpty", "pty.spawn",
                   "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell",
                   "subprocess"})
_NETWORK_MODULES = ("socket", "httpx", "requests", "urllib.request", "urllib3", "aiohttp",
                    "http.client", "ftplib", "smtplib", "telnetlib", "ssl", "websockets")
_ENV = frozenset({"os.environ", "os.environb", "os.getenv", "os.getenvb", "os.putenv",
                  "os.unsetenv"})
_ENV_ACCESSORS = frozenset({"get", "pop", "setdefault"})
#: Method names distinctive enough to count on any receiver.
_PATH_WRITES = frozenset({"write_text", "write_bytes", "unlink", "rmdir", "touch",
                          "symlink_to", "hardlink_to"})
_PATH_READS = frozenset({"read_text", "read_bytes"})
#: Method names that write only when the receiver is known to be a path.
_PATH_ONLY_WRITES = frozenset({"mkdir", "chmod", "rename", "replace"})
_PATH_TYPES = frozenset({"pathlib.Path", "pathlib.PosixPath", "pathlib.WindowsPath",
                         "pathlib.PurePath"})
_PATH_DERIVED = frozenset({"resolve", "absolute", "with_suffix", "with_name", "with_stem",
                           "joinpath", "expanduser"})
_BUILTINS = frozenset(dir(builtins))
_DYNAMIC = frozenset({"eval", "exec", "compile", "__import__", "importlib.import_module",
                      "importlib.__import__", "builtins.eval", "builtins.exec"})
_CAPABILITY_MODULES = frozenset({"os", "subprocess", "shutil", "socket", "pathlib", "io",
                                 "builtins", "httpx", "requests", "urllib.request", "aiohttp",
                                 "os.environ"})


@dataclass(frozen=True, slots=True)
class Use:
    """One use of a capability: which, where, through what, and for ``env`` which variable."""

    capability: str
    line: int
    what: str
    variable: str | None = None
    via: str | None = None


def aliases_of(tree: ast.Module) -> dict[str, str]:
    """Local name -> qualified name, from every import and module-level alias assignment."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for stmt in tree.body:  # run = subprocess.run, opener = open, ...
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], ast.Name):
            target = qualify(stmt.value, names)
            if target is not None and target != stmt.targets[0].id:
                names[stmt.targets[0].id] = target
    return names


def qualify(node: ast.expr, names: dict[str, str]) -> str | None:
    """The dotted name an expression refers to (``sp.run`` -> ``subprocess.run``), or None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    base = names.get(node.id)
    if base is None:
        if node.id not in _BUILTINS:
            return None
        base = node.id
    return ".".join([base, *reversed(parts)])


def classify(name: str) -> str | None:
    """The capability a qualified name stands for, or None (``open`` is judged by its mode)."""
    if name in _OS_WRITE or (name.startswith("shutil.") and name not in _SHUTIL_READ_ONLY):
        return FS_WRITE
    if name in _EXEC or name.startswith(_EXEC_PREFIXES):
        return EXEC
    if any(name == m or name.startswith(m + ".") for m in _NETWORK_MODULES):
        return NETWORK
    if name in _ENV or name.startswith(("os.environ.", "os.environb.")):
        return ENVIRONMENT
    if name.startswith("pathlib."):
        last = name.rsplit(".", 1)[1]
        if last in _PATH_WRITES or last in _PATH_ONLY_WRITES:
            return FS_WRITE
        if last in _PATH_READS:
            return FS_READ
    return None


def _literal(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _mode_capability(mode: ast.expr | None) -> tuple[str, str]:
    """Read or write for an ``open`` mode argument; a mode that is not a literal is a write."""
    if mode is None:
        return FS_READ, "'r'"
    text = _literal(mode)
    if text is None:
        return FS_WRITE, "a computed mode"
    return (FS_WRITE if set(text) & set("wax+") else FS_READ), repr(text)


def _argument(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[index] if len(call.args) > index else None


class _BodyVisitor(ast.NodeVisitor):
    """Collects the uses in one function, and the same-module functions it calls."""

    def __init__(self, names: dict[str, str], functions: frozenset[str],
                 fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.names = names
        self.functions = functions
        self.uses: list[Use] = []
        self.calls: list[tuple[str, int]] = []
        self.paths = _path_names(fn, names)
        self._seen: set[int] = set()
        self._parents: dict[int, ast.AST] = {
            id(child): parent for parent in ast.walk(fn) for child in ast.iter_child_nodes(parent)
        }

    def visit_Call(self, node: ast.Call) -> None:
        name = qualify(node.func, self.names)
        if name in _DYNAMIC or (name in ("getattr", "builtins.getattr") and node.args and
                                qualify(node.args[0], self.names) in _CAPABILITY_MODULES):
            self._add(DYNAMIC, node, f"{name}(...)")
            self._seen.add(id(node.func))
        elif name in _OPEN:
            capability, shown = _mode_capability(_argument(node, 1, "mode"))
            self._add(capability, node, f"open(..., {shown})")
            self._seen.add(id(node.func))
        elif name == "os.open":
            # Only the bare read-only flag is a read; any other flags are judged as a write.
            flags = _argument(node, 1, "flags")
            read_only = flags is not None and qualify(flags, self.names) == "os.O_RDONLY"
            self._add(FS_READ if read_only else FS_WRITE, node, "os.open")
            self._seen.add(id(node.func))
        elif isinstance(node.func, ast.Attribute) and name is None:
            self._method(node, node.func)
        self.generic_visit(node)

    def _method(self, node: ast.Call, func: ast.Attribute) -> None:
        attr, receiver = func.attr, func.value
        pathish = _is_pathish(receiver, self.paths, self.names)
        if attr in _PATH_WRITES or (pathish and attr in _PATH_ONLY_WRITES):
            self._add(FS_WRITE, node, f".{attr}()")
        elif attr in _PATH_READS:
            self._add(FS_READ, node, f".{attr}()")
        elif pathish and attr == "open":
            capability, shown = _mode_capability(_argument(node, 0, "mode"))
            self._add(capability, node, f"Path.open({shown})")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._reference(node)

    def visit_Name(self, node: ast.Name) -> None:
        self._reference(node)

    def _reference(self, node: ast.Attribute | ast.Name) -> None:
        if id(node) in self._seen or isinstance(self._parents.get(id(node)), ast.Attribute):
            self.generic_visit(node)  # an inner part of a longer chain: judge the whole chain
            return
        if isinstance(node, ast.Name) and node.id in self.functions and \
                node.id not in self.names:
            self.calls.append((node.id, node.lineno))  # called or passed on: follow it
            return
        name = qualify(node, self.names)
        if name is None:
            self.generic_visit(node)  # a chain on a call result: judge what it is built on
            return
        if name in _OPEN:
            self._add(FS_WRITE, node, f"{name} passed on (mode unknown)")
            return
        capability = classify(name)
        if capability is not None:
            variable = self._variable(node, name) if capability == ENVIRONMENT else None
            self._add(capability, node, name, variable)

    def _variable(self, node: ast.Attribute | ast.Name, name: str) -> str | None:
        """The variable's name when it is a literal: environ["X"], environ.get("X"), getenv("X")."""
        parent = self._parents.get(id(node))
        if isinstance(parent, ast.Subscript) and parent.value is node:
            return _literal(parent.slice)
        if isinstance(parent, ast.Call) and parent.func is node and name != "os.environ" and \
                name.rsplit(".", 1)[1] in {*_ENV_ACCESSORS, "getenv", "getenvb", "putenv",
                                           "unsetenv"}:
            return _literal(_argument(parent, 0, "key"))
        return None

    def _add(self, capability: str, node: ast.AST, what: str, variable: str | None = None
             ) -> None:
        self.uses.append(Use(capability, getattr(node, "lineno", 0), what, variable))


def _path_names(fn: ast.FunctionDef | ast.AsyncFunctionDef, names: dict[str, str]) -> set[str]:
    """Local names known to hold paths: annotated parameters and assignments from paths."""
    found: set[str] = set()
    for arg in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
        if arg.annotation is not None and qualify(arg.annotation, names) in _PATH_TYPES:
            found.add(arg.arg)
    assigns = [n for n in ast.walk(fn) if isinstance(n, ast.Assign | ast.AnnAssign)]
    for _ in range(3):  # a short fixpoint: p = Path(x); q = p / "a"; r = q.parent
        for node in assigns:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and _is_pathish(node.value, found, names):
                found.update(t.id for t in targets if isinstance(t, ast.Name))
    return found


def _is_pathish(node: ast.expr, paths: set[str], names: dict[str, str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in paths
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _is_pathish(node.left, paths, names)
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        return _is_pathish(node.value, paths, names)
    if isinstance(node, ast.Call):
        if qualify(node.func, names) in _PATH_TYPES:
            return True
        func = node.func
        return isinstance(func, ast.Attribute) and func.attr in _PATH_DERIVED and \
            _is_pathish(func.value, paths, names)
    return False


class ModuleUses:
    """The uses of every module-level function in one module, helpers followed.

    A helper is a module-level function, or a module-level class (all of whose methods count,
    since constructing it may lead to any of them). The call graph is walked breadth-first with
    a visited set, so recursion and shared helpers are followed exactly once per tool.
    """

    def __init__(self, tree: ast.Module) -> None:
        self.names = aliases_of(tree)
        self.functions = {n.name: n for n in tree.body
                          if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        self.classes = {n.name: [m for m in n.body
                                 if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
                        for n in tree.body if isinstance(n, ast.ClassDef)}
        self._callables = frozenset(self.functions) | frozenset(self.classes)
        self._direct: dict[str, tuple[list[Use], list[tuple[str, int]]]] = {}

    def direct(self, name: str) -> tuple[list[Use], list[tuple[str, int]]]:
        """The uses in one function's (or class's) own body, and the helpers it refers to."""
        if name not in self._direct:
            bodies = self.classes[name] if name in self.classes else [self.functions[name]]
            uses: list[Use] = []
            calls: list[tuple[str, int]] = []
            for fn in bodies:
                visitor = _BodyVisitor(self.names, self._callables, fn)
                for stmt in fn.body:
                    visitor.visit(stmt)
                uses += visitor.uses
                calls += visitor.calls
            self._direct[name] = (uses, calls)
        return self._direct[name]

    def uses(self, function: str) -> list[Use]:
        """Every use in ``function``'s body and in the same-module helpers it reaches.

        A helper's use is reported at the line of ``function`` that leads to it, with the chain
        of helpers in ``via``.
        """
        found, calls = self.direct(function)
        found = list(found)
        seen = {function}
        queue = deque((helper, line, helper) for helper, line in calls)
        while queue:
            helper, line, chain = queue.popleft()
            if helper in seen:
                continue
            seen.add(helper)
            helper_uses, helper_calls = self.direct(helper)
            found += [Use(u.capability, line, u.what, u.variable, f"{chain} (line {u.line})")
                      for u in helper_uses]
            queue.extend((nxt, line, f"{chain} -> {nxt}") for nxt, _ in helper_calls)
        return found
