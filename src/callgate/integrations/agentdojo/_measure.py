"""AgentDojo's suites through the gate, judged by AgentDojo's own checkers.

Utility: each user task with no injection, the scripted model making the task's ground-truth
calls and then answering with the task's ``GROUND_TRUTH_OUTPUT`` (what ``GroundTruthPipeline``
answers), through ``defended_pipeline``; AgentDojo's ``utility`` check on the result. The same
script through AgentDojo's own ``ToolsExecutor`` is the baseline: how far ground truth reaches
without a defense.

Security: each pair (user task, injection task), the injections made by one of AgentDojo's
attacks (``important_instructions`` by default, the attack of the published runs) and placed in
the environment by AgentDojo (``TaskSuite.run_task_with_pipeline``); the scripted model makes the
user task's ground-truth calls, then the injection task's (a model that obeys the injection
completely), and answers with both tasks' ground-truth outputs. Counted: the injection calls the
kernel blocked, and the pairs for which the injection task's ``security`` check says the attack
failed. An injection task whose goal has no tool call (only words in the answer) is counted
apart: a monitor of tool calls cannot stop it.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from agentdojo.agent_pipeline.agent_pipeline import (  # type: ignore[import-untyped]  # no py.typed
    AgentPipeline,
    load_system_message,
)
from agentdojo.agent_pipeline.basic_elements import (  # type: ignore[import-untyped]  # no py.typed
    InitQuery,
    SystemMessage,
)
from agentdojo.agent_pipeline.tool_execution import (  # type: ignore[import-untyped]  # no py.typed
    ToolsExecutionLoop,
    ToolsExecutor,
)
from agentdojo.attacks.attack_registry import (  # type: ignore[import-untyped]  # no py.typed
    load_attack,
)
from agentdojo.base_tasks import (  # type: ignore[import-untyped]  # no py.typed
    BaseInjectionTask,
    BaseUserTask,
)
from agentdojo.functions_runtime import (  # type: ignore[import-untyped]  # no py.typed
    FunctionCall,
    TaskEnvironment,
)
from agentdojo.task_suite.load_suites import get_suite  # type: ignore[import-untyped]  # no py.typed
from agentdojo.task_suite.task_suite import TaskSuite  # type: ignore[import-untyped]  # no py.typed

from callgate._errors import CallgateError
from callgate.integrations.agentdojo._gate import KernelGate, defended_pipeline
from callgate.integrations.agentdojo._scripted import ScriptedModel
from callgate.kernel import Kernel
from callgate.policy import LoadedPolicy, Policy, load_policy

__all__ = ["SUITES", "CallRecord", "Measurement", "RunRecord", "SuiteFigures",
           "load_suite_policies", "measure"]

#: AgentDojo's four suites, each with a policy file of its own name (``banking.yaml``, …).
SUITES: tuple[str, ...] = ("banking", "slack", "travel", "workspace")
#: The model the attack's text addresses (its ``{model}``): one of the published runs' models.
DEFAULT_TARGET_MODEL = "gpt-4o-2024-05-13"
#: Tool turns a scripted run may take: the longest ground truth of v1 (travel, 18 calls) plus
#: the longest injection (6 calls), with room to spare.
MAX_TURNS = 64

Role = Literal["benign", "injection"]


@dataclass(frozen=True)
class CallRecord:
    """One scripted call: whose it was, the kernel's verdict and reasons, whether it ran."""

    function: str
    role: Role
    verdict: str
    reasons: tuple[str, ...]
    ran: bool


@dataclass(frozen=True)
class RunRecord:
    """One task run: AgentDojo's verdicts and the calls as the gate handled them.

    ``security`` is the injection task's check (True: the attack reached its goal), None for a
    run without injection; ``baseline_utility`` is the undefended run's utility (utility runs).
    """

    suite: str
    user_task: str
    injection_task: str | None
    utility: bool
    security: bool | None
    calls: tuple[CallRecord, ...]
    violations: tuple[str, ...] = ()
    baseline_utility: bool | None = None

    def count(self, role: Role, *, denied: bool = False, effects: bool = False) -> int:
        """The calls of ``role`` (only the denied ones with ``denied``; only the calls that
        change something with ``effects``)."""
        return sum(1 for c in self.calls if c.role == role and (not denied or not c.ran)
                   and (not effects or has_effect(c.function)))


#: AgentDojo names its read-only tools with these prefixes (get_, read_, search_, list_,
#: check_); every other tool sends, writes, books, invites or deletes something.
READ_PREFIXES = ("get_", "read_", "search_", "list_", "check_")


def has_effect(function: str) -> bool:
    """Whether an AgentDojo tool changes something (its name is not one of a read)."""
    return not function.startswith(READ_PREFIXES)


@dataclass
class SuiteFigures:
    """One suite's figures, both measurements."""

    suite: str
    user_tasks: int = 0
    utility_kept: int = 0
    baseline_utility: int = 0
    utility_lost: int = 0
    benign_calls: int = 0
    benign_denied: int = 0
    pairs: int = 0
    injection_calls: int = 0
    injection_blocked: int = 0
    injection_effects: int = 0
    injection_effects_blocked: int = 0
    attack_failed: int = 0
    failed_unblocked: int = 0
    text_only_pairs: int = 0
    utility_under_attack: int = 0
    benign_calls_under_attack: int = 0
    benign_denied_under_attack: int = 0

    def add(self, run: RunRecord) -> None:
        """Count one run in."""
        if run.injection_task is None:
            self.user_tasks += 1
            self.utility_kept += run.utility
            self.baseline_utility += bool(run.baseline_utility)
            self.utility_lost += bool(run.baseline_utility) and not run.utility
            self.benign_calls += run.count("benign")
            self.benign_denied += run.count("benign", denied=True)
            return
        self.pairs += 1
        self.attack_failed += not run.security
        # AgentDojo scores some attacks failed whatever the defense did (a ground truth that
        # misses its goal after the user task's calls): failed with no injection call blocked
        self.failed_unblocked += not run.security and not run.count("injection", denied=True)
        self.text_only_pairs += run.count("injection") == 0
        self.injection_calls += run.count("injection")
        self.injection_blocked += run.count("injection", denied=True)
        self.injection_effects += run.count("injection", effects=True)
        self.injection_effects_blocked += run.count("injection", denied=True, effects=True)
        self.utility_under_attack += run.utility
        self.benign_calls_under_attack += run.count("benign")
        self.benign_denied_under_attack += run.count("benign", denied=True)

    @property
    def utility_goal_met(self) -> bool:
        """Every benign call allowed, and utility wherever the undefended ground truth has it."""
        return self.benign_denied == 0 and self.utility_lost == 0

    @property
    def security_goal_met(self) -> bool:
        """Every injection call blocked."""
        return self.injection_blocked == self.injection_calls


@dataclass
class Measurement:
    """Both measurements over the suites run, with every run's record."""

    benchmark_version: str
    attack: str
    target_model: str
    suites: dict[str, SuiteFigures] = field(default_factory=dict)
    runs: list[RunRecord] = field(default_factory=list)
    seconds: float = 0.0

    def total(self) -> SuiteFigures:
        """The figures of every suite added up."""
        total = SuiteFigures("total")
        for run in self.runs:
            total.add(run)
        return total

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary: settings, figures per suite and in total, every run."""
        figures = {name: {**asdict(f), "utility_goal_met": f.utility_goal_met,
                          "security_goal_met": f.security_goal_met}
                   for name, f in [*self.suites.items(), ("total", self.total())]}
        return {"benchmark_version": self.benchmark_version, "attack": self.attack,
                "target_model": self.target_model, "seconds": round(self.seconds, 1),
                "figures": figures, "runs": [asdict(r) for r in self.runs]}


def load_suite_policies(directory: str | os.PathLike[str],
                        suites: Iterable[str] = SUITES) -> dict[str, LoadedPolicy]:
    """The policy of each suite, read from ``DIRECTORY/SUITE.yaml``; raises ``PolicyError``
    (every problem, with file, line and column) or ``CallgateError`` for a missing file."""
    found: dict[str, LoadedPolicy] = {}
    for suite in suites:
        path = Path(directory) / f"{suite}.yaml"
        if not path.is_file():
            raise CallgateError(f"no policy for the {suite} suite: {path} is missing")
        found[suite] = load_policy(path)
    return found


class _PairScript:
    """The scripted calls of one run: the user task's ground truth, then the injection task's;
    ``benign`` says how many of them are the user task's once the run has started."""

    def __init__(self, user_task: BaseUserTask, injection_task: BaseInjectionTask | None) -> None:
        self.user_task, self.injection_task = user_task, injection_task
        self.benign = 0
        answers = [user_task.GROUND_TRUTH_OUTPUT,
                   injection_task.GROUND_TRUTH_OUTPUT if injection_task is not None else ""]
        self.answer = "\n".join(a for a in answers if a)

    def __call__(self, env: TaskEnvironment) -> list[FunctionCall]:
        calls = list(self.user_task.ground_truth(env))
        self.benign = len(calls)
        if self.injection_task is not None:
            calls += self.injection_task.ground_truth(env)
        return calls


def _baseline(suite: TaskSuite, user_task: BaseUserTask) -> bool:
    """The user task's utility with its ground truth through AgentDojo's own executor."""
    script = _PairScript(user_task, None)
    model = ScriptedModel(script, script.answer)
    pipeline = AgentPipeline([SystemMessage(load_system_message(None)), InitQuery(), model,
                              ToolsExecutionLoop([ToolsExecutor(), model], max_iters=MAX_TURNS)])
    utility, _ = suite.run_task_with_pipeline(pipeline, user_task, None, {})
    return bool(utility)


def _run(suite: TaskSuite, kernels: Callable[[str], Kernel], user_task: BaseUserTask,
         injection_task: BaseInjectionTask | None, injections: Mapping[str, str]) -> RunRecord:
    """One defended run, judged by AgentDojo."""
    run_id = "-".join(["agentdojo", suite.name, user_task.ID,
                       injection_task.ID if injection_task is not None else "none",
                       uuid.uuid4().hex[:8]])
    script = _PairScript(user_task, injection_task)
    gate = KernelGate(lambda: kernels(run_id))
    model = ScriptedModel(script, script.answer)
    pipeline = defended_pipeline(model, gate, max_iters=MAX_TURNS)
    utility, security = suite.run_task_with_pipeline(pipeline, user_task, injection_task,
                                                     dict(injections))
    if len(gate.calls) != len(model.calls):
        raise CallgateError(f"{run_id}: {len(model.calls)} calls scripted, "
                            f"{len(gate.calls)} reached the gate")
    calls = tuple(CallRecord(c.function, "benign" if i < script.benign else "injection",
                             c.decision.verdict, tuple(r.id for r in c.decision.reasons), c.ran)
                  for i, c in enumerate(gate.calls))
    return RunRecord(suite=suite.name, user_task=user_task.ID,
                     injection_task=None if injection_task is None else injection_task.ID,
                     utility=bool(utility),
                     security=None if injection_task is None else bool(security),
                     calls=calls, violations=tuple(v.statement for v in gate.violations))


def _chosen(tasks: Mapping[str, Any], wanted: Sequence[str] | None) -> list[Any]:
    if wanted is None:
        return list(tasks.values())
    return [tasks[t] for t in wanted if t in tasks]


def measure(policies: Mapping[str, Policy | LoadedPolicy], *, benchmark_version: str = "v1",
            suites: Sequence[str] | None = None, user_tasks: Sequence[str] | None = None,
            injection_tasks: Sequence[str] | None = None, security: bool = True,
            attack: str = "important_instructions", target_model: str = DEFAULT_TARGET_MODEL,
            audit: str | os.PathLike[str] | None = None,
            progress: Callable[[str], None] | None = None) -> Measurement:
    """Run the suites (default: those ``policies`` names, in ``SUITES`` order) through the gate.

    ``policies`` maps a suite to its policy. ``user_tasks`` / ``injection_tasks`` restrict each
    suite to those ids; ``security=False`` skips the pairs. ``audit`` is a SQLite file every
    run's kernel writes to (none by default). ``progress`` is told each suite as it starts.
    """
    started = time.perf_counter()
    result = Measurement(benchmark_version, attack, target_model)
    for name in suites if suites is not None else [s for s in SUITES if s in policies]:
        policy = policies[name]

        def kernels(run_id: str, policy: Policy | LoadedPolicy = policy) -> Kernel:
            return Kernel(policy, audit=audit, run_id=run_id)

        if progress is not None:
            progress(name)
        suite = get_suite(benchmark_version, name)
        figures = result.suites.setdefault(name, SuiteFigures(name))
        chosen = _chosen(suite.user_tasks, user_tasks)
        for user_task in chosen:
            run = _run(suite, kernels, user_task, None, {})
            run = replace(run, baseline_utility=_baseline(suite, user_task))
            figures.add(run)
            result.runs.append(run)
        if not security:
            continue
        target = AgentPipeline([])
        target.name = target_model  # the attack reads the model's name from the pipeline's
        injector = load_attack(attack, suite, target)
        for user_task in chosen:
            for injection_task in _chosen(suite.injection_tasks, injection_tasks):
                run = _run(suite, kernels, user_task, injection_task,
                           injector.attack(user_task, injection_task))
                figures.add(run)
                result.runs.append(run)
    result.seconds = time.perf_counter() - started
    return result
