"""The values callgate passes around: calls, decisions, results, taint and events.

Models that cross a trust boundary (calls from an agent, policy pieces) are pydantic models that
reject unknown fields and wrong types. ``Event`` is a plain slotted dataclass because the
behavioral monitor creates one per call on the hot path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Verdict = Literal["allow", "deny", "require-approval"]
Status = Literal["ok", "error", "denied"]

#: Taint sources callgate knows; custom source names are allowed too.
KNOWN_TAINT_SOURCES: tuple[str, ...] = (
    "web",
    "rag",
    "email",
    "retrieved-doc",
    "model-generated",
    "user-provided",
    "tool-output",
)
#: Sources whose content an attacker may control.
UNTRUSTED_SOURCES: frozenset[str] = frozenset({"web", "rag", "email", "retrieved-doc"})


class StrictModel(BaseModel):
    """Base for validated models: unknown fields and wrong types are errors."""

    # JSON dumps keep an infinite or NaN float as a float (the audit log stores it as a marked
    # number) instead of turning it into null, which would record a value the call never had.
    model_config = ConfigDict(extra="forbid", strict=False, frozen=True,
                              ser_json_inf_nan="constants")


class TaintLabel(StrictModel):
    """Provenance of a piece of data: where it came from. Labels are never removed."""

    source: str = Field(min_length=1, max_length=64)
    origin: str = ""
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    propagated_from: str | None = None


class ToolCall(StrictModel):
    """What an agent asks for. ``id``, ``run_id`` and ``sequence`` are assigned by the kernel."""

    tool: str = Field(min_length=1, max_length=256)
    tool_class: str = Field(min_length=1, max_length=64)
    action: str = Field(min_length=1, max_length=64)
    parameters: dict[str, Any] = Field(default_factory=dict)
    taint: tuple[TaintLabel, ...] = ()
    token: str | None = None
    id: str = ""
    run_id: str = ""
    sequence: int = 0
    timestamp: str = ""
    principal: str = ""

    @field_validator("taint", mode="before")
    @classmethod
    def _names_are_labels(cls, value: Any) -> Any:
        # The wire format may give taint as bare source names: ["web", "email"].
        if isinstance(value, list | tuple):
            return [{"source": v} if isinstance(v, str) else v for v in value]
        return value

    def taint_sources(self) -> frozenset[str]:
        return frozenset(label.source for label in self.taint)


class Reason(StrictModel):
    """Why a decision went the way it did: the id of the rule or check, and a sentence."""

    id: str
    check: str
    message: str


class Witness(StrictModel):
    """The offending events of a behavioral violation (sequence numbers from 1)."""

    statement: str
    events: tuple[int, ...] = ()
    detail: str = ""


class Decision(StrictModel):
    """A verdict with its reasons. Deciding never raises: errors become a deny with a reason."""

    verdict: Verdict
    reasons: tuple[Reason, ...] = ()
    witness: Witness | None = None
    call_id: str = ""

    @property
    def allowed(self) -> bool:
        return self.verdict == "allow"

    def summary(self) -> str:
        why = "; ".join(f"[{r.id}] {r.message}" for r in self.reasons) or "no reason"
        return f"{self.verdict}: {why}"


class ToolResult(StrictModel):
    """What came back from executing an allowed call."""

    call_id: str
    status: Status
    output: Any = None
    error: str | None = None
    taint: tuple[TaintLabel, ...] = ()
    duration_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class Flow:
    """A value of this event that appeared verbatim in the output of an earlier event."""

    arg: str
    source_event: int
    taint: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True, init=False)
class Event:
    """A typed event of a trace: Vigil's <action, named args, status, output> plus taint.

    ``seq`` numbers events from 1 after abstraction; ``line`` is the trace line (1-based) the
    event came from, when it came from a file. ``taint`` is what the call's inputs carry;
    ``source`` is what its own output is (kept apart: a mail tool's output is ``email``, which
    says nothing about the call that fetched it); ``provenance`` is per argument.

    Frozen like any frozen dataclass; only its constructor is written out (see ``__init__``).
    """

    action: str
    args: Mapping[str, Any] = field(default_factory=dict)
    status: Status = "ok"
    output: str = ""
    taint: frozenset[str] = frozenset()
    seq: int = 0
    line: int | None = None
    derived: bool = False
    flows: tuple[Flow, ...] = ()
    #: for each argument, where each piece of its values first appeared (each identifier, each
    #: element of a list, the value or each quoted passage): the labels of that content
    #: (``trusted`` for content without taint, ``unseen`` for a value seen nowhere before)
    provenance: Mapping[str, tuple[frozenset[str], ...]] = field(default_factory=dict)
    #: the labels of whoever wrote this event's output (a tool's declared source)
    source: frozenset[str] = frozenset()

    def __init__(self, action: str, args: Mapping[str, Any] | None = None,  # noqa: PLR0917 - the fields in order, positional as the generated constructor takes them
                 status: Status = "ok", output: str = "", taint: frozenset[str] = frozenset(),
                 seq: int = 0, line: int | None = None, derived: bool = False,
                 flows: tuple[Flow, ...] = (),
                 provenance: Mapping[str, tuple[frozenset[str], ...]] | None = None,
                 source: frozenset[str] = frozenset()) -> None:
        # The generated constructor of a frozen dataclass sets each field through
        # ``object.__setattr__``; the slots' own setters do the same in half the time (two
        # events are made per call). ``None`` for ``args`` or ``provenance`` is a new ``{}``.
        put = _EVENT_SETTERS
        put[0](self, action)
        put[1](self, {} if args is None else args)
        put[2](self, status)
        put[3](self, output)
        put[4](self, taint)
        put[5](self, seq)
        put[6](self, line)
        put[7](self, derived)
        put[8](self, flows)
        put[9](self, {} if provenance is None else provenance)
        put[10](self, source)


#: The setters of ``Event``'s slots, in field order (a test holds them to the fields).
_EVENT_SETTERS: tuple[Any, ...] = tuple(
    vars(Event)[name].__set__ for name in Event.__dataclass_fields__)


@dataclass(frozen=True, slots=True)
class DeclaredOutput:
    """What a tool's output is: ``source``, the labels of whoever writes it (empty when the
    system itself does), and ``trusted_fields``, the fields of a structured output the system
    fills in whatever ``source`` says (a transaction's ``recipient``, not its ``subject``)."""

    source: frozenset[str] = frozenset()
    trusted_fields: frozenset[str] = frozenset()

