"""Compiling a skill's written rules into statements of the policy language.

``compile_spec`` reads a specification's requirement sentences, compiles the common phrasings
with deterministic rules, gives the rest to a model when one is configured (``provider_from``),
and keeps a statement only when it parses, names nothing outside the run's signature Σ
(``signature_of_trace``, ``signature_of_tools``) and can matter over it (some run breaks it,
some run it allows). See ``docs/compile.md``.

Names are loaded on first use.
"""

from __future__ import annotations

from callgate._lazy import lazy as _lazy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from callgate.compile._cache import ResponseCache, default_cache_dir
    from callgate.compile._compile import (
        ApprovalRule,
        Compilation,
        CompiledStatement,
        Unsupported,
        compile_spec,
    )
    from callgate.compile._providers import Provider, ProviderError, provider_from
    from callgate.compile._signature import (
        Signature,
        signature_of_events,
        signature_of_tools,
        signature_of_trace,
    )
    from callgate.compile._spec import MAX_SPEC_BYTES, Requirement, Spec, read_spec

_HOME = {
    "ResponseCache": "_cache", "default_cache_dir": "_cache", "ApprovalRule": "_compile",
    "Compilation": "_compile", "CompiledStatement": "_compile", "Unsupported": "_compile",
    "compile_spec": "_compile", "Provider": "_providers", "ProviderError": "_providers",
    "provider_from": "_providers", "Signature": "_signature",
    "signature_of_events": "_signature", "signature_of_tools": "_signature",
    "signature_of_trace": "_signature", "Requirement": "_spec", "Spec": "_spec",
    "read_spec": "_spec", "MAX_SPEC_BYTES": "_spec",
}

__all__ = ["MAX_SPEC_BYTES", "ApprovalRule", "Compilation", "CompiledStatement", "Provider",
           "ProviderError", "Requirement", "ResponseCache", "Signature", "Spec", "Unsupported",
           "compile_spec", "default_cache_dir", "provider_from", "read_spec",
           "signature_of_events", "signature_of_tools", "signature_of_trace"]


__getattr__ = _lazy(__name__, _HOME, globals())
