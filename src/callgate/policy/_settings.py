"""The settings sections of a policy file: ``guards:`` and ``executors:``.

They say how the content guards and the executors are tuned and what the executors need to know
of the world; the guards and executors read them, the schema (``Policy.guards``,
``Policy.executors``) holds them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

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
