"""Suspend a run and resume it in another process: the kernel's run state as bytes.

A short-lived host (a Claude Code hook, a restarted sidecar) keeps a run going across processes
without replaying it: ``snapshot`` captures what the run has accumulated (call counter, run state
and quarantine, taint, rate-limit windows, tokens, tool counters, the monitors' state, the value
flow index, the guards' per-run flags) and ``restore`` puts it into a kernel freshly built from
the same policy. The compiled parts (statements, patterns, rules) are not in the snapshot: they
come from the policy, which must have the same manifest hash.

The bytes are a pickle of plain values (the state objects written out field by field), read back
by an unpickler that accepts only the plain containers, so a snapshot cannot name any code, and
reads the same whether the modules are compiled or not. They are still state a
host must keep where the agent cannot write, and authenticate (the Claude Code session store
signs them with a key of its own).
"""

from __future__ import annotations

import collections
import io
import pickle
from typing import TYPE_CHECKING, Any

from callgate._errors import CallgateError
from callgate._model import TaintLabel, ToolCall
from callgate.kernel._capabilities import tokens_from_state, tokens_state
from callgate.kernel._runstate import Counters, Quarantine

if TYPE_CHECKING:
    from callgate.kernel._kernel import Kernel

__all__ = ["FORMAT", "restore", "snapshot"]

#: Version of the snapshot layout; a snapshot of another version is refused.
FORMAT = 3
#: Guard attributes of these types are per-run flags and counters, kept in a snapshot.
_SCALARS = (bool, int, float, str, type(None))


def _allowed() -> dict[tuple[str, str], Any]:
    # Plain containers only: every state object is written as plain values (below), so a
    # snapshot names no class of callgate's, and reads the same on the pure and the compiled
    # build (whose classes pickle differently).
    found: dict[tuple[str, str], Any] = {
        ("collections", c.__name__): c
        for c in (collections.OrderedDict, collections.Counter, collections.deque)}
    found["builtins", "set"] = set
    found["builtins", "frozenset"] = frozenset
    return found


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self._classes = _allowed()

    def find_class(self, module: str, name: str) -> Any:
        found = self._classes.get((module, name))
        if found is None:
            raise CallgateError(f"a run snapshot may not name {module}.{name}")
        return found


def _quarantine_state(quarantine: Quarantine | None) -> dict[str, Any] | None:
    return None if quarantine is None else quarantine.as_payload()


def _quarantine_from(state: dict[str, Any] | None) -> Quarantine | None:
    if state is None:
        return None
    return Quarantine(trigger=str(state["trigger"]), rule_id=str(state["rule_id"]),
                      reason=str(state["reason"]), counters=dict(state["counters"]),
                      matched=tuple(state["matched"]), at=float(state["at"]))


def _monitor_state(monitor: Any) -> Any:
    """The mutable part of one statement monitor (compiled patterns are left out)."""
    from callgate.temporal._body import AlwaysMonitor
    from callgate.temporal._forms import OpenTriggers
    from callgate.temporal._patterns import CompiledPattern

    if monitor is None:
        return None
    if isinstance(monitor, AlwaysMonitor):
        return {"last": list(monitor._last), "groups": monitor._groups}
    state: dict[str, Any] = {}
    for name in _attributes(monitor):
        value = getattr(monitor, name)
        if isinstance(value, CompiledPattern) or name in ("size", "bound"):
            continue
        if isinstance(value, OpenTriggers):
            state[name] = ("triggers", [(e.env, list(e.seqs)) for e in value.entries.values()])
        else:
            state[name] = value
    return state


def _load_monitor(monitor: Any, state: Any) -> None:
    from callgate.temporal._body import AlwaysMonitor
    from callgate.temporal._forms import OpenTriggers

    if isinstance(monitor, AlwaysMonitor):
        monitor._last[:] = state["last"]  # in place: the compiled operators read this list
        monitor._groups = state["groups"]
        return
    for name, value in state.items():
        current = getattr(monitor, name)
        if isinstance(current, OpenTriggers):
            for env, seqs in value[1]:
                for seq in seqs:
                    current.add(env, seq)
        else:
            setattr(monitor, name, value)


def _attributes(obj: Any) -> list[str]:
    names: list[str] = list(getattr(obj, "__dict__", {}))
    for klass in type(obj).__mro__:
        # a class compiled by mypyc names its attributes in ``__mypyc_attrs__``
        for attrs in (getattr(klass, "__slots__", ()), getattr(klass, "__mypyc_attrs__", ())):
            names.extend(s for s in attrs if s not in names)
    return [n for n in names if hasattr(obj, n)]


def snapshot(kernel: Kernel) -> bytes:
    """The run's accumulated state, as bytes ``restore`` reads back."""
    behavior = kernel._behavior
    monitor = behavior._monitor
    abstractor = behavior._abstractor
    state = {
        "format": FORMAT,
        "run_id": kernel.run_id,
        "manifest_hash": kernel.manifest_hash,
        "seq": kernel._seq,
        "counters": kernel._state.counters.snapshot(),
        "quarantine": _quarantine_state(kernel._state.quarantine),
        "taint": [label.model_dump() for label in kernel._taint.labels],
        "limiter": {k: list(v) for k, v in kernel._limiter._hits.items()},
        "tokens": tokens_state(kernel._tokens._tokens),
        "invoked": dict(kernel._invoked),
        "completed": dict(kernel._completed),
        "checked": [call.model_dump() for call in kernel._checked.values()],
        "event_of": dict(kernel._event_of),
        "behavior": {
            "next": behavior._next,
            "length": monitor._length,
            "broken": dict(monitor._broken),
            "monitors": [_monitor_state(m) for m in monitor._monitors],
            "flow": None if abstractor is None else (abstractor._index.state(), abstractor._seq),
        },
        "guards": [{n: getattr(g, n) for n in _attributes(g)
                    if isinstance(getattr(g, n), _SCALARS)} for g in kernel._guards],
    }
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def restore(kernel: Kernel, data: bytes) -> None:
    """Put a snapshot into ``kernel`` (fresh, same run id and manifest). Raises
    ``CallgateError`` when the snapshot is unreadable or belongs to another run or policy."""
    try:
        state = _Unpickler(data).load()
    except CallgateError:
        raise
    except Exception as exc:
        raise CallgateError(f"the run snapshot is unreadable: {exc}") from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CallgateError("the run snapshot has an unknown format")
    if state["run_id"] != kernel.run_id:
        raise CallgateError(f"the run snapshot belongs to run {state['run_id']!r}, "
                            f"not {kernel.run_id!r}")
    if state["manifest_hash"] != kernel.manifest_hash:
        raise CallgateError("the run snapshot was taken under another policy (its manifest "
                            "hash differs); the run cannot go on under this one")
    behavior, monitor = kernel._behavior, kernel._behavior._monitor
    saved = state["behavior"]
    if len(saved["monitors"]) != len(monitor._monitors) or len(state["guards"]) != len(
            kernel._guards):
        raise CallgateError("the run snapshot does not match the policy's statements")
    kernel._seq = state["seq"]
    kernel._state.counters = Counters(**state["counters"])
    kernel._state.quarantine = _quarantine_from(state["quarantine"])
    kernel._taint.absorb(TaintLabel(**label) for label in state["taint"])
    kernel._limiter._hits = {
        k: collections.deque(v, maxlen=kernel._grants[k].constraints.max_calls_per_minute)
        for k, v in state["limiter"].items()
        if k < len(kernel._grants) and kernel._grants[k].constraints.max_calls_per_minute}
    kernel._tokens._tokens = tokens_from_state(state["tokens"])
    kernel._invoked = collections.Counter(state["invoked"])
    kernel._completed = collections.Counter(state["completed"])
    for dumped in state["checked"]:
        call = ToolCall.model_validate(dumped)
        kernel._checked[call.id] = call
    kernel._event_of = {str(k): int(v) for k, v in state.get("event_of", {}).items()}
    behavior._next = saved["next"]
    monitor._length = saved["length"]
    monitor._broken = saved["broken"]
    for i, (live, kept) in enumerate(zip(monitor._monitors, saved["monitors"], strict=True)):
        if kept is None:
            monitor._monitors[i] = None
        elif live is not None:
            _load_monitor(live, kept)
    if saved["flow"] is not None and behavior._abstractor is not None:
        from callgate.abstraction._flow import FlowIndex  # present: there is an abstractor

        index, seq = saved["flow"]
        behavior._abstractor._index, behavior._abstractor._seq = FlowIndex.from_state(index), seq
    for guard, flags in zip(kernel._guards, state["guards"], strict=True):
        for name, value in flags.items():
            setattr(guard, name, value)
