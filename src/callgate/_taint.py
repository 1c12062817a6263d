"""Taint tracking: labels attach at boundaries, propagate forward and are never removed.

The run carries the union of every label it has seen. A call's effective taint is its explicit
labels plus the run's: whatever the agent read earlier is in its context when it makes the call.
"""

from __future__ import annotations

from collections.abc import Iterable

from callgate._model import UNTRUSTED_SOURCES, TaintLabel, ToolCall

#: The taint an executor of each tool class puts on its output (the boundary it reads across).
CLASS_OUTPUT_TAINT: dict[str, str] = {
    "http": "web",
    "retrieval": "rag",
    "email": "email",
    "mcp": "tool-output",
}


class TaintTracker:
    """The taint of one run: monotonic, a union of every label seen so far.

    One label is kept per source (the first origin it came from), so the cost of a call does
    not grow with the number of distinct origins a long run has seen.
    """

    __slots__ = ("_labels", "_sources")

    def __init__(self) -> None:
        self._labels: dict[str, TaintLabel] = {}
        self._sources: frozenset[str] = frozenset()

    @property
    def sources(self) -> frozenset[str]:
        """Every taint source the run has seen."""
        return self._sources

    @property
    def labels(self) -> tuple[TaintLabel, ...]:
        return tuple(self._labels.values())

    def absorb(self, labels: Iterable[TaintLabel]) -> None:
        """Add labels to the run. There is no way to remove one."""
        changed = False
        for label in labels:
            if label.source not in self._labels:
                self._labels[label.source] = label
                changed = True
        if changed:
            self._sources = frozenset(self._labels)

    def input_taint(self, call: ToolCall) -> frozenset[str]:
        """The sources a pending call is tainted by: its own labels plus the run's."""
        if not call.taint:
            return self._sources
        return self._sources | call.taint_sources()

    def output_labels(self, call: ToolCall,
                      produced: Iterable[TaintLabel] = ()) -> list[TaintLabel]:
        """Labels for a call's output: its inputs' taint, the boundary's, and ``tool-output``."""
        labels = [
            TaintLabel(source=src, origin=first.origin, propagated_from=call.id)
            for src, first in self._labels.items()
        ]
        labels.extend(call.taint)
        labels.extend(produced)
        boundary = CLASS_OUTPUT_TAINT.get(call.tool_class)
        if boundary is not None:
            labels.append(TaintLabel(source=boundary, origin=_origin_of(call)))
        labels.append(TaintLabel(source="tool-output", origin=call.tool))
        return labels


def is_untrusted(sources: Iterable[str]) -> bool:
    """True when any source is one an attacker may control."""
    return any(src in UNTRUSTED_SOURCES for src in sources)


def _origin_of(call: ToolCall) -> str:
    url = call.parameters.get("url")
    return url if isinstance(url, str) else call.tool
