"""The rule compiler over the compile benchmark's corpus (benchmarks/compile/corpus).

Each spec is compiled offline (phrasing rules alone) against its tools' schemas, and every
statement kept for a requirement is judged against the human one on generated traces of both
verdicts, as the benchmark does with fewer traces. What this pins: the rules never keep a
statement that disagrees with the careful human, never compile what the human found
inexpressible, and cover the deterministic phrasings.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from benchmarks._tracegen import (
    build_vocabulary,
    compile_set,
    describe,
    load_tools,
    sample_traces,
    seed_of,
    violated,
)

from callgate.compile import Compilation, compile_spec, signature_of_tools

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "benchmarks" / "compile" / "corpus"
SPECS = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
#: Traces per verdict and side (the benchmark takes 100).
COUNT = 25


def _key(sentence: str) -> str:
    return re.sub(r"\s+", " ", sentence).strip()


def _requirements(spec: str) -> list[dict[str, Any]]:
    human = yaml.safe_load((CORPUS / spec / "human.yaml").read_text(encoding="utf-8"))
    return list(human["requirements"])


@cache
def _compiled(spec: str) -> Compilation:
    text = (CORPUS / spec / "SKILL.md").read_text(encoding="utf-8")
    return compile_spec(text, signature_of_tools(CORPUS / spec / "tools.json"),
                        source=f"{spec}/SKILL.md")


def _by_requirement(spec: str) -> dict[str, list[str]]:
    rules: dict[str, list[str]] = {}
    for statement in _compiled(spec).statements:
        rules.setdefault(_key(statement.requirement), []).append(statement.rule)
    return rules


def _disagreement(spec: str, human: str, mine: list[str]) -> str | None:
    """A trace on which the compiled statements and the human one disagree, or None."""
    human_statements = [r["statement"] for r in _requirements(spec) if r.get("statement")]
    vocab = build_vocabulary(load_tools(CORPUS / spec / "tools.json"), [*human_statements, *mine])
    human_set, mine_set = compile_set([human]), compile_set(mine)
    for target, focus, side in ((human, mine, "human"), (mine, [human], "compiled")):
        sample = sample_traces(vocab, target, count=COUNT, seed=seed_of(spec, human, side),
                               focus=focus)
        assert sample.violated and sample.held, f"{spec}: {sample.note()}"
        for trace, _ in sample.traces:
            if violated(human_set, trace) != violated(mine_set, trace):
                return describe(trace)
    return None


@pytest.mark.parametrize("spec", SPECS)
def test_every_statement_the_rules_keep_agrees_with_the_human_one(spec: str) -> None:
    human = {_key(r["sentence"]): r.get("statement") for r in _requirements(spec)}
    for sentence, mine in _by_requirement(spec).items():
        assert sentence in human, f"{spec}: a statement for no requirement: {sentence}"
        wanted = human[sentence]
        assert wanted is not None, f"{spec}: compiled what is inexpressible: {sentence} -> {mine}"
        found = _disagreement(spec, wanted, mine)
        assert found is None, f"{spec}: {sentence}\n  rules: {mine}\n  human: {wanted}\n" \
                              f"  they disagree on: {found}"


@pytest.mark.parametrize("spec", SPECS)
def test_what_the_rules_leave_is_reported_never_dropped(spec: str) -> None:
    compiled = _compiled(spec)
    accounted = {_key(s.requirement) for s in compiled.statements} | \
                {_key(a.requirement) for a in compiled.approvals} | \
                {_key(u.requirement) for u in compiled.unsupported}
    for requirement in _requirements(spec):
        assert _key(requirement["sentence"]) in accounted, f"{spec}: {requirement['sentence']}"


def test_the_rules_compile_nearly_every_deterministic_phrasing() -> None:
    deterministic = [(spec, _key(r["sentence"])) for spec in SPECS for r in _requirements(spec)
                     if r["phrasing"] == "deterministic"]
    missed = [sentence for spec, sentence in deterministic
              if sentence not in _by_requirement(spec)]
    assert len(deterministic) >= 60
    assert len(missed) <= len(deterministic) // 20, missed  # at least 95%
