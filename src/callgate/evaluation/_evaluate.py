"""Evaluating a monitor on AgentDojo runs: read, judge each run by its suite's policy, score.

``policies_from_dir`` reads one policy per suite from a folder (``SUITE.yaml``);
``evaluate_agentdojo`` judges every run of every file (in one process) and scores them. A run of
a suite no policy covers is an error naming it, as is a file or line that cannot be read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from callgate._errors import PolicyError, Problem, TraceError
from callgate.evaluation._judge import Engine, Judge, Judgement
from callgate.evaluation._runs import AgentDojoRun, read_runs
from callgate.evaluation._score import Scored, score, tally
from callgate.policy._loader import LoadedPolicy, load_policy

__all__ = ["Evaluation", "evaluate_agentdojo", "policies_from_dir"]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Every judged run with its label, and the tallies of the report."""

    scored: list[Scored]
    tally: dict[str, Any]


def policies_from_dir(directory: str | os.PathLike[str]) -> dict[str, LoadedPolicy]:
    """One policy per suite: every ``SUITE.yaml`` of ``directory`` (errors at file:line:col)."""
    folder = Path(directory)
    files = sorted(folder.glob("*.yaml")) if folder.is_dir() else []
    if not files:
        raise PolicyError([Problem("no SUITE.yaml policy files in this directory",
                                   os.fspath(directory))])
    return {path.stem: load_policy(path) for path in files}


def evaluate_agentdojo(paths: Sequence[str | os.PathLike[str]],
                       policies: Mapping[str, LoadedPolicy], *,
                       engine: Engine = "incremental") -> Evaluation:
    """Judge and score every run of ``paths`` with the policy of its suite.

    Raises ``TraceError`` naming the file and line of a run that cannot be read or judged, or
    whose suite has no policy.
    """
    judges = {suite: Judge(loaded, engine=engine) for suite, loaded in policies.items()}
    pairs: list[tuple[AgentDojoRun, Judgement]] = []
    for path in paths:
        pairs.extend(_judged(read_runs(path), judges))
    scored = score(pairs)
    statements_of = {suite: [b.id for b in loaded.policy.behavior]
                     for suite, loaded in policies.items()}
    return Evaluation(scored, tally(scored, statements_of))


def _judged(runs: Iterable[AgentDojoRun], judges: Mapping[str, Judge]
            ) -> Iterable[tuple[AgentDojoRun, Judgement]]:
    for run in runs:
        judge = judges.get(run.suite)
        if judge is None:
            raise TraceError([Problem(f"no policy for suite {run.suite!r} (policies: "
                                      f"{', '.join(sorted(judges))})", run.source, run.line)])
        try:
            yield run, judge.judge(run.data)
        except TraceError as exc:
            raise TraceError([Problem(p.message, run.source, run.line) for p in exc.problems]
                             ) from exc
