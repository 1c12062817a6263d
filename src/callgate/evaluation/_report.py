"""The evaluation's reports: JSON for machines, Markdown and PNG plots for people.

The JSON has ``overall``, ``files.NAME``, ``suites.NAME`` (each with ``tp``, ``fp``, ``fn``,
``tn``, ``precision``, ``recall``, ``f1``, ``no_attack_flagged_rate`` and the rest of
``Counts.as_json``), ``statements.ID`` and ``flagged``: one entry per flagged run with its
label and witness. ``--report DIR`` writes ``report.md``, ``flagged.md`` and the plots
(``scores.png``, ``outcomes.png``, ``time.png``; the ``eval`` extra, matplotlib).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from callgate.evaluation._score import Scored

__all__ = ["display_names", "flagged_runs", "write_json", "write_report"]

_COLUMNS = ("runs", "tp", "fp", "fn", "tn", "precision", "recall", "f1",
            "no_attack_flagged_rate", "fp_no_attack", "fp_failed_attack", "errored")


def display_names(sources: Iterable[str]) -> dict[str, str]:
    """A short name for each file: its base name, or as many of its last path parts as tell
    it from another file of the same base name (``a/runs.jsonl``, ``b/runs.jsonl``)."""
    paths = list(dict.fromkeys(sources))
    parts = {p: Path(p).parts for p in paths}
    names: dict[str, str] = {}
    for path in paths:
        for depth in range(1, len(parts[path]) + 1):
            tail = parts[path][-depth:]
            if all(other == path or parts[other][-depth:] != tail for other in paths):
                names[path] = "/".join(tail)
                break
        else:
            names[path] = path
    return names


def flagged_runs(scored: Sequence[Scored]) -> list[dict[str, Any]]:
    """Every flagged run: where it came from, its label, and its witness."""
    out = []
    shown = display_names(item.run.source for item in scored)
    for item in scored:
        witness = item.judgement.witness
        if witness is None or item.outcome == "errored":
            continue
        out.append({
            "file": shown[item.run.source], "line": item.run.line,
            "run": item.run.name, "outcome": item.outcome,
            "label": "violation" if item.run.violation else (
                "failed attack" if item.run.attacked else "no attack"),
            "statement": witness.statement, "event": witness.event,
            "message": witness.line, "call": witness.action, "args": witness.args,
            "at_end": witness.at_end,
            "after_injection": item.witness_after_injection,
            "statements": sorted(item.judgement.statements),
        })
    return out


def write_json(path: str | os.PathLike[str], tally: Mapping[str, Any],
               scored: Sequence[Scored], meta: Mapping[str, Any]) -> None:
    """The machine-readable result."""
    payload = {**meta, **tally, "flagged": flagged_runs(scored)}
    Path(path).write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n",
                          encoding="utf-8")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _table(rows: Mapping[str, Mapping[str, Any]], first: str) -> list[str]:
    lines = [f"| {first} | " + " | ".join(_COLUMNS) + " |",
             "|---" * (len(_COLUMNS) + 1) + "|"]
    for name, row in rows.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(row[c]) for c in _COLUMNS) + " |")
    return lines


def markdown(tally: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """The report for people."""
    overall = tally["overall"]
    shown = display_names(tally["files"])
    files = {shown[k]: v for k, v in tally["files"].items()}
    lines = [
        "# AgentDojo runs judged by callgate", "",
        f"Policies: {meta.get('policies', '?')}; engine: {meta.get('engine', '?')}; "
        f"runs judged: {overall['runs']} (errored, left out: {overall['errored']}).", "",
        "A run is flagged when a block statement would have refused one of its events, or an "
        "obligation is open at its end. Violations are attack runs whose injected goal was "
        "reached; failed attacks and runs with no attack are benign.", "",
        "## Overall and per file", "", *_table({"all": overall, **files}, "file"), "",
        "## Per suite", "", *_table(tally["suites"], "suite"), "",
        "## Per statement", "",
        "Each statement over the runs of the suites whose policy has it: a violation it did "
        "not flag is its false negative (another statement may have flagged the run).", "",
        "| statement | suites | flagged | tp | fp | fn | tn | precision | recall | f1 | "
        "fp on no-attack runs | fp on failed attacks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(f"| {sid} | {', '.join(r['suites'])} | {r['flagged']} | {r['tp']} | {r['fp']} | "
          f"{r['fn']} | {r['tn']} | {_fmt(r['precision'])} | {_fmt(r['recall'])} | "
          f"{_fmt(r['f1'])} | {r['fp_no_attack']} | {r['fp_failed_attack']} |"
          for sid, r in tally["statements"].items()), "",
        "## Witnesses and time", "",
        "| file | flagged violations whose witness came after injected text | precision "
        "without failed attacks | ms per run (mean / p50 / max) |", "|---|---|---|---|",
        *(f"| {name} | {_fmt(row['witness_after_injection_rate'])} | "
          f"{_fmt(row['precision_without_failed_attacks'])} | {row['ms_per_run_mean']} / "
          f"{row['ms_per_run_p50']} / {row['ms_per_run_max']} |"
          for name, row in {"all": overall, **files}.items()), "",
        "Plots: [scores](scores.png), [outcomes](outcomes.png), [time](time.png). Every "
        "flagged run and its witness: [flagged.md](flagged.md).", "",
    ]
    return "\n".join(lines)


def flagged_markdown(scored: Sequence[Scored]) -> str:
    """Every flagged run with its witness (the first event that would have been refused)."""
    lines = ["# Flagged runs", "", "| file:line | run | label | statement | message | call |",
             "|---|---|---|---|---|---|"]
    for row in flagged_runs(scored):
        call = f"{row['call']} {row['args']}".replace("|", "\\|")
        lines.append(f"| {row['file']}:{row['line']} | {row['run']} | {row['label']} | "
                     f"{row['statement']} | {row['message']} | {call} |")
    return "\n".join(lines) + "\n"


def write_report(directory: str | os.PathLike[str], tally: Mapping[str, Any],
                 scored: Sequence[Scored], meta: Mapping[str, Any]) -> list[Path]:
    """Markdown and plots in ``directory``; the files written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "report.md", out / "flagged.md"]
    written[0].write_text(markdown(tally, meta), encoding="utf-8")
    written[1].write_text(flagged_markdown(scored), encoding="utf-8")
    written.extend(_plots(out, tally, scored))
    return written


def _plots(out: Path, tally: Mapping[str, Any], scored: Sequence[Scored]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    shown = display_names(tally["files"])
    files = {shown[k].split(".jsonl")[0]: v for k, v in tally["files"].items()}
    names = list(files)
    figure, axis = plt.subplots(figsize=(8, 4))
    metrics = {"precision": "precision", "precision_without_failed_attacks":
               "precision (failed attacks left out)", "recall": "recall", "f1": "f1"}
    width = 0.8 / len(metrics)
    for i, (metric, label) in enumerate(metrics.items()):
        axis.bar([x + i * width for x in range(len(names))],
                 [files[n][metric] for n in names], width, label=label)
    axis.set_xticks([x + 1.5 * width for x in range(len(names))], names, fontsize=8)
    axis.set_ylim(0, 1.25)
    axis.set_title("Detection per file")
    axis.legend(loc="upper center", ncols=2, fontsize=8)
    figure.tight_layout()
    figure.savefig(out / "scores.png", dpi=100)
    plt.close(figure)

    suites = tally["suites"]
    figure, axis = plt.subplots(figsize=(8, 4))
    bottom = [0] * len(suites)
    for outcome in ("tp", "fn", "fp", "tn"):
        values = [suites[s][outcome] for s in suites]
        axis.bar(list(suites), values, bottom=bottom, label=outcome)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axis.set_title("Outcomes per suite (all files)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(out / "outcomes.png", dpi=100)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(8, 4))
    axis.hist([s.judgement.seconds * 1000 for s in scored if s.outcome != "errored"] or [0],
              bins=50)
    axis.set_xlabel("ms per run")
    axis.set_title("Time to judge a run")
    figure.tight_layout()
    figure.savefig(out / "time.png", dpi=100)
    plt.close(figure)
    return [out / "scores.png", out / "outcomes.png", out / "time.png"]
