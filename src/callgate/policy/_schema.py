"""The policy file's schema: principal, capabilities, rules, tool policies, run state, behavior.

Only ``name`` and ``version`` are required. Unknown keys and wrong types are errors; the YAML
loader (``_loader``) turns each validation error into a file:line:column problem.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from callgate._model import DeclaredOutput, StrictModel, Verdict
from callgate.policy._settings import ExecutorSettings, GuardSettings, McpSettings

Risk = Literal["low", "medium", "high", "critical"]
PathRole = Literal["read", "write"]
RISK_ORDER: dict[str, int] = {"low": 0, "medium": 1, "high": 2, "critical": 3}

_Count = Annotated[int, Field(ge=0)]
_Positive = Annotated[int, Field(gt=0)]


def _as_list(value: Any) -> Any:
    """Accept a single string where a list of strings is expected."""
    return [value] if isinstance(value, str) else value


def _check_follow(follow: tuple[str, ...], patterns: tuple[str, ...]) -> None:
    """An opt-in to follow a symlinked root must name a pattern given beside it."""
    unknown = [p for p in follow if p not in patterns]
    if unknown:
        raise ValueError(f"follow_symlinks names {', '.join(map(repr, unknown))}, which is not "
                         f"among the paths given beside it")


class CapabilityConstraints(StrictModel):
    """Limits on a capability. An absent constraint does not limit; an empty list allows none.

    ``follow_symlinks`` lists ``allowed_paths`` patterns whose root may lead out through a
    symlink, as in ``FilesystemPolicy``.
    """

    allowed_hosts: tuple[str, ...] | None = None
    allowed_paths: tuple[str, ...] | None = None
    allowed_commands: tuple[str, ...] | None = None
    allowed_databases: tuple[str, ...] | None = None
    allowed_tables: tuple[str, ...] | None = None
    max_calls_per_minute: _Positive | None = None
    # None, not (): an absent opt-in is an absent constraint ("no constraint" stays detectable).
    follow_symlinks: tuple[str, ...] | None = None

    @model_validator(mode="after")
    def _follow_names_a_root(self) -> CapabilityConstraints:
        _check_follow(self.follow_symlinks or (), self.allowed_paths or ())
        return self


class Capability(StrictModel):
    """A grant of a tool class (and some or all of its actions) to a principal."""

    tool_class: str = Field(min_length=1)
    actions: tuple[str, ...] = ()
    constraints: CapabilityConstraints = CapabilityConstraints()

    _norm_actions = field_validator("actions", mode="before")(_as_list)

    def covers_action(self, action: str) -> bool:
        return not self.actions or action in self.actions


class Principal(StrictModel):
    """The agent identity the kernel acts for, with its grants (no ambient authority)."""

    name: str = Field(min_length=1)
    capabilities: tuple[Capability, ...] = ()


class ParamMatch(StrictModel):
    """A condition on one parameter of a call (patterns run on RE2 with Python's meaning; see
    ``callgate.matchers._regex``)."""

    pattern: str | None = None
    in_: tuple[str, ...] | None = Field(default=None, alias="in")
    not_in: tuple[str, ...] | None = None


class RuleMatch(StrictModel):
    """What a rule applies to. Every given field must match; list fields match any element."""

    tool: tuple[str, ...] | None = None
    tool_class: tuple[str, ...] | None = None
    action: tuple[str, ...] | None = None
    taint_sources: tuple[str, ...] | None = None
    parameters: dict[str, ParamMatch] = Field(default_factory=dict)

    _norm = field_validator("tool", "tool_class", "action", "taint_sources", mode="before")(
        _as_list
    )


class Rule(StrictModel):
    """A priority rule: lower priority numbers are evaluated first, first match wins."""

    id: str = Field(min_length=1)
    priority: int = Field(default=500, ge=0, le=999)
    match: RuleMatch = RuleMatch()
    decision: Verdict
    reason: str = ""
    name: str | None = None
    description: str | None = None
    tags: tuple[str, ...] = ()


class FilesystemPolicy(StrictModel):
    """Declared filesystem stance. ``None`` = unspecified; an empty list = none allowed.

    ``follow_symlinks`` lists patterns of ``read``/``write``, spelled as written there, whose
    root may lead out of where it was written through a symlink (see ``_paths.root_escape``).
    """

    read: tuple[str, ...] | None = None
    write: tuple[str, ...] | None = None
    follow_symlinks: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _follow_names_a_root(self) -> FilesystemPolicy:
        _check_follow(self.follow_symlinks, (*(self.read or ()), *(self.write or ())))
        return self


class NetworkHosts(StrictModel):
    """A host allow-list. It needs an egress proxy to enforce; see ``ToolPolicy``."""

    hosts: tuple[str, ...]
    proxy: str | None = None


class EnvironmentPolicy(StrictModel):
    """Environment variables a tool may see."""

    allow: tuple[str, ...] = ()


class Limits(StrictModel):
    """Resource limits for subprocess tools."""

    cpu_seconds: _Positive | None = None
    memory_mb: _Positive | None = None
    processes: _Positive | None = None
    output_kb: _Positive | None = None
    wall_seconds: _Positive | None = None


class OutputPolicy(StrictModel):
    """What a tool's output is, for taint and provenance.

    ``source`` is the label of whoever writes what the tool returns (``web``, ``email``,
    ``retrieved-doc``, …; none: the system itself, trusted). ``trusted_fields`` names the
    fields of a structured (JSON or YAML) output that the system fills in, trusted whatever
    ``source`` says: a transaction's ``recipient`` and ``amount``, not its ``subject``.
    """

    source: str | None = Field(default=None, min_length=1, max_length=64)
    trusted_fields: tuple[str, ...] = ()


class ToolConstraints(StrictModel):
    """When and how often a tool may run within one run."""

    max_invocations: _Count | None = None
    only_after: tuple[str, ...] = ()
    forbidden: bool = False


class ToolPolicy(StrictModel):
    """What a declared tool may touch. Unspecified parts are not enforced by the path gate.

    ``path_params`` names the parameters that hold paths and how each is used: a mapping
    ``{name: read | write}``. A list of names means every one is read, and is refused when the
    tool declares filesystem writes: then each path parameter's role must be written out.
    """

    risk: Risk = "medium"
    filesystem: FilesystemPolicy | None = None
    network: Literal["deny", "allow"] | NetworkHosts | None = None
    environment: Literal["deny"] | EnvironmentPolicy | None = None
    exec: Literal["allow", "deny"] | None = None
    constraints: ToolConstraints = ToolConstraints()
    limits: Limits = Limits()
    scratch: bool = False
    working_dir: str | None = None
    path_params: dict[str, PathRole] = Field(default_factory=dict)
    tool_class: str | None = None
    output: OutputPolicy | None = None

    @field_validator("path_params", mode="before")
    @classmethod
    def _roles_are_explicit(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple):
            return value
        fs = info.data.get("filesystem")
        if isinstance(fs, FilesystemPolicy) and fs.write:
            raise ValueError(
                "the tool declares filesystem writes, so path_params must give each path "
                "parameter its role as a mapping, e.g. {path: write, template: read}")
        return {name: "read" for name in value} if all(isinstance(n, str) for n in value) \
            else value

    @field_validator("network")
    @classmethod
    def _hosts_need_a_proxy(cls, value: Any) -> Any:
        # An allow-list nobody enforces would silently act as allow-all (or deny-all): refuse it.
        if isinstance(value, NetworkHosts) and not value.proxy:
            raise ValueError(
                "network host allow-lists need an egress proxy (network.proxy); without one "
                "use 'deny' or 'allow'"
            )
        return value


class RunStateSettings(StrictModel):
    """Run-level settings: when to quarantine, whether the built-in statement pack is on, and
    how many characters of each output statements observe (``output`` patterns)."""

    quarantine_after_denials: _Positive = 5
    behavioral_rules: bool = True
    observation_chars: Annotated[int, Field(ge=0, le=65_536)] = 65_536


class BehaviorStatement(StrictModel):
    """A temporal statement in the behavioral language (parsed by ``callgate.temporal``)."""

    id: str = Field(min_length=1)
    rule: str = Field(min_length=1)
    enforce: Literal["block", "alert", "quarantine"] = "block"
    description: str | None = None


class Policy(StrictModel):
    """A whole policy file."""

    name: str = Field(min_length=1)
    version: int | str
    working_dir: str | None = None
    principal: Principal | None = None
    rules: tuple[Rule, ...] = ()
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)
    run_state: RunStateSettings = RunStateSettings()
    behavior: tuple[BehaviorStatement, ...] = ()
    guards: GuardSettings | None = None
    executors: ExecutorSettings | None = None
    mcp: McpSettings | None = None

    def declared_outputs(self) -> dict[str, DeclaredOutput]:
        """The tools whose output the policy declares (``tools.NAME.output``), by name."""
        out: dict[str, DeclaredOutput] = {}
        for name, tool in self.tools.items():
            if tool.output is not None:
                source = frozenset({tool.output.source}) if tool.output.source else frozenset()
                out[name] = DeclaredOutput(source, frozenset(tool.output.trusted_fields))
        return out

    @model_validator(mode="after")
    def _ids_are_unique(self) -> Policy:
        for kind, ids in (
            ("rule", [r.id for r in self.rules]),
            ("behavior statement", [b.id for b in self.behavior]),
        ):
            seen: set[str] = set()
            for ident in ids:
                if ident in seen:
                    raise ValueError(f"duplicate {kind} id {ident!r}")
                seen.add(ident)
        return self
