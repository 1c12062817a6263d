"""Policies shipped with callgate, loaded by name.

``safe-research``
    HTTP get/head to any host, file reads under the working directory except secrets (SSH and
    cloud credential directories, ``.env`` files, private keys, stored passwords), no shell, no
    writes; shell with untrusted input is denied.
``workspace-assistant``
    File read and write under the working directory (writes need approval, secrets are denied),
    HTTP get, shell exec of ``ls``, ``cat``, ``grep``, ``git`` and ``python`` (denied when the
    input is untrusted), database queries.
``strict``
    File reads under ``./data`` only, HTTP get to no host; quarantine after two denials.
``deny-all``
    No grants: every call is denied.

Relative paths in presets (``./**``) are relative to the policy's working directory, which the
caller chooses with ``working_dir``.
"""

from __future__ import annotations

import dataclasses
import os
from importlib import resources
from pathlib import Path

from callgate._errors import PolicyError, Problem
from callgate.policy._loader import LoadedPolicy, parse_policy

__all__ = ["load_preset", "preset_names"]

_SUFFIX = ".yaml"


def preset_names() -> list[str]:
    """The names of the shipped presets, sorted."""
    files = resources.files(__name__).iterdir()
    return sorted(f.name.removesuffix(_SUFFIX) for f in files if f.name.endswith(_SUFFIX))


def load_preset(name: str, *, working_dir: str | os.PathLike[str] | None = None) -> LoadedPolicy:
    """Load and validate the preset ``name``; raise ``PolicyError`` if there is no such preset.

    ``working_dir``, when given, becomes the policy's working directory (resolved absolute);
    otherwise the policy has none and its relative paths follow the caller's default.
    """
    names = preset_names()
    if name not in names:
        raise PolicyError([Problem(
            f"no preset named {name!r}; available: {', '.join(names)}", source="<presets>"
        )])
    resource = resources.files(__name__).joinpath(name + _SUFFIX)
    loaded = parse_policy(resource.read_text(encoding="utf-8"),
                          f"callgate/policy/presets/{name}.yaml")
    if working_dir is None:
        return loaded
    resolved = str(Path(working_dir).resolve())
    policy = loaded.policy.model_copy(update={"working_dir": resolved})
    return dataclasses.replace(loaded, policy=policy)
