"""callgate: a runtime reference monitor for AI agents.

Every tool call passes one pipeline that decides allow / deny / require-approval before anything
executes, records the decision in a hash-chained audit log, and judges the run's trace against
behavioral policies.
"""

from callgate import _aliases
from callgate._errors import (
    AuditError,
    CallgateError,
    Denied,
    ExecutorError,
    PolicyError,
    Problem,
    SandboxError,
    TemporalError,
    TraceError,
)
from callgate._model import (
    Decision,
    Event,
    Flow,
    Reason,
    TaintLabel,
    ToolCall,
    ToolResult,
    Witness,
)
from callgate.kernel._capabilities import CapabilityToken
from callgate.kernel._declare import Tool, ToolDeclaration, declare
from callgate.kernel._kernel import Kernel
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

_aliases.install()

__all__ = [
    "AuditError",
    "BehaviorStatement",
    "CallgateError",
    "Capability",
    "CapabilityConstraints",
    "CapabilityToken",
    "Decision",
    "Denied",
    "Event",
    "ExecutorError",
    "Flow",
    "Kernel",
    "LoadedPolicy",
    "Policy",
    "PolicyError",
    "Principal",
    "Problem",
    "Reason",
    "Rule",
    "SandboxError",
    "TaintLabel",
    "TemporalError",
    "Tool",
    "ToolCall",
    "ToolDeclaration",
    "ToolPolicy",
    "ToolResult",
    "TraceError",
    "Witness",
    "declare",
    "load_policy",
    "load_preset",
    "parse_policy",
    "preset_names",
]
