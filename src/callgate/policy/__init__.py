"""Policies: the schema of a policy file, its loader, its lint, and the shipped presets.

``load_policy`` reads a YAML file and reports every problem at file:line:col; ``parse_policy``
does the same for text; the schema's models (``Policy``, ``Capability``, ``Rule``, …) can also
be built in code. ``presets`` and ``packs`` hold the policies and statement packs shipped with
callgate.
"""

from callgate.policy._loader import LoadedPolicy, load_policy, parse_policy
from callgate.policy._schema import (
    BehaviorStatement,
    Capability,
    CapabilityConstraints,
    Policy,
    Principal,
    Rule,
    ToolPolicy,
)
from callgate.policy.presets import load_preset, preset_names

__all__ = [
    "BehaviorStatement",
    "Capability",
    "CapabilityConstraints",
    "LoadedPolicy",
    "Policy",
    "Principal",
    "Rule",
    "ToolPolicy",
    "load_policy",
    "load_preset",
    "parse_policy",
    "preset_names",
]
