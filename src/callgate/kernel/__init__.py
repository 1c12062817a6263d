"""The kernel: the pipeline every tool call passes, one module per step.

``Kernel`` (``_kernel``) runs the steps in order; the steps are ``_runstate`` (quarantine),
``_capabilities`` (grants and tokens), ``_toolpolicy`` (a declared tool's own stance), ``_taint``
(what the inputs carry), ``_rules`` (first match), ``_behavior`` (temporal statements online);
``_declare`` turns in-process functions into mediated tools.
"""

from callgate.guards import Guard
from callgate.kernel._capabilities import CapabilityToken
from callgate.kernel._declare import Tool, ToolDeclaration, declare
from callgate.kernel._kernel import ApprovalHandler, Executor, Kernel

__all__ = [
    "ApprovalHandler",
    "CapabilityToken",
    "Executor",
    "Guard",
    "Kernel",
    "Tool",
    "ToolDeclaration",
    "declare",
]
