"""Guard settings: the ``guards:`` section of a policy file.

This module imports nothing from the kernel or the policy schema, so the policy schema can
import it (``Policy.guards``) without a cycle.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from callgate._model import StrictModel

_Chars = Annotated[int, Field(ge=8, le=4096)]


class EgressSettings(StrictModel):
    """Thresholds of the egress guard (see ``callgate.guards.egress``)."""

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
