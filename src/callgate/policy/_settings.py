"""The settings sections of a policy file: ``guards:``, ``executors:`` and ``mcp:``.

They say how the content guards and the executors are tuned, what the executors need to know
of the world, and which MCP servers the gateway fronts; the guards, executors and the gateway
read them, the schema (``Policy.guards``, ``Policy.executors``, ``Policy.mcp``) holds them.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from callgate._model import StrictModel

_Chars = Annotated[int, Field(ge=8, le=4096)]


class EgressSettings(StrictModel):
    """Thresholds of the egress guard (see ``callgate.guards._egress``)."""

    enabled: bool = True
    label_hex_chars: _Chars = 16
    label_encoded_chars: _Chars = 20
    subdomain_chars: _Chars = 48
    value_encoded_chars: _Chars = 32
    drip_budget_bytes: Annotated[int, Field(ge=0)] = 1024
    convergence_channels: Annotated[int, Field(ge=2, le=5)] = 3


class SecretsSettings(StrictModel):
    """The secrets guard: on or off, and the fingerprint window in characters."""

    enabled: bool = True
    window: Annotated[int, Field(ge=8, le=64)] = 12


class ProvenanceSettings(StrictModel):
    """The provenance (relay) guard: on or off."""

    enabled: bool = True


class InjectionSettings(StrictModel):
    """The injection guard: on or off, and phrases to add to the built-in ones."""

    enabled: bool = True
    extra_phrases: tuple[str, ...] = ()


class GuardSettings(StrictModel):
    """Which content guards run, with their thresholds. Every guard is on by default."""

    egress: EgressSettings = EgressSettings()
    secrets: SecretsSettings = SecretsSettings()
    provenance: ProvenanceSettings = ProvenanceSettings()
    injection: InjectionSettings = InjectionSettings()


class HttpSettings(StrictModel):
    """The HTTP executor's settings (see ``HttpExecutor``)."""

    allowed_addresses: tuple[str, ...] = ()
    hosts: dict[str, str] = Field(default_factory=dict)
    system_dns: bool = True
    timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0
    max_response_bytes: Annotated[int, Field(gt=0)] = 5 * 2**20
    cross_host_redirects: bool = False


class ShellSettings(StrictModel):
    """How shell calls may run (see ``ShellExecutor``)."""

    allow_metacharacters: bool = False
    allow_interpreters: bool = False
    backend: Literal["auto", "bwrap", "firejail", "none"] = "auto"
    allow_unconfined: bool = False


class ExecutorSettings(StrictModel):
    """The ``executors:`` section of a policy: what the executors need to know of the world.

    Relative paths (retrieval root and index, database files) are relative to the kernel's
    working directory; ``follow_symlinks`` lists those of them, as written, allowed to lead out
    of it through a symlink (see ``callgate.matchers._paths.root_escape``).
    """

    http: HttpSettings = HttpSettings()
    databases: dict[str, str] = Field(default_factory=dict)
    allow_ddl: bool = False
    retrieval_root: str | None = None
    retrieval_index: str | None = None
    shell: ShellSettings = ShellSettings()
    follow_symlinks: tuple[str, ...] = ()


#: A server name: what ``SERVER`` is in ``mcp__SERVER__TOOL`` and in ``callgate mcp trust``.
#: An MCP server's name. No "__" and no "_" at the end: then the first "__" after ``mcp__`` in
#: ``mcp__SERVER__TOOL`` is the separator, so one policy name never means two tools.
SERVER_NAME = re.compile(r"^(?!.*__)[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9.-])?$")
_Seconds = Annotated[float, Field(gt=0, le=3600)]


class McpServerSettings(StrictModel):
    """One upstream MCP server of the gateway: how to reach it and what its output is.

    One of ``command`` (a stdio child, resolved with the gateway's ``PATH``) and ``url``
    (Streamable HTTP); ``callgate mcp serve`` needs one, ``callgate mcp proxy`` takes the
    command from its own command line. The child's environment is ``PATH``, ``HOME``, ``LANG``,
    ``TERM``, ``USER`` of the gateway, plus ``pass_env`` (names copied from the gateway's
    environment) and ``env`` (values written here). ``source`` is the taint label of what the
    server returns (``web`` for a fetch or browser server, ``email`` for a mail server), on every
    tool's output or, when ``untrusted_tools`` lists some, on theirs only. ``policy`` names
    another policy file (relative to the one that names it) whose principal, grants, rules and
    statements decide this server's calls, in a run of their own, instead of that file's.
    """

    command: str | None = Field(default=None, min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    pass_env: tuple[str, ...] = ()
    cwd: str | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    source: str | None = Field(default=None, min_length=1, max_length=64)
    untrusted_tools: tuple[str, ...] | None = None
    hide_denied: bool | None = None
    timeout_s: _Seconds | None = None
    policy: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_way_in(self) -> McpServerSettings:
        if self.command is not None and self.url is not None:
            raise ValueError("give one of command (a stdio server) or url (an HTTP one), "
                             "not both")
        if self.url is None and self.headers:
            raise ValueError("headers apply to a url server only")
        if self.command is None and (self.args or self.env or self.pass_env or self.cwd):
            raise ValueError("args, env, pass_env and cwd apply to a command server only")
        return self


class McpSettings(StrictModel):
    """The ``mcp:`` section: the gateway's upstream servers and how tools are shown.

    ``separator`` joins server and tool in the aggregated names ``callgate mcp serve`` shows
    (``SERVER__TOOL``); ``hide_denied`` drops from ``tools/list`` the tools the principal can
    never call; ``timeout_s`` bounds every upstream request; ``pins`` is the file that keeps
    the pinned tool definitions (default: beside the audit log).
    """

    separator: str = Field(default="__", min_length=1, max_length=8, pattern=r"^[_.:-]+$")
    hide_denied: bool = False
    timeout_s: _Seconds = 60.0
    max_message_bytes: Annotated[int, Field(ge=1024, le=256 * 2**20)] = 4 * 2**20
    pins: str | None = None
    servers: dict[str, McpServerSettings] = Field(default_factory=dict)

    @field_validator("servers")
    @classmethod
    def _names(cls, value: dict[str, McpServerSettings]) -> dict[str, McpServerSettings]:
        for name in value:
            if not SERVER_NAME.match(name):
                # "__" would make mcp__SERVER__TOOL ambiguous: server "a__b"'s tool "c" and
                # server "a"'s tool "b__c" would be one name to every rule and statement
                raise ValueError(f"server name {name!r} must be letters, digits, '_', '.', '-' "
                                 "(at most 63, starting with a letter or digit, not ending "
                                 "with '_', no '__')")
        return value

    @model_validator(mode="after")
    def _separator_splits(self) -> McpSettings:
        clash = [n for n in self.servers if self.separator in n]
        if clash:
            raise ValueError(f"server name {clash[0]!r} contains the separator "
                             f"{self.separator!r}; rename it or choose another separator")
        return self
