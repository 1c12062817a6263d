"""Runs attack and benign scenarios (YAML data) against the kernel and the real executors.

A scenario file has ``name``, ``kind`` (``attack`` or ``benign``), ``story``, ``policy`` (a preset
name, ``{file: NAME}`` for a policy under ``policies/``, or ``{inline: {...}}``), optional
``guards`` (settings), ``approve`` (a human approves what the policy sends for approval),
``setup`` (``files``, ``symlinks``, ``databases``, ``routes``, ``values``) and ``runs`` (each
with ``steps`` and optionally its own ``policy``); attacks add ``expect: blocked`` and ``by``
(reason ids or id prefixes, any of which may stop it).

Text in policies, files and steps may use placeholders: ``${public}`` (the local "public"
server under a fake name), ``${server}`` (the same server by address), ``${port}``,
``${home}``, ``${work}``, ``${values.NAME}``, ``${hex:NAME}``, ``${b64:NAME}``, ``${i}`` (the
repetition of a ``repeat`` step) and ``${hexchunk:NAME:SIZE}`` (the ``${i}``-th chunk of
SIZE hex characters of a value).

The "public" server listens on 127.0.0.2; the HTTP executor opens only that address and
resolves ``*.example`` names to it and ``localhost`` to 127.0.0.1, never through real DNS.
Every run of a scenario is a fresh kernel sharing one guard state file (cross-run stories).
"""

from __future__ import annotations

import base64
import dataclasses
import http.server
import json
import re
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from callgate._errors import CallgateError, Denied
from callgate.executors._wiring import build_executors
from callgate.guards import GuardSettings
from callgate.kernel._kernel import Kernel
from callgate.policy._loader import LoadedPolicy, parse_policy
from callgate.policy._settings import ExecutorSettings, HttpSettings
from callgate.policy.presets import load_preset

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"
POLICIES = HERE / "policies"
PUBLIC_ADDRESS = "127.0.0.2"
_PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")


@dataclass
class Received:
    """A request the local server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: str


class LocalServer:
    """A threaded HTTP server on 127.0.0.2 with per-scenario routes; it records requests."""

    def __init__(self) -> None:
        self.routes: dict[str, dict[str, Any]] = {}
        self.received: list[Received] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                server.received.append(Received(self.command, self.path,
                                                dict(self.headers.items()), body))
                route = server.routes.get(self.path.split("?", 1)[0], {})
                payload = str(route.get("body", "ok")).encode()
                self.send_response(int(route.get("status", 200)))
                self.send_header("Content-Type", str(route.get("content_type", "text/plain")))
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_HEAD = _serve  # noqa: N815 - http.server's names

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = http.server.ThreadingHTTPServer((PUBLIC_ADDRESS, 0), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> LocalServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def resolver(host: str, port: int) -> list[str]:
    """Fake DNS: ``*.example`` is the local public server, ``localhost`` is loopback."""
    name = host.lower().rstrip(".")
    if name == "localhost":
        return ["127.0.0.1"]
    if name.endswith(".example"):
        return [PUBLIC_ADDRESS]
    raise OSError(f"{host}: no such name in the test resolver")


@dataclass
class Outcome:
    """What happened when a scenario ran."""

    name: str
    kind: str
    blocked: bool = False
    reasons: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    where: str = ""
    statuses: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    expected_by: list[str] = field(default_factory=list)

    @property
    def mechanism(self) -> str:
        """The reason id that stopped the scenario (the expected one when several are given)."""
        for rid in self.reasons:
            if any(rid == b or rid.startswith(b) for b in self.expected_by):
                return rid
        return self.reasons[0] if self.reasons else ""

    @property
    def as_expected(self) -> bool:
        """Attacks: blocked by an expected mechanism. Benign: nothing blocked, all ran ok."""
        if self.kind == "attack":
            return self.blocked and (not self.expected_by or any(
                r == b or r.startswith(b) for r in self.reasons for b in self.expected_by))
        return not self.blocked and all(s == "ok" for s in self.statuses)


def scenario_files(kind: str | None = None) -> list[Path]:
    """Every scenario file (of one kind: ``attack`` or ``benign``), sorted."""
    dirs = [SCENARIOS / kind] if kind else [SCENARIOS / "attack", SCENARIOS / "benign"]
    return sorted(p for d in dirs for p in d.glob("*.yaml"))


class _Context:
    def __init__(self, root: Path, server: LocalServer, values: Mapping[str, str]) -> None:
        self.root = root
        self.values = {str(k): str(v) for k, v in values.items()}
        self.fixed = {"public": f"http://public.example:{server.port}",
                      "server": f"http://{PUBLIC_ADDRESS}:{server.port}",
                      "port": str(server.port), "home": str(root / "home"),
                      "work": str(root / "work")}

    def text(self, text: str, i: int = 0) -> str:
        return _PLACEHOLDER.sub(lambda m: self._value(m.group(1), i), text)

    def _value(self, key: str, i: int) -> str:
        if key == "i":
            return str(i)
        if key in self.fixed:
            return self.fixed[key]
        kind, _, rest = key.partition(":")
        if key.startswith("values."):
            return self.values[key[len("values."):]]
        if kind == "hex":
            return self.values[rest].encode().hex()
        if kind == "b64":
            return base64.b64encode(self.values[rest].encode()).decode()
        if kind == "hexchunk":
            name, size = rest.split(":")
            data = self.values[name].encode().hex()
            return data[i * int(size):(i + 1) * int(size)] or "00"
        raise KeyError(f"unknown placeholder ${{{key}}}")

    def deep(self, value: Any, i: int = 0) -> Any:
        if isinstance(value, str):
            return self.text(value, i)
        if isinstance(value, Mapping):
            return {self.text(str(k), i): self.deep(v, i) for k, v in value.items()}
        if isinstance(value, list):
            return [self.deep(v, i) for v in value]
        return value


def _prepare(setup: Mapping[str, Any], ctx: _Context) -> dict[str, str]:
    root = ctx.root
    (root / "work").mkdir(parents=True, exist_ok=True)
    (root / "home").mkdir(parents=True, exist_ok=True)
    for rel, content in (setup.get("files") or {}).items():
        path = root / ctx.text(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(ctx.text(str(content)))
    for rel, target in (setup.get("symlinks") or {}).items():
        link = root / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(ctx.text(target))
    databases: dict[str, str] = {}
    for name, statements in (setup.get("databases") or {}).items():
        path = root / "work" / f"{name}.db"
        with sqlite3.connect(path) as db:
            for sql in statements:
                db.execute(ctx.text(sql))
        db.close()
        databases[name] = str(path)
    return databases


def _policy(spec: Any, ctx: _Context) -> LoadedPolicy:
    if isinstance(spec, str):
        return load_preset(spec, working_dir=ctx.root / "work")
    if "inline" in spec:
        name, text = "inline", ctx.text(yaml.safe_dump(spec["inline"]))
    else:
        name = spec["file"]
        text = ctx.text((POLICIES / name).read_text())
    loaded = parse_policy(text, f"policies/{name}")
    policy = loaded.policy.model_copy(update={"working_dir": str(ctx.root / "work")})
    return dataclasses.replace(loaded, policy=policy)


def _steps(run: Mapping[str, Any], ctx: _Context) -> Iterator[dict[str, Any]]:
    for step in run["steps"]:
        for i in range(int(step.get("repeat", 1))):
            call = ctx.deep(dict(step["call"]), i)
            call.setdefault("tool", call.get("tool_class", "tool"))
            yield call


def run_scenario(path: Path, tmp: Path, server: LocalServer, *,
                 guards: GuardSettings | None = None, audit: Path | None = None) -> Outcome:
    """Run one scenario file in ``tmp`` against ``server``; never raises on a denial.

    ``guards`` replaces the scenario's (and its policy's) guard settings, e.g. to show what
    gets through with the guards off; ``audit`` records every run in that audit log.
    """
    data = yaml.safe_load(path.read_text())
    setup = data.get("setup") or {}
    ctx = _Context(tmp, server, setup.get("values") or {})
    server.routes = {k: ctx.deep(v) for k, v in (setup.get("routes") or {}).items()}
    databases = _prepare(setup, ctx)
    by = data.get("by") or []
    out = Outcome(name=data["name"], kind=data["kind"],
                  expected_by=[by] if isinstance(by, str) else list(by))
    settings = ExecutorSettings(
        http=HttpSettings(allowed_addresses=(PUBLIC_ADDRESS,), system_dns=False, timeout_s=5.0),
        databases=databases)
    guard_settings = guards or (
        GuardSettings.model_validate(data["guards"]) if data.get("guards") else None)
    for number, run in enumerate(data["runs"], start=1):
        loaded = _policy(run.get("policy", data["policy"]), ctx)
        approve = bool(data.get("approve"))
        if _run(number, run, loaded, ctx, out, settings, guard_settings, tmp, approve, audit):
            break
    return out


def _run(number: int, run: Mapping[str, Any], loaded: LoadedPolicy, ctx: _Context, out: Outcome,
         settings: ExecutorSettings, guard_settings: GuardSettings | None, tmp: Path,
         approve: bool, audit: Path | None = None) -> bool:
    """One run of a scenario; True when a call was denied (the scenario stops there)."""
    work = str(ctx.root / "work")
    executors = build_executors(loaded.policy, working_dir=work, settings=settings,
                                resolver=resolver)
    # ``approve: true`` stands for a human who says yes to what the preset sends for approval.
    handler = (lambda call, decision: True) if approve else None
    # the guards as settings (the policy's when None), so a recorded run can be replayed
    with Kernel(loaded, working_dir=work, guards=guard_settings,
                guard_state=str(tmp / "guard-state.db"), approval_handler=handler,
                audit=audit) as kernel:
        for key, executor in executors.items():
            kernel.register_executor(key, executor)
        for index, call in enumerate(_steps(run, ctx), start=1):
            try:
                result = kernel.execute(call)
            except Denied as denied:
                out.blocked = True
                out.reasons = [r.id for r in denied.decision.reasons]
                out.checks = [r.check for r in denied.decision.reasons]
                out.where = f"run {number} step {index} ({call['tool_class']}.{call['action']})"
                return True
            except CallgateError as exc:
                out.statuses.append("error")
                out.errors.append(f"run {number} step {index}: {exc}")
                continue
            out.statuses.append(result.status)
            if result.status != "ok":
                out.errors.append(f"run {number} step {index}: {result.error}")
    return False


@contextmanager
def local_server() -> Iterator[LocalServer]:
    """A started ``LocalServer``."""
    with LocalServer() as server:
        yield server


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """Block rate on attacks, false-block rate on benign work, and the mechanism per story."""
    attacks = [o for o in outcomes if o.kind == "attack"]
    benign = [o for o in outcomes if o.kind == "benign"]
    blocked = sum(o.blocked for o in attacks)
    false_blocks = sum(o.blocked for o in benign)
    return {
        "attacks": len(attacks), "attacks_blocked": blocked,
        "block_rate": blocked / len(attacks) if attacks else 0.0,
        "benign": len(benign), "benign_blocked": false_blocks,
        "false_block_rate": false_blocks / len(benign) if benign else 0.0,
        "stories": [{"name": o.name, "kind": o.kind, "blocked": o.blocked,
                     "mechanism": o.mechanism, "reasons": o.reasons, "checks": o.checks,
                     "where": o.where, "as_expected": o.as_expected, "errors": o.errors}
                    for o in outcomes],
    }


def dumps(data: Any) -> str:
    """Stable JSON text for reports."""
    return json.dumps(data, indent=2, sort_keys=True)


__all__ = ["LocalServer", "Outcome", "local_server", "run_scenario", "scenario_files", "summary"]
