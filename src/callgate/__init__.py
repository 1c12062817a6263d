"""callgate: a runtime reference monitor for AI agents.

Every tool call passes one pipeline that decides allow / deny / require-approval before anything
executes, records the decision in a hash-chained audit log, and judges the run's trace against
behavioural policies.
"""

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
from callgate._policy import (
    BehaviorStatement,
    Capability,
    CapabilityConstraints,
    Policy,
    Principal,
    Rule,
    ToolPolicy,
)

__all__ = [
    "AuditError",
    "BehaviorStatement",
    "CallgateError",
    "Capability",
    "CapabilityConstraints",
    "Decision",
    "Denied",
    "Event",
    "ExecutorError",
    "Flow",
    "Policy",
    "PolicyError",
    "Principal",
    "Problem",
    "Reason",
    "Rule",
    "SandboxError",
    "TaintLabel",
    "TemporalError",
    "ToolCall",
    "ToolPolicy",
    "ToolResult",
    "TraceError",
    "Witness",
]
