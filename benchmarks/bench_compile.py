"""Compiling skill specifications into statements: the phrasing rules, and a model when set.

The corpus (``benchmarks/compile/corpus/NAME/``) holds 22 skill specifications written for this
project, each a ``SKILL.md``, its tools' schemas (``tools.json``) and what a careful human
writes for each requirement sentence (``human.yaml``: a statement, or null when the language
cannot say it). For every spec the benchmark builds the signature from ``tools.json``, compiles
``SKILL.md`` with the rules only and, when ``CALLGATE_COMPILE_MODEL`` names a provider (e.g.
``openai:MODEL``), with that model too, and judges each requirement:

* the compiled statements of a requirement are those whose sentence equals the human one
  (whitespace collapsed); several are judged together (the trace is violated when any is);
* **equivalent** when the compiled statements and the human statement give the same verdict
  (violated or not) on every generated trace: ``--count`` traces where the human statement is
  violated and as many where it holds, plus as many of each for the compiled statements
  (``_tracegen``), so at least 400 traces when both samples fill;
* **not compiled** when no statement came from the sentence; a human ``null`` that the compiler
  reports unsupported counts as equivalent, one it compiles counts as not equivalent.

Writes ``benchmarks/out/compile.json`` and ``compile.md`` and prints the tables.
Run: ``.venv/bin/python benchmarks/bench_compile.py [--count N] [--spec NAME ...]``; with a model:
``CALLGATE_COMPILE_MODEL=openai:MODEL .venv/bin/python benchmarks/bench_compile.py`` (the
provider's base URL and key come from its usual environment variables).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from _tracegen import (
    build_vocabulary,
    compile_set,
    describe,
    load_tools,
    sample_traces,
    seed_of,
    violated,
)

from callgate._errors import TemporalError
from callgate._model import Event
from callgate.temporal import BehaviorSet

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "benchmarks" / "compile" / "corpus"
OUT = ROOT / "benchmarks" / "out"
MODEL_VARIABLE = "CALLGATE_COMPILE_MODEL"
NOT_MEASURED = f"not measured: set {MODEL_VARIABLE}"
#: Traces per verdict, per sample (two samples per requirement).
DEFAULT_COUNT = 100

EQUIVALENT = "equivalent"
NOT_EQUIVALENT = "not equivalent"
NOT_COMPILED = "not compiled"
APPROVAL = "approval rule"


@dataclass(frozen=True)
class HumanRequirement:
    """A requirement sentence of a spec and what a careful human writes for it."""

    sentence: str
    statement: str | None
    phrasing: str
    note: str = ""


@dataclass(frozen=True)
class Spec:
    """One specification of the corpus."""

    name: str
    modelled_on: str
    directory: Path
    text: str
    tools: list[dict[str, Any]]
    requirements: list[HumanRequirement]

    @property
    def human_statements(self) -> list[str]:
        """The statements of the requirements that have one."""
        return [r.statement for r in self.requirements if r.statement]


def collapse(text: str) -> str:
    """Text with runs of whitespace made one space, trimmed."""
    return " ".join(text.split())


def front_matter(text: str) -> dict[str, Any]:
    """The YAML between the leading ``---`` lines of a SKILL.md (empty when there is none)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    for end in range(1, len(lines)):
        if lines[end].strip() == "---":
            loaded = yaml.safe_load("\n".join(lines[1:end]))
            return loaded if isinstance(loaded, dict) else {}
    return {}


def load_corpus(root: Path = CORPUS, only: Sequence[str] = ()) -> list[Spec]:
    """Every spec under ``root`` (sorted by name), or only the named ones."""
    specs = []
    for directory in sorted(p for p in root.iterdir() if p.is_dir()):
        if only and directory.name not in only:
            continue
        text = (directory / "SKILL.md").read_text(encoding="utf-8")
        human = yaml.safe_load((directory / "human.yaml").read_text(encoding="utf-8"))
        specs.append(Spec(
            name=directory.name,
            modelled_on=str(front_matter(text).get("modelled_on", "")),
            directory=directory,
            text=text,
            tools=load_tools(directory / "tools.json"),
            requirements=[HumanRequirement(r["sentence"], r.get("statement"),
                                           r.get("phrasing", "free"), r.get("note") or "")
                          for r in human["requirements"]],
        ))
    return specs


# --- judging one requirement ----------------------------------------------------------------


def judge(spec: Spec, req: HumanRequirement, compiled: Sequence[str], *, unsupported: bool,
          approval: bool, count: int) -> dict[str, Any]:
    """The outcome of one requirement for one compiler (see the module docstring)."""
    out: dict[str, Any] = {"statements": list(compiled), "unsupported": unsupported}
    if not compiled:
        if approval:
            out["outcome"] = APPROVAL
        elif req.statement is None and unsupported:
            out["outcome"] = EQUIVALENT
            out["why"] = "both judge it inexpressible"
        else:
            out["outcome"] = NOT_COMPILED
        return out
    if req.statement is None:
        out["outcome"] = NOT_EQUIVALENT
        out["why"] = "compiled a requirement the human judged inexpressible"
        return out
    try:
        compiled_set = compile_set(compiled)
    except TemporalError as exc:
        out["outcome"] = NOT_EQUIVALENT
        out["why"] = f"does not compile: {exc}"
        return out
    human_set = compile_set([req.statement])
    vocab = build_vocabulary(spec.tools, [*spec.human_statements, *compiled])
    by_human = sample_traces(vocab, req.statement, count=count,
                             seed=seed_of(spec.name, req.sentence, "human"), focus=compiled)
    by_compiled = sample_traces(vocab, compiled, count=count,
                                seed=seed_of(spec.name, req.sentence, "compiled"),
                                focus=[req.statement])
    agree = total = 0
    witness: dict[str, Any] | None = None
    # each sample carries its own side's verdicts; the other side judges the same traces
    for sample, other, own_is_human in ((by_human, compiled_set, True),
                                        (by_compiled, human_set, False)):
        for trace, verdict in sample.traces:
            theirs = violated(other, trace)
            total += 1
            if theirs == verdict:
                agree += 1
            elif witness is None:
                human_v = verdict if own_is_human else theirs
                small = shrink(trace, human_set, compiled_set)
                witness = {"trace": describe(small), "human_violated": human_v,
                           "compiled_violated": not human_v}
    out.update(outcome=EQUIVALENT if agree == total else NOT_EQUIVALENT, agree=agree,
               traces=total, human_sample=by_human.note(), compiled_sample=by_compiled.note(),
               balanced=by_human.complete)
    if witness is not None:
        out["counterexample"] = witness
    return out


def shrink(trace: Sequence[Event], one: BehaviorSet, other: BehaviorSet) -> list[Event]:
    """A shortest-found sub-trace on which the two sets still disagree: events are dropped one
    at a time, from the end, while the disagreement stays."""
    def differ(events: Sequence[Event]) -> bool:
        return violated(one, events) != violated(other, events)

    events = list(trace)
    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(events))):
            candidate = events[:i] + events[i + 1:]
            if candidate and differ(candidate):
                events = candidate
                changed = True
    return events


# --- running one compiler over the corpus ---------------------------------------------------


def run_compiler(
    label: str, spec: Spec, signature: object, compile_spec: Callable[..., Any],
    provider: object | None, count: int,
) -> dict[str, Any]:
    """Compile one spec with one compiler and judge each of its requirements."""
    source = str((spec.directory / "SKILL.md").relative_to(ROOT))
    started = time.perf_counter()
    try:
        result = compile_spec(spec.text, signature, provider=provider, source=source)
    except Exception as exc:  # a failing compiler is a result, not a crash of the benchmark
        return {"error": f"{type(exc).__name__}: {exc}",
                "compile_s": time.perf_counter() - started}
    compile_s = time.perf_counter() - started
    statements = list(result.statements)
    unsupported = {collapse(u.requirement) for u in result.unsupported}
    approvals = {collapse(a.requirement) for a in getattr(result, "approvals", ())}
    sentences = {collapse(r.sentence) for r in spec.requirements}
    judged = []
    started = time.perf_counter()
    for req in spec.requirements:
        key = collapse(req.sentence)
        mine = [s.rule for s in statements if collapse(s.requirement) == key]
        judged.append(judge(spec, req, mine, unsupported=key in unsupported,
                            approval=key in approvals, count=count))
    extra = [{"requirement": s.requirement, "statement": s.rule} for s in statements
             if collapse(s.requirement) not in sentences]
    return {"compiler": label, "compile_s": compile_s,
            "judge_s": time.perf_counter() - started, "requirements": judged, "extra": extra}


def totals(specs: Sequence[Spec], runs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The counts over the corpus for one compiler's runs (by spec name)."""
    t: dict[str, Any] = {"requirements": 0, "compiled": 0, EQUIVALENT: 0, NOT_EQUIVALENT: 0,
                         NOT_COMPILED: 0, "reported unsupported": 0, APPROVAL: 0,
                         "statements matching no requirement": 0, "specs failed": 0,
                         "compile_s": 0.0, "judge_s": 0.0,
                         "by phrasing": {}}
    for spec in specs:
        run = runs[spec.name]
        t["compile_s"] += run.get("compile_s", 0.0)
        t["judge_s"] += run.get("judge_s", 0.0)
        if "error" in run:
            t["specs failed"] += 1
        judged = run.get("requirements") or [{"outcome": NOT_COMPILED, "statements": [],
                                              "unsupported": False}] * len(spec.requirements)
        t["statements matching no requirement"] += len(run.get("extra", ()))
        for req, j in zip(spec.requirements, judged, strict=True):
            t["requirements"] += 1
            t["compiled"] += bool(j["statements"]) or j["outcome"] == APPROVAL
            t[j["outcome"]] += 1
            t["reported unsupported"] += bool(j["unsupported"])
            ph = t["by phrasing"].setdefault(req.phrasing, {"requirements": 0, EQUIVALENT: 0})
            ph["requirements"] += 1
            ph[EQUIVALENT] += j["outcome"] == EQUIVALENT
    return t


# --- reports --------------------------------------------------------------------------------


def _cell(j: Mapping[str, Any] | None) -> str:
    if j is None:
        return "—"
    outcome = j["outcome"]
    if outcome in (EQUIVALENT, NOT_EQUIVALENT) and "traces" in j:
        text = f"{outcome} ({j['agree']}/{j['traces']})"
        return text if j.get("balanced", True) else text + " (unbalanced)"
    if outcome == EQUIVALENT:
        return "equivalent (both unsupported)"
    if outcome == NOT_EQUIVALENT:
        why = str(j.get("why", ""))
        return f"{outcome} (does not compile)" if why.startswith("does not compile") else \
            f"{outcome} ({why})"
    if outcome == NOT_COMPILED and j["unsupported"]:
        return "not compiled (reported unsupported)"
    return str(outcome)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _human_form(statement: str | None) -> str:
    if statement is None:
        return "null"
    return statement.split("(", 1)[0].strip()


def render(specs: Sequence[Spec], report: Mapping[str, Any]) -> str:
    """The Markdown report: totals side by side, a table per spec, then the disagreements."""
    compilers: Mapping[str, Any] = report["compilers"]
    labels = list(compilers)
    head = [compilers[c]["title"] for c in labels]
    reqs = sum(len(s.requirements) for s in specs)
    det = sum(r.phrasing == "deterministic" for s in specs for r in s.requirements)
    nulls = sum(r.statement is None for s in specs for r in s.requirements)
    lines = [
        "# Compiling skill specifications into statements",
        "",
        f"{len(specs)} specifications, {reqs} requirements ({det} in deterministic phrasings, "
        f"{nulls} the language cannot express). A requirement is equivalent when its compiled "
        "statements and the human statement give the same verdict on every generated trace "
        f"({report['count']} violated and {report['count']} holding traces for each side, "
        "see benchmarks/_tracegen.py). Written by benchmarks/bench_compile.py.",
        "",
        "| | " + " | ".join(head) + " |",
        "|---|" + "---|" * len(labels),
    ]
    rows = ["requirements", "compiled", EQUIVALENT, NOT_EQUIVALENT, NOT_COMPILED,
            "reported unsupported", APPROVAL, "statements matching no requirement",
            "specs failed"]
    for row in rows:
        cells = []
        for c in labels:
            t = compilers[c].get("totals")
            cells.append(str(t[row]) if t else compilers[c]["why"])
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    for phrasing in ("deterministic", "free"):
        cells = []
        for c in labels:
            t = compilers[c].get("totals")
            ph = t["by phrasing"].get(phrasing) if t else None
            cells.append(f"{ph[EQUIVALENT]} / {ph['requirements']}" if ph else "—")
        lines.append(f"| equivalent, {phrasing} phrasings | " + " | ".join(cells) + " |")
    cells = [f"{t['compile_s']:.2f} s compiling, {t['judge_s']:.1f} s judging"
             if (t := compilers[c].get("totals")) else "—" for c in labels]
    lines += ["| time | " + " | ".join(cells) + " |", ""]
    lines += ["## Per specification", "",
              "| spec | modelled on | requirements | " + " | ".join(
                  f"{h}: compiled / equivalent / not eq. / unsupported" for h in head) + " |",
              "|---|---|---|" + "---|" * len(labels)]
    for spec in specs:
        cells = []
        for c in labels:
            run = compilers[c].get("specs", {}).get(spec.name)
            if run is None:
                cells.append("—")
            elif "error" in run:
                cells.append(f"error: {_md(run['error'])[:80]}")
            else:
                js = run["requirements"]
                cells.append(" / ".join(str(x) for x in (
                    sum(bool(j["statements"]) for j in js),
                    sum(j["outcome"] == EQUIVALENT for j in js),
                    sum(j["outcome"] == NOT_EQUIVALENT for j in js),
                    sum(bool(j["unsupported"]) for j in js))))
        lines.append(f"| {spec.name} | {_md(spec.modelled_on)} | {len(spec.requirements)} | "
                     + " | ".join(cells) + " |")
    lines.append("")
    for spec in specs:
        lines += [f"### {spec.name}", "", "| # | requirement | phrasing | human | "
                  + " | ".join(head) + " |", "|---|---|---|---|" + "---|" * len(labels)]
        for i, req in enumerate(spec.requirements, start=1):
            cells = []
            for c in labels:
                run = compilers[c].get("specs", {}).get(spec.name)
                js = run.get("requirements") if run else None
                cells.append(_md(_cell(js[i - 1])) if js else
                             ("error" if run else compilers[c]["why"]))
            lines.append(f"| {i} | {_md(req.sentence)} | {req.phrasing} | "
                         f"{_human_form(req.statement)} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += _disagreements(specs, compilers)
    return "\n".join(lines) + "\n"


def _disagreements(specs: Sequence[Spec], compilers: Mapping[str, Any]) -> list[str]:
    lines = ["## Not equivalent", ""]
    found = False
    for data in compilers.values():
        for spec in specs:
            run = data.get("specs", {}).get(spec.name) or {}
            for req, j in zip(spec.requirements, run.get("requirements", ()), strict=False):
                if j["outcome"] != NOT_EQUIVALENT:
                    continue
                found = True
                lines.append(f"- **{data['title']}**, {spec.name}: {_md(req.sentence)}")
                lines.append(f"  - human: `{req.statement}`")
                for s in j["statements"]:
                    lines.append(f"  - compiled: `{s}`")
                if "why" in j:
                    lines.append(f"  - {_md(j['why'])}")
                if "counterexample" in j:
                    w = j["counterexample"]
                    lines.append(f"  - a trace where they differ (human violated: "
                                 f"{w['human_violated']}, compiled violated: "
                                 f"{w['compiled_violated']}): `{w['trace']}`")
    if not found:
        lines.append("None.")
    return [*lines, ""]


# --- main -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 also when the compile package is missing (nothing to measure)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT,
                        help="traces per verdict in each sample (default %(default)s)")
    parser.add_argument("--spec", action="append", default=[],
                        help="only this corpus spec (repeatable)")
    args = parser.parse_args(argv)
    try:
        from callgate.compile import compile_spec, signature_of_tools
    except (ImportError, AttributeError) as exc:
        print(f"bench_compile: the compiler (callgate.compile) is not available: {exc}. "
              "Nothing was measured.", file=sys.stderr)
        return 0
    specs = load_corpus(only=args.spec)
    if not specs:
        print(f"bench_compile: no corpus spec matches {args.spec}", file=sys.stderr)
        return 2
    compilers: dict[str, dict[str, Any]] = {
        "rules": {"title": "rules only", "provider": None}}
    model = os.environ.get(MODEL_VARIABLE, "").strip()
    if model:
        try:
            from callgate.compile._providers import provider_from

            compilers["model"] = {"title": f"model ({model})", "provider": provider_from(model)}
        except Exception as exc:  # a bad spec or a missing key: say so in the column
            compilers["model"] = {"title": f"model ({model})",
                                  "why": f"not measured: {type(exc).__name__}: {exc}"}
    else:
        compilers["model"] = {"title": "model", "why": NOT_MEASURED}
    started = time.perf_counter()
    for spec in specs:
        signature = signature_of_tools(spec.directory / "tools.json")
        for label, data in compilers.items():
            if "why" in data:
                continue
            data.setdefault("specs", {})[spec.name] = run_compiler(
                label, spec, signature, compile_spec, data["provider"], args.count)
    for data in compilers.values():
        data.pop("provider", None)
        if "specs" in data:
            data["measured"] = True
            data["totals"] = totals(specs, data["specs"])
        else:
            data["measured"] = False
    report = {
        "benchmark": "compile",
        "count": args.count,
        "python": platform.python_version(),
        "seconds": round(time.perf_counter() - started, 2),
        "corpus": [{"name": s.name, "modelled_on": s.modelled_on,
                    "requirements": [{"sentence": r.sentence, "statement": r.statement,
                                      "phrasing": r.phrasing} for r in s.requirements]}
                   for s in specs],
        "compilers": compilers,
    }
    markdown = render(specs, report)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "compile.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n",
                                      encoding="utf-8")
    (OUT / "compile.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    print(f"wrote {OUT / 'compile.json'} and {OUT / 'compile.md'} "
          f"in {report['seconds']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
