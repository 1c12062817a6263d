"""Measuring detection on real agent runs.

``evaluate_agentdojo`` reads AgentDojo's published run files (both format variants), judges
every run online with its suite's policy (a run is flagged when a block statement would have
refused one of its events, or an obligation is open at its end), and scores the verdicts
against the runs' labels: per file, per suite and per statement, with the witness of every
flagged run. ``write_json`` and ``write_report`` write the results. See ``docs/evaluation.md``.

Names are loaded on first use.
"""

from __future__ import annotations

from callgate._lazy import lazy as _lazy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from callgate.evaluation._evaluate import Evaluation, evaluate_agentdojo, policies_from_dir
    from callgate.evaluation._judge import Flag, Judge, Judgement, declared_outputs
    from callgate.evaluation._report import write_json, write_report
    from callgate.evaluation._runs import AgentDojoRun, read_runs

_HOME = {
    "Evaluation": "_evaluate", "evaluate_agentdojo": "_evaluate",
    "policies_from_dir": "_evaluate", "Flag": "_judge", "Judge": "_judge",
    "Judgement": "_judge", "declared_outputs": "_judge", "write_json": "_report",
    "write_report": "_report", "AgentDojoRun": "_runs", "read_runs": "_runs",
}

__all__ = ["AgentDojoRun", "Evaluation", "Flag", "Judge", "Judgement", "declared_outputs",
           "evaluate_agentdojo", "policies_from_dir", "read_runs", "write_json",
           "write_report"]


__getattr__ = _lazy(__name__, _HOME, globals())
