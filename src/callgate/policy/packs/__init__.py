"""Statement packs and policy sets shipped with callgate.

``sequences.yaml`` is the built-in statement pack (the Ari Kernel sequence rules). A policy set
is a folder of policies, one per suite of an environment: ``agentdojo`` holds one policy for each
of AgentDojo's suites (``banking``, ``slack``, ``travel``, ``workspace``), named by the suite.
"""

from __future__ import annotations

from importlib import resources

from callgate._errors import PolicyError, Problem
from callgate.policy._loader import LoadedPolicy, parse_policy

__all__ = ["load_policy_set", "policy_set_names"]

_SUFFIX = ".yaml"


def policy_set_names() -> list[str]:
    """The shipped policy sets, sorted."""
    return sorted(f.name for f in resources.files(__name__).iterdir()
                  if f.is_dir() and not f.name.startswith("_") and f.name != "tests")


def load_policy_set(name: str) -> dict[str, LoadedPolicy]:
    """The policies of the shipped set ``name``, by suite; ``PolicyError`` for an unknown set."""
    names = policy_set_names()
    if name not in names:
        raise PolicyError([Problem(f"no policy set named {name!r}; available: "
                                   f"{', '.join(names)}", source="<packs>")])
    folder = resources.files(__name__).joinpath(name)
    return {f.name.removesuffix(_SUFFIX): parse_policy(
                f.read_text(encoding="utf-8"), f"callgate/policy/packs/{name}/{f.name}")
            for f in sorted(folder.iterdir(), key=lambda f: f.name)
            if f.name.endswith(_SUFFIX)}
