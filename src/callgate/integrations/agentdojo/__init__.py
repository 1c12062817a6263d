"""callgate inside AgentDojo's own runtime: every tool call of an AgentDojo agent decided first.

``KernelGate`` is a pipeline element that stands where AgentDojo's ``ToolsExecutor`` stands in
the tool loop: each tool call of the model's last message is the kernel call ``FUNCTION`` of
class ``agentdojo`` (action ``call``, the arguments as parameters); an allowed call runs with
AgentDojo's ``FunctionsRuntime`` and its formatted result is reported to the kernel, a denied one
does not run and the model reads why. ``defended_pipeline`` assembles the usual pipeline around
it; ``ScriptedModel`` plays the model from a list of calls; ``measure`` runs AgentDojo's suites
(utility without injections, security under the ``important_instructions`` attack) through the
gate with a scripted model and AgentDojo's own checkers.

Names are loaded on first use: importing AgentDojo (the ``agentdojo`` extra) takes seconds.
"""

from __future__ import annotations

from callgate._lazy import lazy as _lazy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from callgate.integrations.agentdojo._gate import (
        TOOL_CLASS,
        FinishRun,
        GatedCall,
        KernelGate,
        call_of,
        defended_pipeline,
    )
    from callgate.integrations.agentdojo._measure import (
        SUITES,
        CallRecord,
        Measurement,
        RunRecord,
        SuiteFigures,
        load_suite_policies,
        measure,
    )
    from callgate.integrations.agentdojo._scripted import Script, ScriptedModel

_HOME = {
    "TOOL_CLASS": "_gate", "FinishRun": "_gate", "GatedCall": "_gate", "KernelGate": "_gate",
    "call_of": "_gate", "defended_pipeline": "_gate",
    "SUITES": "_measure", "CallRecord": "_measure", "Measurement": "_measure",
    "RunRecord": "_measure", "SuiteFigures": "_measure", "load_suite_policies": "_measure",
    "measure": "_measure",
    "Script": "_scripted", "ScriptedModel": "_scripted",
}

__all__ = ["SUITES", "TOOL_CLASS", "CallRecord", "FinishRun", "GatedCall", "KernelGate",
           "Measurement", "RunRecord", "Script", "ScriptedModel", "SuiteFigures", "call_of",
           "defended_pipeline", "load_suite_policies", "measure"]


__getattr__ = _lazy(__name__, _HOME, globals())
