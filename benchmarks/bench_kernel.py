"""Per-decision latency of ``Kernel.check`` on the example policy, next to a baseline revision.

What is timed (p50 and p99 of one decision, decisions/s = decisions / wall time of the timed
loop), on ``examples/research-agent.yaml`` with ``run_state.quarantine_after_denials`` raised to
10**9 and the principal's rate limits removed (``max_calls_per_minute=None``), so an allowed
call stays allowed for the whole run:

* paths: the bare rule match (``RuleSet(policy.rules).first_match(call, frozenset())`` on a
  validated ``ToolCall``); ``Kernel.check`` with rules only (``guards=[]``,
  ``behavioral_rules=False``); with the defaults (content guards and the statement pack); the
  defaults with the SQLite audit log (durability ``normal``); the same with ``fsync``;
* calls: an allowed HTTP GET, an allowed file read under a temporary working directory, and a
  GET to a host no grant allows (denied by the capability check);
* arguments: ``distinct`` (every call's URL / file name differs: ``?page=i``,
  ``notes-{i % 20000}.txt``; the headline) and ``repeated`` (an equal call every time, each a
  fresh mapping as a client would send it). A distinct measurement takes arguments no earlier
  measurement of the process took (``Child.fresh``: page numbers from a counter that only goes
  up, all of seven digits; file names from a window that moves on around 20,000 files): the
  guards' caches are process-wide (the decoder's forms, the credential shapes, a URL's host
  parse, 4,096 strings each), and the same ``?page=0…`` in every measurement let later ones
  read the first one's decodings (a distinct GET measured a quarter faster than it is).

Each measurement builds a fresh kernel, warms it up with calls of the same kind, then times up
to ``BENCH_N`` decisions (default 20000; fsync ``BENCH_N // 20``), stopping early once the timed
loop has run ``--max-seconds`` (then ``n`` in the table says how many were timed).

**Growth**: one kernel per tree (defaults, no audit), in that tree's one process, is driven
with a rotation of the three calls, all arguments distinct; after 10, 1,000, 10,000 and 100,000
checks the next 200 checks of each kind are timed in five stretches half a second apart, the
trees taking turns between them, and the lowest of the stretches' p50 is shown: the shared
machine has noisy moments of up to several seconds (right after the fsync rows most of all, so
the growth starts once the disk is synced and two seconds have passed), 1.5 to 2 times slower
for every call in them, and a single stretch, or the median of a few, could fall in one; noise
only ever adds time, so the least disturbed stretch is the figure to compare. The table gives
the ratio 100k / 10. The trees build their runs up at the same time (nothing is timed then).
Each tree's run has a time budget (``--growth-seconds``, ``--baseline-growth-seconds``); a tree
too slow to reach a length within it says so.

**Baseline**: the same code runs, in the same run, on callgate at ``--baseline REV`` (default
``b49646e``, before the performance work): a ``git worktree`` of the revision (removed
afterwards) whose ``src`` is first on the child's ``PYTHONPATH``; the child checks that
``callgate`` is imported from there. Current and baseline run as two long-lived children of this
script (``--measure-json``: JSON requests on stdin, one JSON line per answer on stdout); their
measurements alternate per configuration, and each configuration is measured ``--reps`` times
(median of the repetitions), since the machine is shared and noisy. ``--tree REV`` measures a
revision instead of the working tree (which other people may be editing).

**Compiled** (unless ``--no-compiled``): the measured tree's compiled build (the modules of
the decision path compiled by mypyc, built as ``make native`` builds it, into a temporary
directory) is a third child, measured in the same alternation; the child checks that the
pipeline module it imports is the compiled one. Its figures are the "compiled" columns.

**Peers** (``--peers``; never fails the run): bawbel-gate, tollgate, toolwarden and the Agent
Governance Toolkit are installed into ``benchmarks/.peers/venv`` and their equivalent functions
timed the same way (see ``_peers.py``, which names each function timed).

The table gives each row's goal (the issue's, p50), the figures published before the work, and
the goal scaled to this machine: goal * (baseline measured now / published before figure).
A configuration that fails (an error in the measured tree) is reported as an error in its row;
the run goes on. Writes benchmarks/out/kernel.json and kernel.md.

Run: ``.venv/bin/python benchmarks/bench_kernel.py [--reps 3] [--baseline REV | --no-baseline]
[--tree REV] [--peers]``; ``BENCH_N=5000`` for a quicker run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import _baseline
import _peers

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
POLICY = ROOT / "examples" / "research-agent.yaml"
N = int(os.environ.get("BENCH_N", "20000"))
DEFAULT_BASELINE = "b49646e"

KINDS = ("get", "read", "denied")
KIND_LABEL = {"get": "GET, allowed", "read": "file read", "denied": "GET, denied host"}
REGIMES = ("distinct", "repeated")
CONFIGS = ("bare", "rules", "defaults", "audit", "fsync")
CONFIG_LABEL = {
    "bare": "bare rule match (RuleSet.first_match)",
    "rules": "Kernel.check, rules only (no guards, no pack)",
    "defaults": "Kernel.check, defaults (guards + pack), no audit",
    "audit": "Kernel.check, defaults + SQLite audit (normal)",
    "fsync": "Kernel.check, defaults + SQLite audit (fsync)",
}
GROWTH_LENGTHS = (10, 1_000, 10_000, 100_000)
GROWTH_SAMPLE = 200
#: Stretches the sample of each length is timed in, the trees taking turns; the lowest is kept.
GROWTH_ROUNDS = 5
#: Seconds between two stretches, and before the growth starts (after a sync).
GROWTH_PAUSE_S = 0.5
GROWTH_SETTLE_S = 2.0
WARMUP_S = 0.06
DISTINCT_FILES = 20_000
#: Where the page numbers of distinct calls start (seven digits for the whole run).
FRESH_START = 1_000_000

# Goals (p50 µs) from the issue, by configuration, and the calls each applies to.
GOALS: dict[str, dict[str, Any]] = {
    "bare": {"p50": None, "kinds": (), "text": "reference: peers 3.2–3.5 µs"},
    "rules": {"p50": 12.0, "kinds": KINDS, "text": "≤ 12 µs"},
    "defaults": {"p50": 30.0, "kinds": ("get", "read"), "text": "≤ 30 µs"},
    "audit": {"p50": 60.0, "dps": 15_000.0, "kinds": KINDS, "text": "≤ 60 µs, ≥ 15,000/s"},
    "fsync": {"p50": None, "kinds": (), "text": "its own figure"},
}
# Published before the work (p50 µs; the audit rows a range, scaled by its middle).
PUBLISHED: dict[str, dict[str, Any]] = {
    "bare": {"p50": {k: 1.7 for k in KINDS}, "text": "1.7"},
    "rules": {"p50": {k: 44.0 for k in KINDS}, "text": "44"},
    "defaults": {"p50": {"get": 270.0, "read": 412.0, "denied": 270.0},
                 "text": {"get": "270", "read": "412", "denied": "270"}},
    "audit": {"p50": {k: (431.0 + 448.0) / 2 for k in KINDS}, "dps": 1_700.0,
              "text": "431–448; 1,600–1,800/s"},
}


# =========================================================================== child side
# Runs against whichever ``callgate`` is first on sys.path (the working tree or a worktree).


def make_call(kind: str, i: int | None) -> dict[str, Any]:
    """A call of ``kind`` as a client sends it; ``i`` None gives the repeated form."""
    if kind == "read":
        path = "./data/notes.txt" if i is None else f"./data/notes-{i % DISTINCT_FILES}.txt"
        return {"tool": "read", "tool_class": "file", "action": "read",
                "parameters": {"path": path}}
    host = "https://api.github.com/repos/a/b" if kind == "get" else "https://evil.com/"
    url = host if i is None else f"{host}?page={i}"
    return {"tool": "fetch", "tool_class": "http", "action": "get", "parameters": {"url": url}}


def make_calls(kind: str, regime: str, n: int, offset: int = 0) -> list[dict[str, Any]]:
    return [make_call(kind, offset + i if regime == "distinct" else None) for i in range(n)]


def _percentile(ordered: list[int], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1000


def time_calls(fn: Callable[[Any], Any], calls: list[Any], max_s: float
               ) -> tuple[list[int], list[Any], float]:
    """Per-call ns, results and loop wall seconds of ``fn`` over ``calls`` (stops after
    ``max_s`` seconds of the loop)."""
    samples: list[int] = []
    results: list[Any] = []
    add, keep = samples.append, results.append
    clock = time.perf_counter_ns
    gc.collect()
    start = clock()
    deadline = start + int(max_s * 1e9)
    for call in calls:
        t0 = clock()
        out = fn(call)
        t1 = clock()
        add(t1 - t0)
        keep(out)
        if t1 > deadline:
            break
    wall = (clock() - start) / 1e9
    return samples, results, wall


def _enough(warmed: tuple[list[int], list[Any], float], n: int, max_s: float) -> int:
    """How many calls to build: ``n``, or fewer when the warm-up's pace says that many would
    not fit in ``max_s`` (with a margin; the timed loop stops at ``max_s`` anyway)."""
    samples, _, wall = warmed
    if not samples or wall <= 0:
        return n
    return min(n, int(max_s / (wall / len(samples)) * 1.5) + 100)


def summary(samples: list[int], wall: float) -> dict[str, Any]:
    ordered = sorted(samples)
    return {"n": len(samples), "p50_us": _percentile(ordered, 0.5),
            "p99_us": _percentile(ordered, 0.99), "mean_us": statistics.fmean(ordered) / 1000,
            "decisions_per_s": len(samples) / wall if wall > 0 else 0.0}


class Child:
    """The measuring side: a scratch working directory and the patched example policy."""

    def __init__(self, expect: str | None) -> None:
        self.expect = expect
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-kernel-"))
        self.work = self.tmp / "work"
        (self.work / "data").mkdir(parents=True)
        (self.work / "data" / "notes.txt").write_text("notes\n")
        for i in range(DISTINCT_FILES):
            (self.work / "data" / f"notes-{i}.txt").write_text("notes\n")
        self._policy: Any = None
        self._audits = 0
        self._growth: dict[str, Any] | None = None
        self._fresh = FRESH_START

    def fresh(self, kind: str, regime: str, n: int) -> list[dict[str, Any]]:
        """``n`` calls of ``kind``; for ``distinct``, with arguments no earlier call of this
        process had (see the module docstring)."""
        offset = self._fresh
        if regime == "distinct":
            self._fresh += n
        return make_calls(kind, regime, n, offset)

    def close(self) -> None:
        if self._growth is not None:
            with contextlib.suppress(Exception):
                self._growth["kernel"].close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- what is measured ----------------------------------------------------------------

    def hello(self) -> dict[str, Any]:
        import callgate
        import callgate.kernel._kernel as pipeline

        where = str(Path(callgate.__file__).resolve())
        ok = self.expect is None or where.startswith(str(Path(self.expect).resolve()) + os.sep)
        return {"callgate": where, "expected_under": self.expect, "ok": ok,
                "python": platform.python_version(),
                "compiled": str(pipeline.__file__).endswith(".so")}

    def _check_origin(self) -> None:
        info = self.hello()
        if not info["ok"]:
            raise RuntimeError(f"callgate imported from {info['callgate']}, "
                               f"not under {self.expect}")

    def policy(self, *, pack: bool = True) -> Any:
        """The example policy: quarantine out of reach, no rate limit, pack on or off."""
        if self._policy is None:
            from callgate.policy._loader import load_policy

            self._check_origin()
            self._policy = load_policy(POLICY).policy
        policy = self._policy
        principal = policy.principal
        if principal is not None:
            grants = tuple(
                g.model_copy(update={"constraints": g.constraints.model_copy(
                    update={"max_calls_per_minute": None})})
                for g in principal.capabilities)
            principal = principal.model_copy(update={"capabilities": grants})
        run_state = policy.run_state.model_copy(
            update={"quarantine_after_denials": 10**9, "behavioral_rules": pack})
        return policy.model_copy(update={"principal": principal, "run_state": run_state})

    def kernel(self, config: str) -> tuple[Any, Path | None]:
        from callgate.kernel._kernel import Kernel

        store: Any = None
        audit_dir: Path | None = None
        if config in ("audit", "fsync"):
            from callgate.audit import AuditStore

            self._audits += 1
            audit_dir = self.tmp / f"audit-{self._audits}"
            audit_dir.mkdir()
            store = AuditStore.open(audit_dir / "audit.db",
                                    durability="fsync" if config == "fsync" else "normal")
        rules_only = config == "rules"
        kernel = Kernel(self.policy(pack=not rules_only), working_dir=self.work, audit=store,
                        guards=[] if rules_only else None)
        return kernel, audit_dir

    def measure(self, config: str, kind: str, regime: str, n: int, max_s: float
                ) -> dict[str, Any]:
        warm_n = max(50, min(500, n // 10))
        if config == "bare":
            return self._measure_bare(kind, regime, n, max_s, warm_n)
        kernel, audit_dir = self.kernel(config)
        try:
            count = _enough(time_calls(kernel.check, self.fresh(kind, regime, warm_n),
                                       WARMUP_S), n, max_s)
            samples, decisions, wall = time_calls(kernel.check, self.fresh(kind, regime, count),
                                                  max_s)
        finally:
            closed = _close(kernel)
            if audit_dir is not None:
                shutil.rmtree(audit_dir, ignore_errors=True)
        verdicts = Counter(
            d.verdict if d.verdict != "deny" else
            f"deny ({d.reasons[0].id if d.reasons else '?'})" for d in decisions)
        out = {**summary(samples, wall), "verdicts": dict(verdicts), "warmup": warm_n,
               "capped": len(samples) < n}
        if closed:
            out["close_error"] = closed
        return out

    def _measure_bare(self, kind: str, regime: str, n: int, max_s: float, warm_n: int
                      ) -> dict[str, Any]:
        from callgate._model import ToolCall
        from callgate.kernel import _rules

        self._check_origin()
        ruleset_type = getattr(_rules, "RuleSet", None)
        if ruleset_type is None or not hasattr(ruleset_type, "first_match"):
            return {"error": "no RuleSet.first_match in this tree"}
        rules = ruleset_type(self.policy().rules)
        empty: frozenset[str] = frozenset()

        def match(call: Any) -> Any:
            return rules.first_match(call, empty)

        warm = [ToolCall.model_validate(c) for c in self.fresh(kind, regime, warm_n)]
        count = _enough(time_calls(match, warm, WARMUP_S), n, max_s)
        calls = [ToolCall.model_validate(c) for c in self.fresh(kind, regime, count)]
        samples, found, wall = time_calls(match, calls, max_s)
        verdicts = Counter("no rule" if r is None else f"{r.decision} ({r.id})" for r in found)
        return {**summary(samples, wall), "verdicts": dict(verdicts), "warmup": warm_n,
                "capped": len(samples) < n}

    # -- growth: one run, sampled as it grows ---------------------------------------------

    def growth_start(self) -> dict[str, Any]:
        kernel, _ = self.kernel("defaults")
        self._growth = {"kernel": kernel, "count": 0, "busy_s": 0.0}
        return {"ok": True}

    def growth_fill(self, length: int, budget_s: float) -> dict[str, Any]:
        """Check a rotation of the three calls until the run holds ``length`` checks, unless
        the run's time budget runs out first."""
        state = self._growth
        if state is None:
            return {"error": "growth_start was not requested"}
        kernel = state["kernel"]
        start = time.perf_counter()
        count = state["count"]
        try:
            while count < length:
                kernel.check(make_call(KINDS[count % 3], count))
                count += 1
                if count % 256 == 0 and state["busy_s"] + time.perf_counter() - start > budget_s:
                    return {"error": f"time budget ({budget_s:g} s) spent after {count:,} "
                                     "checks", "reached": count}
        finally:
            state["count"] = count
            state["busy_s"] += time.perf_counter() - start
        return {"reached": count, "busy_s": state["busy_s"]}

    def growth_sample(self, sample: int) -> dict[str, Any]:
        """p50 of the next ``sample`` checks of each kind (interleaved)."""
        state = self._growth
        if state is None:
            return {"error": "growth_start was not requested"}
        kernel = state["kernel"]
        start = time.perf_counter()
        count = state["count"]
        per_kind: dict[str, list[int]] = {k: [] for k in KINDS}
        clock = time.perf_counter_ns
        for _ in range(sample):
            for kind in KINDS:
                call = make_call(kind, count)
                t0 = clock()
                kernel.check(call)
                per_kind[kind].append(clock() - t0)
                count += 1
        state["count"] = count
        state["busy_s"] += time.perf_counter() - start
        return {"sample": sample, "busy_s": state["busy_s"],
                "p50_us": {k: _percentile(sorted(v), 0.5) for k, v in per_kind.items()}}

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "hello":
            return self.hello()
        if op == "measure":
            return self.measure(request["config"], request["kind"], request["regime"],
                                int(request["n"]), float(request["max_s"]))
        if op == "growth_start":
            return self.growth_start()
        if op == "growth_fill":
            return self.growth_fill(int(request["length"]), float(request["budget_s"]))
        if op == "growth_sample":
            return self.growth_sample(int(request["sample"]))
        return {"error": f"unknown request {op!r}"}


def _close(kernel: Any) -> str | None:
    try:
        kernel.close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def serve() -> int:
    """The ``--measure-json`` child: one JSON request per stdin line, one JSON answer each."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr  # nothing the measured code prints can break the protocol
    child = Child(os.environ.get("BENCH_KERNEL_EXPECT"))
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                answer = child.handle(json.loads(line))
            except Exception as exc:
                where = traceback.extract_tb(exc.__traceback__)[-1]
                answer = {"error": f"{type(exc).__name__}: {str(exc)[:300]} "
                                   f"({Path(where.filename).name}:{where.lineno})"}
            out.write(json.dumps(answer) + "\n")
    finally:
        child.close()
    return 0


# =========================================================================== parent side


def plan() -> list[tuple[str, str, str]]:
    return [(c, k, r) for c in CONFIGS for r in REGIMES for k in KINDS]


def size_for(config: str, n: int) -> int:
    return max(50, n // 20) if config == "fsync" else n


@contextlib.contextmanager
def trees(options: argparse.Namespace) -> Iterator[dict[str, dict[str, Any]]]:
    """The trees measured: name -> {"src": Path, "info": {...}}; worktrees removed on exit."""
    with contextlib.ExitStack() as stack:
        found: dict[str, dict[str, Any]] = {}
        if options.tree:
            root = stack.enter_context(_baseline.worktree(options.tree))
            found["current"] = {"src": root / "src", "info": _baseline.describe(options.tree)}
        else:
            root = ROOT
            found["current"] = {"src": ROOT / "src", "info": _baseline.working_tree_state()}
        if not options.no_compiled:
            target = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-native-")))
            print("building the compiled build of the measured tree ...", file=sys.stderr)
            found["compiled"] = {"src": _baseline.native_build(root, target),
                                 "info": {**found["current"]["info"], "build": "mypyc"}}
        if not options.no_baseline:
            path = stack.enter_context(_baseline.worktree(options.baseline))
            found["baseline"] = {"src": path / "src",
                                 "info": _baseline.describe(options.baseline)}
        yield found


def start_workers(found: dict[str, dict[str, Any]]) -> dict[str, _baseline.Worker]:
    workers = {}
    for name, tree in found.items():
        env = _baseline.child_env(tree["src"])
        env["BENCH_KERNEL_EXPECT"] = str(tree["src"])
        workers[name] = _baseline.Worker(
            name, [sys.executable, str(Path(__file__).resolve()), "--measure-json"], env, ROOT)
        hello = workers[name].request({"op": "hello"})
        if name == "compiled" and not hello.get("compiled"):
            hello = {**hello, "ok": False, "error": "the compiled build imports pure modules"}
        tree["hello"] = hello
        print(f"{name}: callgate from {hello.get('callgate', hello.get('error'))}",
              file=sys.stderr)
    return workers


def measure_all(workers: dict[str, _baseline.Worker], found: dict[str, dict[str, Any]],
                reps: int, n: int, max_s: float) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every (config, kind, regime) on every tree, ``reps`` times, trees alternating."""
    results: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in workers}
    names = list(workers)
    items = plan()
    for rep in range(reps):
        for j, (config, kind, regime) in enumerate(items):
            key = f"{config}/{kind}/{regime}"
            order = names if (rep + j) % 2 == 0 else names[::-1]
            line = []
            for name in order:
                if not found[name]["hello"].get("ok"):
                    got = {"error": "callgate not imported from the tree: "
                                    f"{found[name]['hello']}"}
                else:
                    got = workers[name].request({"op": "measure", "config": config, "kind": kind,
                                                 "regime": regime, "n": size_for(config, n),
                                                 "max_s": max_s})
                results[name].setdefault(key, []).append(got)
                line.append(f"{name} " + (f"{got['p50_us']:.1f} µs (n {got['n']})"
                                          if "p50_us" in got else "ERROR"))
            print(f"[{rep + 1}/{reps}] {key}: " + ", ".join(line), file=sys.stderr)
    return results


def measure_growth(workers: dict[str, _baseline.Worker], found: dict[str, dict[str, Any]],
                   budgets: dict[str, float]) -> dict[str, Any]:
    """Each tree's growth run in its worker. The trees build their runs up at the same time
    (two processes; nothing is timed then); the samples at each length alternate between the
    trees, one tree at a time."""
    out: dict[str, Any] = {name: {"steps": []} for name in workers}
    os.sync()  # the fsync rows leave the disk busy writing back for a while
    time.sleep(GROWTH_SETTLE_S)
    live = [name for name in workers if found[name]["hello"].get("ok")]
    for name in list(live):
        started = workers[name].request({"op": "growth_start"})
        if "error" in started:
            out[name]["error"] = started["error"]
            live.remove(name)
    for step, length in enumerate(GROWTH_LENGTHS):
        sent = {name: workers[name].send({"op": "growth_fill", "length": length,
                                          "budget_s": budgets[name]}) for name in live}
        for name in list(live):
            filled = {"error": sent[name]} if sent[name] else workers[name].receive()
            if "error" in filled:
                out[name]["steps"].append({"length": length, **filled})
                print(f"growth {name} to {length:,}: {filled['error']}", file=sys.stderr)
                live.remove(name)
        rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in live}
        for round_ in range(GROWTH_ROUNDS):
            if round_:
                time.sleep(GROWTH_PAUSE_S)
            for name in (live if (step + round_) % 2 == 0 else live[::-1]):
                rounds[name].append(workers[name].request(
                    {"op": "growth_sample", "sample": GROWTH_SAMPLE // GROWTH_ROUNDS}))
        for name in live:
            got = _least_disturbed(rounds[name])
            got["length"] = length
            out[name]["steps"].append(got)
            shown = (", ".join(f"{k} {v:.1f}" for k, v in got["p50_us"].items())
                     if "p50_us" in got else got.get("error"))
            print(f"growth {name} after {length:,}: {shown}", file=sys.stderr)
        live = [name for name in live if "p50_us" in out[name]["steps"][-1]]
    for data in out.values():
        steps = {s["length"]: s for s in data["steps"] if "p50_us" in s}
        first, last = steps.get(GROWTH_LENGTHS[0]), steps.get(GROWTH_LENGTHS[-1])
        if first and last:
            data["ratio_last_first"] = {k: last["p50_us"][k] / first["p50_us"][k] for k in KINDS}
    return out


def _least_disturbed(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The lowest p50 of each kind over a length's stretches (the first error, if any)."""
    failed = [r for r in rounds if "p50_us" not in r]
    if failed:
        return dict(failed[0])
    return {"sample": sum(r["sample"] for r in rounds), "busy_s": rounds[-1]["busy_s"],
            "p50_us": {k: min(r["p50_us"][k] for r in rounds) for k in KINDS},
            "rounds": [r["p50_us"] for r in rounds]}


def aggregate(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over repetitions (p50, p99, decisions/s); errors if none succeeded."""
    ok = [r for r in reps if "p50_us" in r]
    errors = [r["error"] for r in reps if "error" in r]
    if not ok:
        return {"error": errors[0] if errors else "not measured", "reps": reps}
    verdicts: Counter[str] = Counter()
    for r in ok:
        verdicts.update(r.get("verdicts", {}))
    return {
        "p50_us": statistics.median(r["p50_us"] for r in ok),
        "p99_us": statistics.median(r["p99_us"] for r in ok),
        "decisions_per_s": statistics.median(r["decisions_per_s"] for r in ok),
        "n": [r["n"] for r in ok], "capped": any(r.get("capped") for r in ok),
        "verdicts": dict(verdicts), "errors": errors, "reps": reps,
    }


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    fs = ""
    with contextlib.suppress(OSError):
        tmp = os.path.realpath(tempfile.gettempdir())
        best = ""
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and (tmp + "/").startswith(parts[1].rstrip("/") + "/") \
                    and len(parts[1]) >= len(best):
                best, fs = parts[1], parts[2]
    return {"cpu_count": os.cpu_count(), "cpu_model": model,
            "python": platform.python_version(), "platform": platform.platform(),
            "load_average": list(os.getloadavg()), "temp_dir_filesystem": fs}


# --------------------------------------------------------------------------- the table


def _us(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _verdicts(row: dict[str, Any]) -> str:
    counts = row.get("verdicts") or {}
    total = sum(counts.values())
    if not total:
        return ""
    parts = sorted(counts.items(), key=lambda kv: -kv[1])
    return "; ".join(f"{name} {100 * c / total:.0f}%" if len(parts) > 1 else name
                     for name, c in parts)


def build_rows(results: dict[str, dict[str, list[dict[str, Any]]]],
               peers: dict[str, Any] | None) -> list[dict[str, Any]]:
    rows = []
    for config, kind, regime in plan():
        key = f"{config}/{kind}/{regime}"
        cur = aggregate(results.get("current", {}).get(key, []))
        base = aggregate(results["baseline"][key]) if "baseline" in results else None
        comp = aggregate(results["compiled"][key]) if "compiled" in results else None
        goal = GOALS[config]
        published = PUBLISHED.get(config)
        row: dict[str, Any] = {
            "config": config, "kind": kind, "regime": regime, "path": CONFIG_LABEL[config],
            "current": cur, "baseline": base, "compiled": comp,
            "goal_text": goal["text"] if kind in goal["kinds"] or not goal["kinds"] else "—",
        }
        cur_p50, base_p50 = cur.get("p50_us"), base.get("p50_us") if base else None
        row["ratio"] = base_p50 / cur_p50 if cur_p50 and base_p50 else None
        if published is not None:
            text = published["text"]
            row["published_text"] = text[kind] if isinstance(text, dict) else text
            row["published_p50"] = published["p50"][kind]
        goal_p50 = goal["p50"] if kind in goal["kinds"] else None
        if goal_p50 is not None:
            row["goal_p50"] = goal_p50
            row["goal_dps"] = goal.get("dps")
            if base_p50 and published is not None:
                row["scale"] = base_p50 / published["p50"][kind]
                row["scaled_goal_p50"] = goal_p50 * row["scale"]
                if goal.get("dps") and base and published.get("dps"):
                    row["scaled_goal_dps"] = goal["dps"] * (base["decisions_per_s"]
                                                            / published["dps"])
            if comp is not None and comp.get("p50_us") is not None:
                row["met_compiled"] = comp["p50_us"] <= goal_p50 and (
                    not goal.get("dps") or comp["decisions_per_s"] >= goal["dps"])
            if cur_p50 is not None:
                row["met"] = cur_p50 <= goal_p50 and (
                    not goal.get("dps") or cur["decisions_per_s"] >= goal["dps"])
                if "scaled_goal_p50" in row:
                    row["met_scaled"] = cur_p50 <= row["scaled_goal_p50"] and (
                        "scaled_goal_dps" not in row
                        or cur["decisions_per_s"] >= row["scaled_goal_dps"])
        if peers is not None:
            row["peers"] = _peers.for_row(peers, config, kind, regime)
        rows.append(row)
    return rows


HEADER = ("| path | call | args | n (current / baseline) | p50 µs | p99 µs | decisions/s | "
          "compiled p50 µs | compiled decisions/s | "
          "baseline p50 µs | baseline / current | goal (p50) | published before | "
          "goal scaled to this machine | goal met (nominal / scaled; compiled) | verdicts | "
          "peers p50 µs |")


def table(rows: list[dict[str, Any]]) -> str:
    lines = [HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    for row in rows:
        cur, base = row["current"], row["baseline"]
        n_text = (f"{min(cur['n']):,}" if "n" in cur else "—") + " / " + (
            f"{min(base['n']):,}" if base and "n" in base else "—")
        if "error" in cur:
            p50, p99, dps = "ERROR: " + str(cur["error"])[:160].replace("|", "/"), "", ""
        else:
            p50, p99, dps = _us(cur["p50_us"]), _us(cur["p99_us"]), _rate(cur["decisions_per_s"])
        if base is None:
            base_text = "not measured"
        elif "error" in base:
            base_text = "ERROR: " + str(base["error"])[:80].replace("|", "/")
        else:
            base_text = _us(base["p50_us"])
        comp = row.get("compiled")
        if comp is None:
            comp_p50, comp_dps = "not measured", "—"
        elif "error" in comp:
            comp_p50, comp_dps = "ERROR: " + str(comp["error"])[:80].replace("|", "/"), "—"
        else:
            comp_p50, comp_dps = _us(comp["p50_us"]), _rate(comp["decisions_per_s"])
        ratio = f"{row['ratio']:.1f}×" if row.get("ratio") else "—"
        scaled = "—"
        if "scaled_goal_p50" in row:
            scaled = f"≤ {_us(row['scaled_goal_p50'])} µs"
            if "scaled_goal_dps" in row:
                scaled += f", ≥ {_rate(row['scaled_goal_dps'])}/s"
            scaled += f" (×{row['scale']:.2f})"
        met = "—"
        if "met" in row:
            met = ("yes" if row["met"] else "NO") + " / " + (
                ("yes" if row["met_scaled"] else "NO") if "met_scaled" in row else "—")
            if "met_compiled" in row:
                met += "; " + ("yes" if row["met_compiled"] else "NO")
        lines.append(
            f"| {row['path']} | {KIND_LABEL[row['kind']]} | {row['regime']} | {n_text} | {p50} | "
            f"{p99} | {dps} | {comp_p50} | {comp_dps} | {base_text} | {ratio} | "
            f"{row['goal_text']} | "
            f"{row.get('published_text', '—')} | {scaled} | {met} | {_verdicts(cur)} | "
            f"{row.get('peers') or ''} |")
    return "\n".join(lines)


def growth_table(growth: dict[str, Any]) -> str:
    names = list(growth)
    head = "| checks before the sample | " + " | ".join(
        f"{name} p50 µs: {KIND_LABEL[k]}" for name in names for k in KINDS) + " |"
    lines = [head, "|" + "---|" * (1 + len(names) * len(KINDS))]
    for length in GROWTH_LENGTHS:
        cells = []
        for name in names:
            step = next((s for s in growth[name]["steps"] if s.get("length") == length), None)
            for k in KINDS:
                if step is None:
                    cells.append(growth[name].get("error", "not reached")[:60])
                elif "p50_us" in step:
                    cells.append(_us(step["p50_us"][k]))
                else:
                    cells.append(f"not reached ({step.get('reached', 0):,} in the budget)")
        lines.append(f"| {length:,} | " + " | ".join(cells) + " |")
    ratio_cells = []
    for name in names:
        ratios = growth[name].get("ratio_last_first")
        ratio_cells += [f"{ratios[k]:.2f}" if ratios else "—" for k in KINDS]
    lines.append(f"| ratio {GROWTH_LENGTHS[-1]:,} / {GROWTH_LENGTHS[0]} | "
                 + " | ".join(ratio_cells) + " |")
    return "\n".join(lines)


def report(data: dict[str, Any]) -> str:
    trees_info = data["trees"]
    cur = trees_info["current"]
    lines = [
        f"# Kernel.check latency per decision (BENCH_N={data['n']:,}, {data['reps']} "
        f"repetition(s), median of repetitions)", "",
        f"Current: {cur['info'].get('rev')} (HEAD {cur['info'].get('commit', '')[:10]}"
        + (f", {len(cur['info']['src_changes'])} file(s) under src/ changed"
           if cur["info"].get("src_changes") else "") + ")"
        + (f"; baseline: `{trees_info['baseline']['info']['rev']}` "
           f"({trees_info['baseline']['info']['commit'][:10]}: "
           f"{trees_info['baseline']['info']['subject'][:70]})"
           if "baseline" in trees_info else "; no baseline") + ".",
        f"Machine: {data['machine']['cpu_count']} CPU(s) {data['machine']['cpu_model']}, "
        f"Python {data['machine']['python']}, load average "
        f"{' '.join(f'{x:.2f}' for x in data['machine']['load_average'])} at the start, "
        f"{' '.join(f'{x:.2f}' for x in data['load_average_end'])} at the end; temporary "
        f"files on {data['machine']['temp_dir_filesystem'] or '?'}.",
        f"Each measurement: a fresh kernel, a warm-up, then up to {data['n']:,} decisions "
        f"({size_for('fsync', data['n']):,} with fsync), stopped after "
        f"{data['max_seconds']:g} s of timed loop: `n` is the smallest count timed in a "
        "repetition. decisions/s = n / wall time of the timed loop. Rate limits removed, "
        "quarantine out of reach (see the docstring).",
        "Compiled = the measured tree's compiled build (mypyc, `make native`), in the same "
        "alternation.",
        "Published before = the figures published before the work (old benchmark: a mix of "
        "calls that were mostly rate-limit denials); goal scaled = goal × (baseline p50 now / "
        "published p50), and for decisions/s × (baseline decisions/s now / 1,700).", "",
        table(data["rows"]), "",
        "## Growth: p50 of a check as one run grows (defaults, no audit, distinct arguments)",
        "",
        f"One kernel per tree, in one process each; after L checks (a rotation of the three "
        f"calls) the next {GROWTH_SAMPLE} checks of each kind are timed in {GROWTH_ROUNDS} "
        f"stretches {GROWTH_PAUSE_S:g} s apart, the trees taking turns between them, and the "
        f"lowest of the stretches' p50 is shown (noise only adds time; the build-up between "
        f"lengths runs in both trees at once, untimed). Time budget "
        f"{data['growth_seconds']:g} s for the measured tree, "
        f"{data['baseline_growth_seconds']:g} s for the baseline.", "",
        growth_table(data["growth"]),
    ]
    if data.get("peers"):
        lines += ["", "## Peers", "", _peers.notes(data["peers"])]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure-json", action="store_true",
                        help="internal: be the measuring child (JSON requests on stdin)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="git revision to compare")
    parser.add_argument("--no-baseline", action="store_true", help="measure no baseline")
    parser.add_argument("--tree", help="git revision to measure instead of the working tree")
    parser.add_argument("--reps", type=int, default=3, help="alternated repetitions (median)")
    parser.add_argument("--max-seconds", type=float, default=0.3,
                        help="stop a timed loop after this many seconds")
    parser.add_argument("--growth-seconds", type=float, default=60.0,
                        help="time budget of the measured tree's growth run")
    parser.add_argument("--baseline-growth-seconds", type=float, default=20.0,
                        help="time budget of the baseline's growth run (built up at the same "
                             "time as the measured tree's)")
    parser.add_argument("--no-compiled", action="store_true",
                        help="do not build and measure the compiled build of the measured tree")
    parser.add_argument("--peers", action="store_true",
                        help="also install and time the peer projects")
    options = parser.parse_args()
    if options.measure_json:
        return serve()
    started = time.monotonic()
    data: dict[str, Any] = {"n": N, "reps": options.reps, "max_seconds": options.max_seconds,
                            "growth_seconds": options.growth_seconds,
                            "baseline_growth_seconds": options.baseline_growth_seconds,
                            "machine": machine()}
    with trees(options) as found:
        workers = start_workers(found)
        try:
            results = measure_all(workers, found, options.reps, N, options.max_seconds)
            data["growth"] = measure_growth(workers, found, {
                "current": options.growth_seconds, "compiled": options.growth_seconds,
                "baseline": options.baseline_growth_seconds})
        finally:
            for worker in workers.values():
                worker.close()
        data["trees"] = {name: {"src": str(t["src"]), "info": t["info"], "hello": t["hello"]}
                         for name, t in found.items()}
    peers = None
    if options.peers:
        peers = _peers.run_all(N, options.max_seconds)
        data["peers"] = peers
    data["rows"] = build_rows(results, peers)
    data["load_average_end"] = list(os.getloadavg())
    data["elapsed_s"] = time.monotonic() - started
    text = report(data)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "kernel.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    (OUT / "kernel.md").write_text(text)
    print(text)
    print(f"({data['elapsed_s']:.0f} s; wrote {OUT / 'kernel.json'} and kernel.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
