"""Effects of a script recovered from its syntax tree (Python ``ast``, JavaScript tree-sitter).

A script run by ``python x.py``, ``python -c``, ``node x.js`` or ``node -e`` is read without
running it. Each recognised call becomes an ``Effect``: file writes, reads and deletes,
subprocess calls (whose command line is parsed again by the caller), HTTP requests with their
URL and method, and environment reads. Arguments that are not literals are kept as their
source text, so a policy still sees what the script wrote. Shell scripts are not handled here:
they go through the same shell parser as command lines.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from callgate.abstraction._shell import thread_parser

if TYPE_CHECKING:  # tree-sitter is the abstraction extra, imported where a parser is made
    from tree_sitter import Node, Parser

#: Largest script read from disk or from a ``-c`` string.
MAX_SCRIPT_CHARS = 1_000_000
#: Most effects reported for one script.
MAX_EFFECTS = 500

_HTTP_METHODS = frozenset({"get", "post", "put", "delete", "patch", "head", "options"})
_HTTP_MODULES = frozenset({"requests", "httpx", "session", "client", "aiohttp"})
_SUBPROCESS = frozenset({"run", "call", "check_call", "check_output", "Popen", "getoutput"})
_DELETES = frozenset({"remove", "unlink", "rmtree", "rmdir", "removedirs"})
_COPIES = frozenset({"copy", "copy2", "copyfile", "copytree", "move", "rename", "replace"})


@dataclass(frozen=True, slots=True)
class Effect:
    """One effect a script would have: an action name and its named arguments."""

    action: str
    args: dict[str, Any] = field(default_factory=dict)


class ScriptError(Exception):
    """Internal: the script cannot be parsed."""


def _dotted(node: ast.expr) -> str:
    """``os.path.join`` for an attribute chain, ``""`` when it is not one."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if isinstance(node, ast.Call):
        parts.append(_dotted(node.func) + "()")
        return ".".join(reversed(parts))
    return ""


class _PythonEffects(ast.NodeVisitor):
    def __init__(self) -> None:
        self.constants: dict[str, str] = {}
        self.effects: list[Effect] = []

    def value(self, node: ast.expr | None) -> Any:
        """A literal's value, a known constant's value, or the expression's source text."""
        if node is None:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float | bool):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.constants[node.id]
        if isinstance(node, ast.List | ast.Tuple):
            return [self.value(item) for item in node.elts]
        return ast.unparse(node)

    def add(self, action: str, **args: Any) -> None:
        """Record an effect (arguments that are None are left out)."""
        if len(self.effects) < MAX_EFFECTS:
            self.effects.append(Effect(action, {k: v for k, v in args.items() if v is not None}))

    def visit_Assign(self, node: ast.Assign) -> None:
        """Remember ``NAME = "literal"`` so later uses of NAME resolve to the literal."""
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.constants[target.id] = node.value.value
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        """``os.environ["X"]`` reads the environment."""
        if _dotted(node.value) == "os.environ":
            self.add("read_env", name=self.value(node.slice))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        """Classify a call: file, process, HTTP or environment effect, or none."""
        name = _dotted(node.func)
        last = name.rsplit(".", 1)[-1]
        first = self.value(node.args[0]) if node.args else None
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if name == "open" or (name.endswith(".open") and last == "open" and "Path" not in name):
            mode = self.value(node.args[1]) if len(node.args) > 1 else None
            mode = self.value(keywords.get("mode")) if mode is None else mode
            writes = isinstance(mode, str) and any(c in mode for c in "wax+")
            self.add("write_file" if writes else "read_file", path=first, mode=mode)
        elif last in ("write_text", "write_bytes") or last in ("read_text", "read_bytes"):
            target = node.func.value if isinstance(node.func, ast.Attribute) else node.func
            path = self._path_of(target)
            self.add("write_file" if last.startswith("write") else "read_file", path=path)
        elif last in _DELETES and name.split(".")[0] in ("os", "shutil"):
            self.add("delete_file", path=first)
        elif last == "unlink" and isinstance(node.func, ast.Attribute):
            self.add("delete_file", path=self._path_of(node.func.value))
        elif last in _COPIES and name.split(".")[0] in ("shutil", "os"):
            dest = self.value(node.args[1]) if len(node.args) > 1 else None
            self.add("write_file", path=dest, source=first)
        elif (name.startswith("subprocess.") and last in _SUBPROCESS) or name in ("os.system",
                                                                                "os.popen"):
            self._subprocess(first, keywords)
        elif name.startswith(("os.exec", "os.spawn")):
            self.add("subprocess", argv=[self.value(a) for a in node.args[1:]] or [first])
        elif last in _HTTP_METHODS | {"request", "urlopen", "Request"} and self._is_http(name):
            self._http(node, name, last, keywords)
        elif name in ("os.getenv", "os.environ.get"):
            self.add("read_env", name=first)
        self.generic_visit(node)

    def _path_of(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Call) and _dotted(node.func).endswith("Path") and node.args:
            return self.value(node.args[0])
        return self.value(node)

    def _is_http(self, name: str) -> bool:
        head = name.split(".", maxsplit=1)[0].lower()
        return head in _HTTP_MODULES or name.startswith("urllib.") or name in ("urlopen",
                                                                                "Request")

    def _http(self, node: ast.Call, name: str, last: str, keywords: dict[str, ast.expr]) -> None:
        args = list(node.args)
        head = name.split(".", maxsplit=1)[0]
        if last == "request" and head in ("requests", "httpx", "session", "client"):
            method = self.value(args.pop(0)) if args else self.value(keywords.get("method"))
        elif last in _HTTP_METHODS:
            method = last.upper()
        else:
            method = self.value(keywords.get("method")) or ("POST" if "data" in keywords else
                                                             "GET")
        url = self.value(args[0]) if args else self.value(keywords.get("url"))
        data = keywords.get("data") or keywords.get("json") or keywords.get("content")
        self.add("http_request", url=url, method=method, data=self.value(data) if data else None)

    def _subprocess(self, first: Any, keywords: dict[str, ast.expr]) -> None:
        if isinstance(first, list):
            self.add("subprocess", argv=[str(w) for w in first])
        elif isinstance(first, str):
            self.add("subprocess", command=first)
        elif "args" in keywords:
            self._subprocess(self.value(keywords["args"]), {})


def python_effects(source: str) -> list[Effect]:
    """Effects of a Python script; raises ScriptError when it does not parse."""
    if len(source) > MAX_SCRIPT_CHARS:
        raise ScriptError(f"script longer than {MAX_SCRIPT_CHARS} characters")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise ScriptError(f"Python syntax error: {exc}") from exc
    visitor = _PythonEffects()
    try:
        visitor.visit(tree)
    except RecursionError as exc:
        raise ScriptError("Python script nested too deeply") from exc
    return visitor.effects


# -- JavaScript ------------------------------------------------------------------------------

_JS_WRITES = frozenset({"writeFile", "writeFileSync", "appendFile", "appendFileSync",
                        "createWriteStream"})
_JS_READS = frozenset({"readFile", "readFileSync", "createReadStream"})
_JS_DELETES = frozenset({"unlink", "unlinkSync", "rm", "rmSync", "rmdir", "rmdirSync"})
_JS_SHELL = frozenset({"exec", "execSync"})
_JS_SPAWN = frozenset({"spawn", "spawnSync", "execFile", "execFileSync"})


def _js_parser() -> Parser:
    import tree_sitter_javascript

    return thread_parser("js", tree_sitter_javascript.language)


def _js_text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def _js_value(node: Node) -> Any:
    if node.type == "string":
        return _js_text(node)[1:-1]
    if node.type == "template_string" and not any(
        c.type == "template_substitution" for c in node.named_children
    ):
        return _js_text(node)[1:-1]
    if node.type == "number":
        return _js_text(node)
    if node.type == "array":
        return [_js_value(c) for c in node.named_children]
    return _js_text(node)


def _js_method(args: list[Node]) -> str | None:
    for arg in args[1:]:
        if arg.type != "object":
            continue
        for pair in arg.named_children:
            key = pair.child_by_field_name("key")
            value = pair.child_by_field_name("value")
            if key is not None and value is not None and _js_text(key).strip("'\"") == "method":
                method = _js_value(value)
                return str(method).upper()
    return None


def _js_call(node: Node, out: list[Effect]) -> None:
    func = node.child_by_field_name("function")
    arguments = node.child_by_field_name("arguments")
    if func is None or arguments is None:
        return
    args = list(arguments.named_children)
    name = _js_text(func)
    last = name.rsplit(".", 1)[-1]
    first = _js_value(args[0]) if args else None
    if last in _JS_WRITES:
        out.append(Effect("write_file", {"path": first}))
    elif last in _JS_READS:
        out.append(Effect("read_file", {"path": first}))
    elif last in _JS_DELETES and ("fs" in name or "promises" in name):
        out.append(Effect("delete_file", {"path": first}))
    elif last in _JS_SHELL and isinstance(first, str):
        out.append(Effect("subprocess", {"command": first}))
    elif last in _JS_SPAWN and first is not None:
        rest = _js_value(args[1]) if len(args) > 1 else []
        out.append(Effect("subprocess", {"argv": [str(first), *map(str, rest)]
                                         if isinstance(rest, list) else [str(first)]}))
    elif name == "fetch" or (last in ("get", "post", "put", "delete", "patch", "request") and (
        name.split(".")[0] in ("axios", "http", "https", "got", "superagent")
    )):
        method = _js_method(args) or (last.upper() if last not in ("fetch", "request") else "GET")
        out.append(Effect("http_request", {"url": first, "method": method}))


def javascript_effects(source: str) -> list[Effect]:
    """Effects of a JavaScript program; raises ScriptError when it does not parse."""
    if len(source) > MAX_SCRIPT_CHARS:
        raise ScriptError(f"script longer than {MAX_SCRIPT_CHARS} characters")
    try:
        parser = _js_parser()
    except ImportError as exc:  # fail closed: a script that cannot be read is an error
        raise ScriptError("the JavaScript parser is not installed (the 'abstraction' extra)"
                          ) from exc
    tree = parser.parse(source.encode("utf-8", "replace"))
    if tree.root_node.has_error:
        raise ScriptError("JavaScript syntax error")
    out: list[Effect] = []
    stack = [tree.root_node]
    while stack and len(out) < MAX_EFFECTS:
        node = stack.pop()
        if node.type == "call_expression":
            _js_call(node, out)
        elif node.type in ("member_expression", "subscript_expression"):
            obj = node.child_by_field_name("object")
            if obj is not None and _js_text(obj) == "process.env":
                key = node.child_by_field_name("property") or node.child_by_field_name("index")
                if key is not None:
                    out.append(Effect("read_env", {"name": str(_js_value(key))}))
        stack.extend(reversed(node.named_children))
    return [Effect(e.action, {k: v for k, v in e.args.items() if v is not None}) for e in out]
