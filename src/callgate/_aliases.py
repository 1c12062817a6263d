"""Old public module paths, kept working after the layout of 0.2.

Modules inside callgate's packages are private (``callgate.audit._store``); each package's
``__init__`` is its public surface. Code written against the earlier layout imported some
modules by name (``callgate.audit.store``, ``callgate.temporal.cli``, ``callgate.presets``);
``MOVED`` maps each of those names to the module that now holds its contents, and an import
hook, installed when ``callgate`` is imported, hands out that module under the old name. The
table is the only place the old layout lives.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from types import ModuleType

_PRIVATE = {
    "audit": "anchor chain checkpoint encode files keys schema store verify",
    "temporal": "behavior body forms lexer monitor nodes parser patterns scope smt trace",
    "sandbox": "bwrap classify executor firejail limits none procfs seccomp shells",
    "executors": "database file http retrieval shell wiring",
    "guards": "egress injection secrets",
}

#: old module path -> the module that holds its contents now
MOVED: dict[str, str] = {
    "callgate.presets": "callgate.policy.presets",
    "callgate.packs": "callgate.policy.packs",
    "callgate.audit.cli": "callgate.cli._audit",
    "callgate.temporal.cli": "callgate.cli._check",
    "callgate.executors.cli": "callgate.cli._run",
    "callgate.manifest.cli": "callgate.cli._manifest",
    **{f"callgate.{package}.{name}": f"callgate.{package}._{name}"
       for package, names in _PRIVATE.items() for name in names.split()},
}


class _Loader:
    """Loads an old name as the module now holding it: one module object, two names.

    (The import protocol is duck-typed; ``importlib.abc`` is not imported, it costs 20 ms.)
    """

    def __init__(self, target: str) -> None:
        self._target = target
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self._target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was executed under its own name. The import system has
        just set the alias's spec on it; its own spec (which says, for one, that it is a
        package) is put back."""
        module.__spec__ = self._spec


class _Finder:
    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        moved = MOVED.get(fullname)
        if moved is None:
            return None
        loader = _Loader(moved)
        return importlib.machinery.ModuleSpec(fullname, loader)  # type: ignore[arg-type]  # duck-typed


def install() -> None:
    """Put the hook on ``sys.meta_path`` once."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())


def moved_attribute(module: str, name: str) -> object:
    """``name`` from ``module``: for a package's public name whose home moved elsewhere."""
    return getattr(importlib.import_module(module), name)
