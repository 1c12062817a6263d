"""Peer projects timed the way bench_kernel.py times callgate (``bench_kernel.py --peers``).

The peers (PyPI): bawbel-gate, tollgate, toolwarden and the Agent Governance Toolkit
(``agent-governance-toolkit[core]``, whose ``agentmesh`` package holds ``govern()``). They are
installed into a scratch virtualenv, ``benchmarks/.peers/venv`` (git-ignored), and each is timed
by a small script run with that venv's interpreter: the same three calls (an allowed GET to
api.github.com, a read of ``./data/notes*.txt``, a GET to a host no rule allows), the same two
argument regimes, the same timing (``perf_counter_ns`` around each call, p50 / p99 of the
sorted samples, a warm-up first, at most ``n`` calls or ``max_s`` seconds of loop).

Each peer is given a policy equivalent to ``examples/research-agent.yaml`` as far as its
language reaches, and the functions timed are named exactly in every result (``function``):
what a peer calls a rule match, a policy evaluation and an audited decision was read from its
installed source; where a peer has no such function the result says ``unavailable: <why>``.
The peers' request objects are built before the timed loop (callgate's ``Kernel.check`` is
handed a plain mapping and validates it inside the timed call). Nothing here may fail the
benchmark: install or API problems become ``unavailable`` entries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = ROOT / "benchmarks" / ".peers"
VENV = PEERS_DIR / "venv"

#: which peer path stands next to which row of the kernel table
ROW_PATH = {"bare": "bare", "rules": "rules", "audit": "audit"}

# --------------------------------------------------------------------------- child scripts
# Run by the peers' venv interpreter with argv: n, max_s. They print one JSON object.

COMMON = r'''
import gc, json, os, sys, tempfile, time
from collections import Counter
from importlib.metadata import version

N = int(sys.argv[1])
MAX_S = float(sys.argv[2])
KINDS = ("get", "read", "denied")
REGIMES = ("distinct", "repeated")
TMP = tempfile.mkdtemp(prefix="bench-peer-")
OUT = {"paths": {}, "path_unavailable": {}}


def raw(kind, i):
    """(tool, args) of a call, as bench_kernel.make_call builds it."""
    if kind == "read":
        path = "./data/notes.txt" if i is None else f"./data/notes-{i % 5000}.txt"
        return "read", {"path": path}
    host = "https://api.github.com/repos/a/b" if kind == "get" else "https://evil.com/"
    return "fetch", {"url": host if i is None else f"{host}?page={i}"}


def inputs(kind, regime, n, offset=0):
    return [raw(kind, offset + i if regime == "distinct" else None) for i in range(n)]


def run(fn, items, max_s):
    samples, results = [], []
    add, keep = samples.append, results.append
    clock = time.perf_counter_ns
    gc.collect()
    start = clock()
    deadline = start + int(max_s * 1e9)
    for item in items:
        t0 = clock()
        out = fn(item)
        t1 = clock()
        add(t1 - t0)
        keep(out)
        if t1 > deadline:
            break
    return samples, results, (clock() - start) / 1e9


def pct(ordered, q):
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1000


def path(key, function, prepare, fn, verdict):
    """Time ``fn(prepare(tool, args))`` on every kind and regime; record under ``key``."""
    entry = {"function": function, "kinds": {}}
    try:
        for regime in REGIMES:
            for kind in KINDS:
                warm = [prepare(*r) for r in inputs(kind, regime, 200, 10**7)]
                run(fn, warm, 0.25)
                items = [prepare(*r) for r in inputs(kind, regime, N)]
                samples, results, wall = run(fn, items, MAX_S)
                ordered = sorted(samples)
                entry["kinds"][f"{kind}/{regime}"] = {
                    "n": len(samples), "p50_us": pct(ordered, 0.5), "p99_us": pct(ordered, 0.99),
                    "decisions_per_s": len(samples) / wall if wall else 0.0,
                    "verdicts": dict(Counter(str(verdict(r)) for r in results)),
                }
    except Exception as exc:
        OUT["path_unavailable"][key] = f"{function}: {type(exc).__name__}: {str(exc)[:200]}"
        return
    OUT["paths"][key] = entry


def done(dist):
    OUT["version"] = version(dist)
    print(json.dumps(OUT))
'''

TOLLGATE = r'''
import asyncio
from tollgate import (AgentContext, AutoApprover, ControlTower, Effect, Intent, JsonlAuditSink,
                      NetworkGuard, TollgateError, ToolRequest, YamlPolicyEvaluator)
from tollgate.types import DecisionType

POLICY = """
version: "1"
rules:
  - id: allow-fetch
    tool: fetch
    action: get
    decision: ALLOW
    reason: reads are fine
  - id: allow-read
    tool: read
    action: read
    decision: ALLOW
    reason: reads are fine
"""
policy_file = os.path.join(TMP, "policy.yaml")
with open(policy_file, "w") as fh:
    fh.write(POLICY)
ev = YamlPolicyEvaluator(policy_file)
guard = NetworkGuard(default="deny", allowlist=[{"pattern": "https://api.github.com/*"},
                                                {"pattern": "https://*.example.org/*"}])
ctx = AgentContext(agent_id="research-agent", version="1", owner="bench")
intent = Intent(action="research", reason="benchmark")


def prepare(tool, args):
    if tool == "read":
        return ToolRequest(tool="read", action="read", resource_type="file", effect=Effect.READ,
                           params=args, manifest_version="1")
    return ToolRequest(tool="fetch", action="get", resource_type="url", effect=Effect.READ,
                       params=args, manifest_version="1")


def bare(req):
    for rule in ev.rules:
        if ev._matches(rule, ctx, intent, req):
            return rule.get("id")
    return None


def evaluate_only(req):
    return ev.evaluate(ctx, intent, req).decision.value


def evaluate(req):
    decision = ev.evaluate(ctx, intent, req)
    if decision.decision == DecisionType.ALLOW and guard.check(req.params):
        return "DENY (NetworkGuard)"
    return decision.decision.value


loop = asyncio.new_event_loop()
tower = ControlTower(ev, AutoApprover(), JsonlAuditSink(os.path.join(TMP, "audit.jsonl")),
                     network_guard=guard)


async def noop():
    return None


def governed(req):
    try:
        loop.run_until_complete(tower.execute_async(ctx, intent, req, noop))
    except TollgateError as exc:
        return type(exc).__name__
    return "executed"


path("bare", "tollgate.YamlPolicyEvaluator._matches(rule, ctx, intent, request) over the "
     "policy's rules in order until one matches (the loop inside evaluate())",
     prepare, bare, lambda r: r or "no rule")
path("rules", "tollgate.YamlPolicyEvaluator.evaluate(ctx, intent, request), then "
     "NetworkGuard.check(params) when it allows (the host allowlist)", prepare, evaluate, str)
path("rules, evaluate() alone", "tollgate.YamlPolicyEvaluator.evaluate(ctx, intent, request) "
     "(no host check: the denied GET is ALLOWed here)", prepare, evaluate_only, str)
path("audit", "tollgate.ControlTower.execute_async(ctx, intent, request, no-op tool) with "
     "YamlPolicyEvaluator, NetworkGuard, AutoApprover and JsonlAuditSink (one JSON line per "
     "decision, line-buffered, no hash chain), each driven by loop.run_until_complete on one "
     "event loop (that overhead included: see 'event loop overhead')", prepare, governed, str)
path("event loop overhead", "loop.run_until_complete(noop()) alone", prepare,
     lambda req: loop.run_until_complete(noop()), lambda r: "none")
done("tollgate")
'''

BAWBEL = r'''
from pathlib import Path
from types import SimpleNamespace

from bawbel_gate.audit.writer import AuditWriter
from bawbel_gate.mux import proxy
from bawbel_gate.mux.session import SessionState
from bawbel_gate.policy.engine import resolve
from bawbel_gate.policy.manifest import load_manifest

MANIFEST = """
schema: bawbel/capability-manifest/v1
subject: {kind: mcp-server, name: research}
provenance_class: web.fetched
instruction_authority: none
trifecta: {private_data: false, untrusted_content: true, external_comms: false}
grants:
  tools:
    - name: fetch
      effect: allow
      conditions: {args.url: {pattern: "https://api.github.com/*"}}
    - name: read
      effect: allow
      conditions: {args.path: {pattern: "./data/*"}}
  argument_guards:
    - applies_to: "*"
      outbound_secret_scan: true
"""
manifest_file = Path(TMP) / "research.yaml"
manifest_file.write_text(MANIFEST)
manifest = load_manifest(manifest_file, "research")
session = SessionState()
ctx = SimpleNamespace(writer=AuditWriter(Path(TMP) / "audit.jsonl"), session=session)


def prepare(tool, args):
    return tool, args


def bare(req):
    grant = manifest.match_grant(req[0])
    if grant is None:
        return "no grant"
    return grant.name if grant.conditions_ok(req[1]) else "condition failed"


def audited(req):
    decision = resolve(req[0], req[1], manifest, session)
    proxy._audit_call(ctx, "research", req[0], decision, req[1], manifest)
    return decision.effect


path("bare", "bawbel_gate Manifest.match_grant(tool), then ToolGrant.conditions_ok(args) "
     "(steps 1-3 of resolve(): the grant and its fnmatch conditions)", prepare, bare, str)
path("rules", "bawbel_gate.policy.engine.resolve(tool, args, manifest, session) (grant, "
     "conditions, argument guard with the secret scan, taint rules, trifecta)", prepare,
     lambda req: resolve(req[0], req[1], manifest, session).effect, str)
path("audit", "bawbel_gate resolve(...), then mux.proxy._audit_call(...) as its proxy does: "
     "args hashed, AuditWriter.append = a hash-chained JSONL record, the file opened and "
     "appended per record, no fsync", prepare, audited, str)
done("bawbel-gate")
'''

TOOLWARDEN = r'''
import posixpath
from datetime import datetime, timezone
from urllib.parse import urlsplit

from toolwarden import Allow, Deny, FactKey, Gate, normalizer, policy

HOST = FactKey("host")
DIR = FactKey("dir")


@normalizer("url-host", tools=["fetch"], provides=[HOST])
def url_host(call):
    return {HOST: urlsplit(call.args["url"]).hostname or ""}


@normalizer("path-dir", tools=["read"], provides=[DIR])
def path_dir(call):
    return {DIR: posixpath.normpath(posixpath.dirname(call.args["path"]))}


@policy("allow-hosts", tools=["fetch"], needs=[HOST])
def allow_hosts(facts):
    host = facts[HOST]
    if host == "api.github.com" or host.endswith(".example.org"):
        return Allow()
    return Deny("host not allowed")


@policy("allow-data-reads", tools=["read"], needs=[DIR])
def allow_reads(facts):
    folder = facts[DIR]
    return Allow() if folder == "data" or folder.startswith("data/") else Deny("path not allowed")


principal = {"agent": "research-agent"}
gate = Gate(policies=[allow_hosts, allow_reads], normalizers=[url_host, path_dir])
log = open(os.path.join(TMP, "audit.jsonl"), "a", encoding="utf-8")


def sink(call, decision):
    log.write(decision.record_line(ts=datetime.now(timezone.utc).isoformat()) + "\n")


logged = Gate(policies=[allow_hosts, allow_reads], normalizers=[url_host, path_dir],
              on_decision=sink)


def prepare(tool, args):
    return tool, args


def verdict(decision):
    return "allow" if decision.allowed else f"deny ({decision.outcome.kind.name})"


OUT["path_unavailable"]["bare"] = ("toolwarden has no separate rule-match step: its policies are "
                              "Python functions that Gate.decide routes by tool name")
path("rules", "toolwarden.Gate.decide(tool=, args=, principal=) (routing, the normalizers "
     "url-host / path-dir written here, the two policy bodies written here, canonical sorts, "
     "a uuid4 decision id)", prepare,
     lambda req: gate.decide(tool=req[0], args=req[1], principal=principal), verdict)
path("audit", "toolwarden.Gate.decide with an on_decision sink writing "
     "Decision.record_line(ts=...) (canonical JSON with the body's sha256, no chain) to an "
     "open file, no fsync", prepare,
     lambda req: logged.decide(tool=req[0], args=req[1], principal=principal), verdict)
done("toolwarden")
'''

AGT = r'''
from urllib.parse import urlsplit

from agentmesh.governance.govern import govern
from agentmesh.governance.policy import PolicyEngine

POLICY = """
apiVersion: governance.toolkit/v1
name: research-agent
agents: ["*"]
default_action: deny
rules:
  - name: allow-hosts
    condition: "action.type == 'fetch' and host.value in ['api.github.com', 'docs.example.org']"
    action: allow
  - name: allow-data-reads
    condition: "action.type == 'read' and dir.value == './data'"
    action: allow
"""
engine = PolicyEngine(conflict_strategy="deny_overrides")
loaded = engine.load_yaml(POLICY)


def fields(tool, args):
    # AGT's conditions compare fields of a context; they parse no URL or path, so the host and
    # the directory are extracted here, before the timed loop.
    if tool == "read":
        return {"action": "read", "dir": args["path"].rsplit("/", 1)[0], "path": args["path"]}
    return {"action": "fetch", "host": urlsplit(args["url"]).hostname, "url": args["url"]}


def context(tool, args):
    # the context govern() builds from keyword arguments (GovernedCallable._build_context)
    return {k: ({"type": v} if k == "action" else {"value": v})
            for k, v in fields(tool, args).items()}


def bare(ctx):
    return [rule.name for rule in loaded.rules if rule.evaluate(ctx)]


governed = govern(lambda **kwargs: "ran", policy=POLICY, agent_id="research-agent",
                  on_deny=lambda decision: decision)


path("bare", "agentmesh PolicyRule.evaluate(context) for every rule of the policy (its engine "
     "evaluates all rules, then resolves conflicts)", context, bare,
     lambda names: ",".join(names) or "no rule")
path("rules", "agentmesh.governance.policy.PolicyEngine.evaluate(agent_id, context)", context,
     lambda ctx: engine.evaluate("research-agent", ctx).action, str)
path("audit", "agentmesh.governance.govern.govern(fn, policy=..., on_deny=...)(**fields): "
     "context built from the keywords, PolicyEngine.evaluate, AuditLog.log (in-memory Merkle "
     "chain, no file), then the no-op function", fields,
     lambda kw: governed(**kw), lambda r: "allow" if r == "ran" else r.action)
done("agent-governance-toolkit")
'''

PEERS: dict[str, dict[str, str]] = {
    "bawbel-gate": {"install": "bawbel-gate", "short": "bawbel-gate", "script": BAWBEL},
    "tollgate": {"install": "tollgate", "short": "tollgate", "script": TOLLGATE},
    "toolwarden": {"install": "toolwarden", "short": "toolwarden", "script": TOOLWARDEN},
    "agent-governance-toolkit": {"install": "agent-governance-toolkit[core]", "short": "AGT",
                                 "script": AGT},
}


# --------------------------------------------------------------------------- parent side


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])[-400:]


def ensure_venv() -> tuple[Path | None, str | None]:
    """The scratch venv's interpreter, created if missing; or why there is none."""
    python = VENV / "bin" / "python"
    if python.exists():
        return python, None
    PEERS_DIR.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "venv", str(VENV)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0 or not python.exists():
        return None, f"python -m venv failed: {_tail(done.stderr)}"
    return python, None


def install(python: Path, spec: str) -> str | None:
    """pip-install ``spec`` into the venv (a no-op when present); the problem, if any."""
    try:
        done = subprocess.run([str(python), "-m", "pip", "install", "-q",
                               "--disable-pip-version-check", spec], capture_output=True,
                              text=True, check=False, timeout=900)
    except subprocess.TimeoutExpired:
        return "pip install timed out"
    if done.returncode != 0:
        return f"pip install {spec} failed: {_tail(done.stderr)}"
    return None


def run_peer(python: Path, script: str, n: int, max_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env["TMPDIR"] = tmp
        try:
            done = subprocess.run([str(python), "-c", COMMON + script, str(n), str(max_s)],
                                  capture_output=True, text=True, check=False, cwd=tmp, env=env,
                                  timeout=900)
        except subprocess.TimeoutExpired:
            return {"unavailable": "the timing script ran over 900 s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"unavailable": f"the timing script failed: {_tail(done.stderr)}"}
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"unavailable": f"the timing script printed no JSON: {lines[-1][:200]}"}
    return result


def run_all(n: int, max_s: float) -> dict[str, Any]:
    """Every peer's figures, or why it is unavailable. Never raises."""
    results: dict[str, Any] = {}
    try:
        python, problem = ensure_venv()
    except Exception as exc:
        python, problem = None, f"{type(exc).__name__}: {exc}"
    for name, peer in PEERS.items():
        print(f"peers: {name}", file=sys.stderr)
        try:
            if python is None:
                results[name] = {"unavailable": problem}
                continue
            problem_here = install(python, peer["install"])
            if problem_here:
                results[name] = {"unavailable": problem_here}
                continue
            results[name] = run_peer(python, peer["script"], n, max_s)
        except Exception as exc:
            results[name] = {"unavailable": f"{type(exc).__name__}: {exc}"}
    return results


_REFUSALS = ("deny", "violation", "fail", "no rule", "no grant")


def _refused(verdict: str) -> bool:
    return any(word in verdict.lower() for word in _REFUSALS)


def for_row(peers: dict[str, Any], config: str, kind: str, regime: str) -> str:
    """The peers' p50 (µs) for a row of the kernel table, or '' where none stands beside it.

    On the rules and audit rows a peer whose verdicts differ from callgate's (the GET and the
    read allowed, the other GET denied) is flagged with the share it got the other way."""
    key = ROW_PATH.get(config)
    if key is None:
        return ""
    cells = []
    for name, peer in PEERS.items():
        got = peers.get(name, {})
        entry = got.get("paths", {}).get(key, {}).get("kinds", {}).get(f"{kind}/{regime}")
        if not entry:
            cells.append(f"{peer['short']} n/a")
            continue
        cell = f"{peer['short']} {entry['p50_us']:.1f}"
        counts: dict[str, int] = entry.get("verdicts", {})
        total = sum(counts.values())
        if key != "bare" and total:
            refused = sum(c for v, c in counts.items() if _refused(v))
            wrong = total - refused if kind == "denied" else refused
            if wrong:
                word = "allowed" if kind == "denied" else "denied"
                cell += f" ({word} {100 * wrong / total:.0f}%!)"
        cells.append(cell)
    return "; ".join(cells)


def _verdicts(counts: dict[str, int]) -> str:
    total = sum(counts.values()) or 1
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{name} {100 * c / total:.0f}%"
                     for name, c in sorted(counts.items(), key=lambda kv: -kv[1]))


def notes(peers: dict[str, Any]) -> str:
    """What each peer's figures time, per path, and what was unavailable."""
    lines = ["Functions timed (p50 µs for GET allowed / file read / GET denied, distinct "
             "arguments; verdicts as the peer gave them). Rows of the table: bare rule match = "
             "`bare`, rules only = `rules`, defaults + audit (normal) = `audit`. A peer cell "
             "marked `(denied n%!)` or `(allowed n%!)` decided that share of the calls the "
             "other way from callgate, so its time is partly that of another path.", ""]
    for name in PEERS:
        got = peers.get(name, {})
        version = got.get("version", "?")
        if "unavailable" in got:
            lines.append(f"- **{name}**: unavailable: {got['unavailable']}")
            continue
        lines.append(f"- **{name}** {version}:")
        for key, entry in got.get("paths", {}).items():
            kinds = entry["kinds"]
            p50 = " / ".join(f"{kinds[f'{k}/distinct']['p50_us']:.1f}"
                             for k in ("get", "read", "denied") if f"{k}/distinct" in kinds)
            verdicts = " / ".join(_verdicts(kinds[f"{k}/distinct"]["verdicts"])
                                  for k in ("get", "read", "denied") if f"{k}/distinct" in kinds)
            lines.append(f"  - `{key}`: {entry['function']}: {p50} µs (verdicts {verdicts})")
        for key, why in got.get("path_unavailable", {}).items():
            lines.append(f"  - `{key}`: unavailable: {why}")
    return "\n".join(lines)
