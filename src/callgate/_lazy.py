"""Packages whose names load on first use: one definition of the lazy ``__getattr__``.

A package lists where each public name lives (``{name: module}``, a module relative to the
package when it starts with ``_``, else absolute) and sets ``__getattr__ = lazy(...)``: importing
the package costs nothing, and a name's module is imported the first time the name is used,
then kept in the package's namespace.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy"]


def lazy(package: str, homes: Mapping[str, str], namespace: MutableMapping[str, Any]
         ) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package`` that loads each name of ``homes`` on first use."""
    def __getattr__(name: str) -> Any:  # noqa: N807 - the module-level hook Python calls
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = f"{package}.{home}" if home.startswith("_") else home
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # resolved once
        return value

    return __getattr__
