"""One Claude Code hook event in, its answer out: the translation over the public kernel API.

``HookService.answer`` takes the raw bytes Claude Code wrote on the hook's stdin and returns what
the hook prints and its exit code, in the contract of the event:

- ``PreToolUse``: a ``hookSpecificOutput`` with ``permissionDecision`` ``allow`` / ``deny`` /
  ``ask`` (``defer`` for allowed calls with ``defer_allowed``), exit 0; a payload that cannot be
  decided is a deny, and an internal error a deny with exit 2.
- ``PostToolUse`` / ``PostToolUseFailure``: the result is reported to the kernel (status, a
  bounded output observation, taint by source); nothing printed.
- ``UserPromptSubmit``: the prompt is a ``user_prompt`` event of ``user-provided`` content.
- ``Stop`` / ``SubagentStop``: open obligations block once (``decision: block`` with what is
  still owed); with ``stop_hook_active`` the stop goes ahead.
- ``SessionStart`` opens the session's run; ``SessionEnd`` ends it and prints nothing.

Every decision is the kernel's: this module holds no policy of its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from callgate._errors import AuditError, CallgateError
from callgate._jsonlimits import MAX_JSON_DEPTH as MAX_DEPTH
from callgate._jsonlimits import nesting_depth
from callgate.audit import AuditLog, is_store_url, open_store
from callgate.audit._keys import display
from callgate.integrations._refusal import reason_line
from callgate.integrations.claude_code._sessions import SessionRow, SessionStore, StateError
from callgate.integrations.claude_code._tools import to_call
from callgate.kernel import Kernel
from callgate.policy import LoadedPolicy, parse_policy

log = logging.getLogger("callgate.claude_code")

__all__ = ["EVENTS", "MAX_PAYLOAD_BYTES", "Answer", "HookService", "http_answer"]

#: The hook events callgate answers.
EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "Stop",
          "SubagentStop", "SessionStart", "SessionEnd")
#: A payload longer than this is refused unread.
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
#: Characters of a tool's output kept as its observation.
OUTPUT_BOUND = 8192
#: Seconds to wait for a PostgreSQL store to accept a connection (below the hook's deadline).
STORE_TIMEOUT_S = 5.0
#: The run that records what came in attached to no session (unreadable payloads).
HOOK_RUN = "claude-code-hook"


@dataclass(frozen=True, slots=True)
class Answer:
    """What the hook prints on stdout and stderr, and its exit code."""

    stdout: str = ""
    stderr: str = ""
    exit: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"stdout": self.stdout, "stderr": self.stderr, "exit": self.exit}


def pre_tool_answer(decision: str, reason: str, *, exit_code: int = 0) -> Answer:
    """The PreToolUse answer for a permission decision."""
    body = {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                   "permissionDecision": decision,
                                   "permissionDecisionReason": reason}}
    return Answer(json.dumps(body), reason if exit_code else "", exit_code)


@dataclass(slots=True)
class _Live:
    row: SessionRow
    kernel: Kernel


class HookService:
    """Answers hook events for one state directory; one instance per process, thread-safe.

    ``store`` is where the audit log goes: a PostgreSQL URL (``postgresql://…``), or None for
    the state directory's ``audit.db``. ``answer`` takes, besides the payload, ``policy`` (the
    file new sessions start under), ``project`` (the kernel's working directory; ``None``: the
    session's ``cwd`` from its first event) and ``defer_allowed`` (leave allowed calls to
    Claude Code's own permission prompts).
    """

    def __init__(self, state_dir: str | os.PathLike[str], *, store: str | None = None) -> None:
        self.state_dir = Path(state_dir)
        self._store = SessionStore(self.state_dir)
        if store is not None and not is_store_url(store):
            raise CallgateError("the hook's audit store must be a postgresql:// URL")
        self._audit_path: str | Path = store if store is not None else self.state_dir / "audit.db"
        self._audit: AuditLog | None = None
        self._audit_failed = float("-inf")
        self._live: dict[str, _Live] = {}
        self._policies: dict[tuple[str, int, int], str] = {}
        self._parsed: dict[str, LoadedPolicy] = {}
        self._lock = threading.Lock()

    @property
    def audit_where(self) -> str:
        """Where the audit log is, fit to print (a URL without its password)."""
        if isinstance(self._audit_path, Path):
            return display(self._audit_path)
        from callgate.audit._postgres import redact

        return redact(self._audit_path)

    # -- the entry point --------------------------------------------------------------------

    def answer(self, payload: bytes, *, policy: str, project: str | None = None,
               defer_allowed: bool = False, oversized: int | None = None,
               namespace: str | None = None) -> Answer:
        """The answer to one hook event (``payload``: the bytes of the hook's stdin).

        ``namespace`` keeps sessions apart by who sent them (the sidecar's key name): the same
        ``session_id`` under two namespaces is two sessions.
        """
        with self._lock:
            event = "unknown"  # until the payload names one: answered in PreToolUse's contract
            try:
                if oversized is not None:
                    raise _BadInputError(f"the hook payload is {oversized} bytes, over the "
                                         f"limit of {MAX_PAYLOAD_BYTES}")
                data = _load(payload)
                named = data.get("hook_event_name")
                event = named if named in EVENTS else event
                _check(data)
                if namespace is not None and isinstance(data.get("session_id"), str):
                    data = {**data, "session_id": f"{namespace}/{data['session_id']}"}
                return self._dispatch(event, data, policy, project, defer_allowed)
            except _BadInputError as exc:
                self._note_unattributed("bad-hook-input", {"event": event, "error": str(exc)})
                return _refusal(event, f"callgate could not read this hook event: {exc}",
                                exit_code=0)
            except StateError as exc:
                return _refusal(event, f"callgate: {exc}", exit_code=2)
            except Exception as exc:
                log.exception("claude-code hook failed")
                self._note_unattributed("hook-error", {"event": event, "error": repr(exc)})
                return _refusal(event, f"callgate failed internally ({exc!r}); the call is "
                                       f"refused", exit_code=2)

    def close(self) -> None:
        """Let go of the stores; the sessions stay open (they go on from their rows)."""
        with self._lock:
            self._live.clear()
            if self._audit is not None:
                self._audit.close()
            self._store.close()

    # -- events -----------------------------------------------------------------------------

    def _dispatch(self, event: str, data: dict[str, Any], policy: str, project: str | None,
                  defer_allowed: bool) -> Answer:
        live = self._session(data, policy, project)
        if event == "PreToolUse":
            answer = self._pre_tool(live, data, defer_allowed)
        elif event in ("PostToolUse", "PostToolUseFailure"):
            answer = self._post_tool(live, data, failed=event == "PostToolUseFailure")
        elif event == "UserPromptSubmit":
            prompt = _field(data, "prompt", str)
            live.kernel.note("user_prompt", {"prompt": prompt}, output=prompt,
                             taint=("user-provided",))
            answer = Answer()
        elif event in ("Stop", "SubagentStop"):
            answer = self._stop(live, data)
        elif event == "SessionStart":
            answer = Answer()
        else:  # SessionEnd: the run ends (its open obligations are recorded as violations)
            for v in live.kernel.end_run():
                log.info("session %s ended with %s open", live.row.session_id, v.statement)
            live.row.ended = True
            answer = Answer()
        self._save(live)
        if event == "SessionEnd":
            self._live.pop(live.row.session_id, None)
        return answer

    def _pre_tool(self, live: _Live, data: dict[str, Any], defer_allowed: bool) -> Answer:
        tool = _field(data, "tool_name", str)
        tool_input = _field(data, "tool_input", dict)
        use_id = _field(data, "tool_use_id", str, required=False)
        mapped = to_call(tool, tool_input, live.row.working_dir)
        if mapped.call is None:
            raise _BadInputError(mapped.problem or "the call cannot be mapped")
        start = live.kernel.trace_length
        decision = live.kernel.check(mapped.call)
        agent = data.get("agent_id")
        if isinstance(agent, str) and agent:
            live.kernel.note("subagent_call", {"agent_id": agent, "agent_type": str(
                data.get("agent_type", "")), "call_id": decision.call_id, "tool": tool})
            live.row.agents.setdefault(agent, []).extend(
                range(start + 1, live.kernel.trace_length + 1))
        if decision.verdict == "allow" and use_id and decision.call_id:
            live.row.pending[use_id] = decision.call_id
        reason = reason_line(decision)
        if decision.verdict == "allow":
            return pre_tool_answer("defer" if defer_allowed else "allow", reason)
        if decision.verdict == "require-approval":
            return pre_tool_answer("ask", reason)
        return pre_tool_answer("deny", reason)

    def _post_tool(self, live: _Live, data: dict[str, Any], *, failed: bool) -> Answer:
        use_id = _field(data, "tool_use_id", str, required=False)
        call_id = live.row.pending.pop(use_id, None) if use_id else None
        if call_id is None:
            live.kernel.note("unmatched_result", {"tool": str(data.get("tool_name", "")),
                                                  "tool_use_id": str(use_id)})
            return Answer()
        response = data.get("error") if failed else data.get("tool_response")
        output = observation(response)
        duration = data.get("duration_ms")
        taint = source_taint(data, live.row.working_dir)
        try:
            live.kernel.report(call_id, status="error" if failed else "ok", output=output,
                               error=output if failed else None, taint=taint,
                               duration_ms=float(duration) if isinstance(
                                   duration, int | float) else 0.0)
        except CallgateError:  # forgotten by the kernel (over its window): noted, not fatal
            live.kernel.note("unmatched_result", {"call_id": call_id})
        return Answer()

    def _stop(self, live: _Live, data: dict[str, Any]) -> Answer:
        if data.get("stop_hook_active") is True:
            return Answer()  # the session already continued once for a stop hook: never loop
        owed = [v for v in live.kernel.open_obligations() if v.enforce != "alert"]
        agent = data.get("agent_id") if data.get("hook_event_name") == "SubagentStop" else None
        if isinstance(agent, str):
            mine = set(live.row.agents.get(agent, ()))
            owed = [v for v in owed if mine.intersection(v.events)]
        if not owed:
            return Answer()
        what = "; ".join(f"{v.statement}: {v.message}" for v in owed)
        body = {"decision": "block",
                "reason": f"callgate: obligations are still open before stopping: {what}"}
        return Answer(json.dumps(body))

    # -- sessions ---------------------------------------------------------------------------

    def _session(self, data: dict[str, Any], policy: str, project: str | None) -> _Live:
        session_id = _field(data, "session_id", str)
        if not 0 < len(session_id) <= 256 or not session_id.isprintable():
            raise _BadInputError("session_id is not a printable string of 1 to 256 characters")
        version = self._store.version(session_id)
        live = self._live.get(session_id)
        if live is not None and live.row.version == version:
            return live
        row = self._store.load(session_id)
        if row is not None and not row.ended:
            kernel = Kernel(self._policy_of(row.policy_sha256),
                            audit=self._audit_store(), working_dir=row.working_dir,
                            run_id=row.run_id, guard_state=str(self.state_dir / "guards.db"),
                            resume=row.snapshot)
            live = self._live[session_id] = _Live(row, kernel)
            return live
        cwd = data.get("cwd")
        working_dir = project or (cwd if isinstance(cwd, str) and os.path.isabs(cwd) else None)
        if working_dir is None:
            raise _BadInputError("cwd is not an absolute path and no project directory is set")
        sha = self._policy(policy)
        kernel = Kernel(self._policy_of(sha), audit=self._audit_store(),
                        working_dir=working_dir, guard_state=str(self.state_dir / "guards.db"))
        kernel.note("session_start", {"session_id": session_id,
                                      "source": str(data.get("source", ""))})
        fresh = SessionRow(session_id, kernel.run_id, sha, kernel.working_dir)
        if row is not None:  # a session id used again after its end: a new run, same id
            fresh.version = row.version
        live = self._live[session_id] = _Live(fresh, kernel)
        return live

    def _save(self, live: _Live) -> None:
        live.row.snapshot = None if live.row.ended else live.kernel.suspend()
        self._store.save(live.row)

    def _policy(self, path: str) -> str:
        """The sha256 of the policy file, read again only when it changed; parsed once."""
        try:
            st = os.stat(path)
            key = (path, st.st_mtime_ns, st.st_size)
            cached = self._policies.get(key)
            if cached is not None:
                return cached
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise CallgateError(f"the policy {path} cannot be read: {exc}") from exc
        text = raw.decode("utf-8")
        sha = hashlib.sha256(raw).hexdigest()
        if sha not in self._parsed:  # fails here, with file:line:col, if it is bad
            self._parsed[sha] = parse_policy(text, source=path)
        self._store.keep_policy(sha, path, text)
        self._policies = {key: sha}
        return sha

    def _policy_of(self, sha256: str) -> LoadedPolicy:
        """The parsed policy a session runs under (from the store when this process has not
        read it yet)."""
        found = self._parsed.get(sha256)
        if found is None:
            text = self._store.policy_text(sha256)
            found = self._parsed[sha256] = parse_policy(text, source=sha256[:12])
        return found

    def _audit_store(self) -> AuditLog:
        """The audit log, opened on first use. A PostgreSQL store that cannot be opened is
        not tried again within a second (the failed event's own note would wait twice)."""
        if self._audit is None:
            if isinstance(self._audit_path, Path):
                self._audit = open_store(self._audit_path)
                return self._audit
            if time.monotonic() - self._audit_failed < 1.0:
                raise AuditError(f"the audit store {self.audit_where} could not be opened")
            try:
                self._audit = open_store(self._audit_path, timeout_s=STORE_TIMEOUT_S)
            except Exception:
                self._audit_failed = time.monotonic()
                raise
        return self._audit

    def _note_unattributed(self, kind: str, payload: Mapping[str, Any]) -> None:
        try:
            store = self._audit_store()
            if HOOK_RUN not in store.run_ids():
                store.start_run(HOOK_RUN, principal="claude-code-hook", policy_name="",
                                manifest_hash="", config={})
            store.record_system(HOOK_RUN, kind, payload)
        except Exception:
            log.exception("could not record %s", kind)


class _BadInputError(CallgateError):
    """The payload is not an event callgate can act on."""


def _load(payload: bytes) -> dict[str, Any]:
    """The payload as a JSON object (UTF-8, nesting bounded by the interpreter's recursion)."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadInputError(f"the payload is not UTF-8 (byte {exc.start})") from exc
    try:
        data = json.loads(text)
    except RecursionError:
        raise _BadInputError(f"the payload nests deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise _BadInputError(f"the payload is not JSON: {exc.msg} at line {exc.lineno} column "
                             f"{exc.colno}") from exc
    if not isinstance(data, dict):
        raise _BadInputError("the payload is not a JSON object")
    return data


def _check(data: dict[str, Any]) -> None:
    """Refuse a payload nested too deep or naming an event callgate does not answer."""
    if nesting_depth(data, MAX_DEPTH) > MAX_DEPTH:
        raise _BadInputError(f"the payload nests deeper than {MAX_DEPTH} levels")
    event = data.get("hook_event_name")
    if event not in EVENTS:
        raise _BadInputError(f"unknown hook event {event!r} (callgate answers {', '.join(EVENTS)})")


def _field(data: Mapping[str, Any], name: str, kind: type, *, required: bool = True) -> Any:
    value = data.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, kind):
        raise _BadInputError(f"{name} is missing or not a {kind.__name__}")
    return value


def _refusal(event: str, reason: str, *, exit_code: int) -> Answer:
    """What a failure means for ``event``: a deny for a tool call, a block for a prompt."""
    if event == "PreToolUse":
        return pre_tool_answer("deny", reason, exit_code=exit_code)
    if event == "unknown":  # whatever it was, it is refused: a deny, and exit code 2
        return pre_tool_answer("deny", reason, exit_code=2)
    if event in ("Stop", "SubagentStop", "SessionEnd", "SessionStart"):
        return Answer(stderr=reason, exit=1)  # these cannot be blocked usefully: say it
    return Answer(stderr=reason, exit=2)


def http_answer(payload: bytes, answer: Answer | None, failure: str = "callgate refused"
                ) -> dict[str, Any]:
    """The body of a 200 answer to Claude Code's ``type: "http"`` hook.

    Claude Code reads an http hook's decision only from a 2xx JSON body (any other status lets
    the call go ahead), so what the command hook says with its exit code is said here in the
    body: exit code 2 is a deny for a tool call and a block for any other event. ``answer`` is
    None when the event could not be answered at all (``failure`` says why): a refusal.
    """
    event = _event_of(payload)
    if answer is None:
        answer = _refusal(event, failure, exit_code=2)
    if answer.stdout.strip():
        body: dict[str, Any] = json.loads(answer.stdout)
        return body
    if answer.exit == 2:
        reason = answer.stderr or failure
        if event in ("PreToolUse", "unknown"):
            return dict(json.loads(pre_tool_answer("deny", reason).stdout))
        return {"decision": "block", "reason": reason}
    if answer.exit != 0 and answer.stderr:
        return {"systemMessage": answer.stderr}
    return {}


def _event_of(payload: bytes) -> str:
    """The hook event a payload names, or ``unknown`` (answered in PreToolUse's contract)."""
    try:
        named = _load(payload).get("hook_event_name")
    except Exception:  # anything unreadable is unknown
        return "unknown"
    return named if named in EVENTS else "unknown"


def observation(response: Any) -> str:
    """What a tool gave, as the text the kernel observes (stdout and stderr of a shell
    result, else the JSON of the response), bounded."""
    if response is None:
        return ""
    if isinstance(response, Mapping):
        stdout, stderr = response.get("stdout"), response.get("stderr")
        if isinstance(stdout, str) or isinstance(stderr, str):
            response = "\n".join(s for s in (stdout, stderr) if isinstance(s, str) and s)
    text = response if isinstance(response, str) else json.dumps(response, default=str)
    return text[:OUTPUT_BOUND]


def source_taint(data: Mapping[str, Any], working_dir: str) -> tuple[str, ...]:
    """Taint the host knows of beyond the call's class: a file read outside the project."""
    if data.get("tool_name") in ("Read", "NotebookRead"):
        tool_input = data.get("tool_input")
        path = tool_input.get("file_path") if isinstance(tool_input, Mapping) else None
        if isinstance(path, str):
            full = os.path.realpath(os.path.join(working_dir, path))
            if os.path.commonpath([full, working_dir]) != working_dir:
                return ("outside-project",)
    return ()
