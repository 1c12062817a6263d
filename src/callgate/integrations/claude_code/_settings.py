"""Install, remove and check the hook in Claude Code's settings.

``install`` merges callgate's command hooks into a ``settings.json`` (the project's, or the
user's), keeping every other key and hook as it was; an entry is callgate's when its command is a
``callgate`` program run with ``hook claude-code``. Installing twice writes nothing the second
time; ``uninstall`` removes exactly those entries (and hook lists left empty by that).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from callgate._errors import CallgateError

__all__ = ["HOOK_TIMEOUT_S", "MIN_CLAUDE", "Report", "claude_version_warning", "doctor",
           "hook_command", "install", "uninstall"]

#: The Claude Code version from which ``"onFailure": "block"`` is honoured.
MIN_CLAUDE = (2, 1, 295)
#: The hook's timeout in Claude Code (seconds): above the hook's own deadline of 20 s.
HOOK_TIMEOUT_S = 30
#: Events with a tool matcher, and the others.
TOOL_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
OTHER_EVENTS = ("UserPromptSubmit", "Stop", "SubagentStop", "SessionStart", "SessionEnd")


@dataclass(slots=True)
class Report:
    """What a command did or found, line by line; ``ok`` is False when something is wrong."""

    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ok: bool = True

    def fail(self, line: str) -> None:
        self.ok = False
        self.lines.append(f"FAIL {line}")


def _callgate_program() -> str:
    found = shutil.which("callgate") or os.path.join(os.path.dirname(sys.executable), "callgate")
    return os.path.realpath(found) if os.path.exists(found) else found


def hook_command(policy: Path, state: Path, project: Path | None, store: str | None = None
                 ) -> dict[str, Any]:
    """The command hook entry (exec form: no shell between Claude Code and callgate);
    ``store``: the PostgreSQL URL of the audit log, when it is not the state directory's."""
    args = ["hook", "claude-code", "--policy", str(policy), "--state", str(state)]
    if project is not None:
        args += ["--dir", str(project)]
    if store is not None:
        args += ["--store", store]
    return {"type": "command", "command": _callgate_program(), "args": args,
            "timeout": HOOK_TIMEOUT_S, "onFailure": "block"}


def _is_ours(hook: Any) -> bool:
    if not isinstance(hook, dict):
        return False
    args = hook.get("args")
    command = hook.get("command")
    return (isinstance(command, str) and os.path.basename(command) == "callgate"
            and isinstance(args, list) and args[:2] == ["hook", "claude-code"])


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise CallgateError(f"{path}: not UTF-8 (byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise CallgateError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise CallgateError(f"{path}: the settings are not a JSON object")
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict) or not all(isinstance(v, list) for v in hooks.values()):
        raise CallgateError(f"{path}: \"hooks\" is not an object of lists")
    return data


def _without_ours(data: dict[str, Any]) -> dict[str, Any]:
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        return data
    kept: dict[str, Any] = {}
    for event, groups in hooks.items():
        left = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                inner = [h for h in group["hooks"] if not _is_ours(h)]
                if inner:
                    left.append({**group, "hooks": inner})
                continue
            left.append(group)
        if left:
            kept[event] = left
    out = {k: v for k, v in data.items() if k != "hooks"}
    if kept:
        out["hooks"] = kept
    return out


def _write(path: Path, data: dict[str, Any]) -> bool:
    text = json.dumps(data, indent=2) + "\n"
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True


def _policy_copy(preset: str) -> str:
    from callgate.policy import preset_names

    if preset not in preset_names():
        raise CallgateError(f"no preset {preset!r} (there are {', '.join(preset_names())})")
    text = resources.files("callgate.policy.presets").joinpath(f"{preset}.yaml").read_text(
        encoding="utf-8")
    return (f"# Installed by `callgate init claude-code` from the {preset} preset.\n"
            f"# Edit freely: a new Claude Code session starts under the file as it then is;\n"
            f"# `callgate doctor claude-code` checks it. Every line is explained below.\n"
            + text)


def _check_store(store: str, report: Report) -> None:
    """Refuse a store that is not a PostgreSQL URL; warn when the URL holds a password (it
    would sit in the settings file and in the hook's process title)."""
    from callgate.audit import is_store_url

    if not is_store_url(store):
        raise CallgateError("--store must be a postgresql:// URL")
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError as exc:
        raise CallgateError("a PostgreSQL store needs psycopg: install callgate[postgres]"
                            ) from exc
    try:
        password = conninfo_to_dict(store).get("password")
    except Exception as exc:
        raise CallgateError("--store is not a PostgreSQL connection URL") from exc
    if password:
        report.warnings.append(
            "WARNING: the store URL holds a password, now written in the settings file; keep "
            "it in ~/.pgpass (or PGPASSFILE) instead, or set CALLGATE_STORE in the environment "
            "Claude Code runs in and pass no --store.")


def install(settings: Path, state: Path, project: Path | None, *, policy: Path | None,
            preset: str = "coding-agent", store: str | None = None) -> Report:
    """Register the hooks in ``settings``; write the policy copy unless ``policy`` is given.
    ``store`` (a PostgreSQL URL) goes into the hook's command as ``--store``."""
    report = Report()
    if store is not None:
        _check_store(store, report)
    data = _without_ours(_read(settings))
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    ignore = state / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# callgate's state: keep the policy, ignore the rest\n*\n"
                          "!.gitignore\n!policy.yaml\n", encoding="utf-8")
    if policy is None:
        policy = state / "policy.yaml"
        if policy.exists():
            report.lines.append(f"kept the policy {policy}")
        else:
            policy.write_text(_policy_copy(preset), encoding="utf-8")
            report.lines.append(f"wrote the policy {policy} (a copy of the {preset} preset)")
    else:
        from callgate.policy import load_policy

        policy = policy.resolve()
        load_policy(policy)  # a policy that does not load is refused before anything is written
    entry = hook_command(policy, state, project, store)
    hooks = data.setdefault("hooks", {})
    for event in TOOL_EVENTS:
        hooks.setdefault(event, []).append({"matcher": ".*", "hooks": [entry]})
    for event in OTHER_EVENTS:
        hooks.setdefault(event, []).append({"hooks": [entry]})
    changed = _write(settings, data)
    report.lines.append(f"{'registered' if changed else 'already registered'} the hook for "
                        f"{len(TOOL_EVENTS) + len(OTHER_EVENTS)} events in {settings}")
    if store is not None:
        from callgate.audit._postgres import redact

        report.lines.append(f"the audit log goes to {redact(store)}")
    report.warnings.extend(claude_version_warning())
    return report


def uninstall(settings: Path) -> Report:
    """Remove callgate's hook entries from ``settings``; nothing else changes."""
    report = Report()
    if not settings.exists():
        report.lines.append(f"{settings} does not exist: nothing to remove")
        return report
    data = _read(settings)
    changed = _write(settings, _without_ours(data))
    report.lines.append(f"{'removed' if changed else 'found no'} callgate hooks "
                        f"{'from' if changed else 'in'} {settings}")
    return report


def claude_version_warning() -> list[str]:
    """Loud warnings when ``claude`` is missing, unreadable or older than ``MIN_CLAUDE``."""
    need = ".".join(map(str, MIN_CLAUDE))
    risk = (f"Claude Code before {need} ignores \"onFailure\": \"block\" and lets a call run "
            f"when the hook crashes or times out (fail open)")
    program = shutil.which("claude")
    if program is None:
        return [f"WARNING: no `claude` on PATH; make sure the Claude Code you run is {need} or "
                f"later. {risk}."]
    try:
        out = subprocess.run([program, "--version"], capture_output=True, text=True,
                             timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return [f"WARNING: `claude --version` failed ({exc}). {risk}."]
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    if found is None:
        return [f"WARNING: cannot read the Claude Code version from {out.strip()!r}. {risk}."]
    version = tuple(int(x) for x in found.groups())
    if version < MIN_CLAUDE:
        return [f"WARNING: Claude Code {found.group(0)} is older than {need}. {risk}; "
                f"upgrade it."]
    return []


def doctor(settings: Path) -> Report:
    """Check the registration, the policy, and two self-test decisions through the hook."""
    report = Report()
    try:
        data = _read(settings)
    except CallgateError as exc:
        report.fail(str(exc))
        return report
    hooks = data.get("hooks", {})
    entry: dict[str, Any] | None = None
    for event in (*TOOL_EVENTS, *OTHER_EVENTS):
        found = [h for g in hooks.get(event, []) if isinstance(g, dict)
                 for h in g.get("hooks", []) if _is_ours(h)]
        matchers = [g.get("matcher") for g in hooks.get(event, [])
                    if isinstance(g, dict) and any(_is_ours(h) for h in g.get("hooks", []))]
        if not found:
            report.fail(f"{event}: no callgate hook registered in {settings}")
            continue
        hook = found[0]
        entry = entry or hook
        if event in TOOL_EVENTS and ".*" not in matchers:
            report.fail(f"{event}: the callgate hook's matcher is not \".*\" (some tools pass)")
        elif hook.get("onFailure") != "block":
            report.fail(f"{event}: \"onFailure\" is not \"block\" (a crash would let calls run)")
        elif not os.access(str(hook.get("command")), os.X_OK):
            report.fail(f"{event}: {hook.get('command')} is not an executable program")
        else:
            report.lines.append(f"ok   {event}: registered, onFailure block, "
                                f"timeout {hook.get('timeout')}s")
    report.warnings.extend(claude_version_warning())
    if entry is None:
        return report
    args = [str(a) for a in entry["args"]]
    policy = args[args.index("--policy") + 1] if "--policy" in args else None
    try:
        from callgate.policy import load_policy

        if policy is None:
            raise CallgateError("the hook names no --policy")
        load_policy(policy)
        report.lines.append(f"ok   the policy {policy} loads")
    except CallgateError as exc:
        report.fail(f"the policy does not load: {exc}")
        return report
    _self_test(report, [str(entry["command"]), *args])
    return report


def _self_test(report: Report, command: list[str]) -> None:
    session = f"callgate-doctor-{uuid.uuid4().hex[:12]}"
    here = os.getcwd()
    cases = [("allow", {"tool_name": "Glob", "tool_input": {"pattern": "*.md"}}),
             ("deny", {"tool_name": "Read",
                       "tool_input": {"file_path": os.path.expanduser("~/.ssh/id_rsa")}})]
    for i, (want, event) in enumerate(cases):
        payload = {"session_id": session, "transcript_path": "", "cwd": here,
                   "hook_event_name": "PreToolUse", "tool_use_id": f"doctor-{i}", **event}
        got = _run_hook(command, payload)
        decision = got.get("hookSpecificOutput", {}).get("permissionDecision") if isinstance(
            got, dict) else None
        line = f"self-test {event['tool_name']} {json.dumps(event['tool_input'])}: {decision}"
        if decision == want:
            report.lines.append(f"ok   {line}")
        else:
            report.fail(f"{line} (expected {want})")
    _run_hook(command, {"session_id": session, "transcript_path": "", "cwd": here,
                        "hook_event_name": "SessionEnd", "reason": "other"})


def _run_hook(command: list[str], payload: dict[str, Any]) -> Any:
    done = subprocess.run(command, input=json.dumps(payload), capture_output=True, text=True,
                          timeout=HOOK_TIMEOUT_S, check=False)
    try:
        return json.loads(done.stdout) if done.stdout.strip() else {}
    except json.JSONDecodeError:
        return {"error": done.stdout + done.stderr}
