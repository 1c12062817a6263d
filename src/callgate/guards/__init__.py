"""Content guards: checks on what a call carries, run by the kernel with the taint step.

A guard has ``check(call, taint) -> Reason | None`` (deny with the reason) and
``observe(call, result)`` (learn from every decided call). ``build_guards`` makes the shipped
ones from ``GuardSettings``:

* ``injection`` - injected-instruction phrases after confusable normalisation, and mixed-script
  words in commands, URLs and paths;
* ``secrets`` - fingerprints of secrets the agent read (persisted across runs with a state
  file), and credential shapes, in anything the agent sends;
* ``provenance`` - content written under untrusted taint, carried later by a shell command or
  an HTTP request;
* ``egress`` - exfiltration shapes of HTTP requests (bodies on GET, data in DNS labels, query
  strings and headers, slow drips, low-entropy pings of secrets, converging channels).

See ``docs/guards.md``.
"""

from __future__ import annotations

from callgate.guards._egress import EgressGuard
from callgate.guards._injection import InjectionGuard, normalise
from callgate.guards._open import open_fingerprints
from callgate.guards._protocol import Guard
from callgate.guards._secrets import ProvenanceGuard, SecretsGuard
from callgate.guards._store import FingerprintStore
from callgate.policy._settings import (
    EgressSettings,
    GuardSettings,
    InjectionSettings,
    ProvenanceSettings,
    SecretsSettings,
)


def build_guards(settings: GuardSettings | None = None, *,
                 state_path: str | None = None) -> list[Guard]:
    """The enabled guards, in checking order: injection, egress, secrets, provenance.

    Egress comes before secrets so that a secret riding in a URL is named by its shape
    (``guard.egress.sensitive-ping``); every guard observes every decided call.

    ``state_path`` is where fingerprints of secrets and planted content are kept across runs:
    a SQLite file, or a ``postgresql://`` URL whose table every process given it shares;
    without it they last for the guards' lifetime (one run). Raises ``CallgateError`` when
    the store cannot be opened.
    """
    settings = settings or GuardSettings()
    needs_store = settings.secrets.enabled or settings.provenance.enabled or \
        settings.egress.enabled
    store = open_fingerprints(state_path, window=settings.secrets.window) \
        if needs_store else None
    guards: list[Guard] = []
    if settings.injection.enabled:
        guards.append(InjectionGuard(settings.injection.extra_phrases))
    if settings.egress.enabled:
        guards.append(EgressGuard(settings.egress, store if settings.secrets.enabled else None))
    if settings.secrets.enabled and store is not None:
        guards.append(SecretsGuard(store))
    if settings.provenance.enabled and store is not None:
        guards.append(ProvenanceGuard(store))
    return guards


__all__ = [
    "EgressGuard",
    "EgressSettings",
    "FingerprintStore",
    "Guard",
    "GuardSettings",
    "InjectionGuard",
    "InjectionSettings",
    "ProvenanceGuard",
    "ProvenanceSettings",
    "SecretsGuard",
    "SecretsSettings",
    "build_guards",
    "normalise",
    "open_fingerprints",
]
