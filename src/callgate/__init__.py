"""callgate: a runtime reference monitor for AI agents.

Every tool call passes one pipeline that decides allow / deny / require-approval before anything
executes, records the decision in a hash-chained audit log, and judges the run's trace against
behavioral policies.
"""

# The facade is lazy: ``import callgate`` loads no model, schema or solver until a name is used,
# so the command line's help and the hook's fast path start in milliseconds.

from __future__ import annotations

from callgate import _aliases
from callgate._lazy import lazy as _lazy

TYPE_CHECKING = False  # typing itself costs 15 ms at start-up

if TYPE_CHECKING:
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
    from callgate.kernel import (
        CapabilityToken,
        Kernel,
        Tool,
        ToolDeclaration,
        declare,
    )
    from callgate.policy import (
        BehaviorStatement,
        Capability,
        CapabilityConstraints,
        LoadedPolicy,
        Policy,
        Principal,
        Rule,
        ToolPolicy,
        load_policy,
        load_preset,
        parse_policy,
        preset_names,
    )

#: public name -> the module that defines it
_HOME: dict[str, str] = {
    "AuditError": "callgate._errors",
    "CallgateError": "callgate._errors",
    "Denied": "callgate._errors",
    "ExecutorError": "callgate._errors",
    "PolicyError": "callgate._errors",
    "Problem": "callgate._errors",
    "SandboxError": "callgate._errors",
    "TemporalError": "callgate._errors",
    "TraceError": "callgate._errors",
    "Decision": "callgate._model",
    "Event": "callgate._model",
    "Flow": "callgate._model",
    "Reason": "callgate._model",
    "TaintLabel": "callgate._model",
    "ToolCall": "callgate._model",
    "ToolResult": "callgate._model",
    "Witness": "callgate._model",
    "CapabilityToken": "callgate.kernel",
    "Kernel": "callgate.kernel",
    "Tool": "callgate.kernel",
    "ToolDeclaration": "callgate.kernel",
    "declare": "callgate.kernel",
    "BehaviorStatement": "callgate.policy",
    "Capability": "callgate.policy",
    "CapabilityConstraints": "callgate.policy",
    "LoadedPolicy": "callgate.policy",
    "Policy": "callgate.policy",
    "Principal": "callgate.policy",
    "Rule": "callgate.policy",
    "ToolPolicy": "callgate.policy",
    "load_policy": "callgate.policy",
    "load_preset": "callgate.policy",
    "parse_policy": "callgate.policy",
    "preset_names": "callgate.policy",
}

_aliases.install()


__getattr__ = _lazy(__name__, _HOME, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
