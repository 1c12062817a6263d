"""The sidecar's metrics in the Prometheus text format (version 0.0.4), without a client
library: decisions by verdict and by deciding check and reason id, the decision latency
histogram, open runs, pending approvals and refused requests."""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Callable

from callgate._model import Decision

__all__ = ["BUCKETS", "Metrics"]

#: Upper bounds (seconds) of the decision latency histogram.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """Counters the routes update; ``render`` writes them out. Thread-safe."""

    def __init__(self, open_runs: Callable[[], int], pending: Callable[[], int]) -> None:
        self._lock = threading.Lock()
        self._verdicts: Counter[str] = Counter()
        self._reasons: Counter[tuple[str, str]] = Counter()
        self._refused: Counter[str] = Counter()
        self._buckets = [0] * (len(BUCKETS) + 1)
        self._sum = 0.0
        self._count = 0
        self._open_runs = open_runs
        self._pending = pending

    def decided(self, decision: Decision, seconds: float) -> None:
        """Count one decision and its latency."""
        first = decision.reasons[0] if decision.reasons else None
        with self._lock:
            self._verdicts[decision.verdict] += 1
            if first is not None:
                self._reasons[(first.check, first.id)] += 1
            self._buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
            self._sum += seconds
            self._count += 1

    def refused(self, status: str) -> None:
        """Count a request refused before any decision (401, 413, 422, ...)."""
        with self._lock:
            self._refused[status] += 1

    def render(self) -> str:
        """The metrics as Prometheus text."""
        with self._lock:
            lines = ["# HELP callgate_decisions_total Decisions by verdict.",
                     "# TYPE callgate_decisions_total counter"]
            lines += [f'callgate_decisions_total{{verdict="{_label(v)}"}} {n}'
                      for v, n in sorted(self._verdicts.items())]
            lines += ["# HELP callgate_decision_reasons_total Decisions by the check and "
                      "reason id that decided them.",
                      "# TYPE callgate_decision_reasons_total counter"]
            lines += [f'callgate_decision_reasons_total{{check="{_label(c)}",'
                      f'reason="{_label(r)}"}} {n}' for (c, r), n in sorted(self._reasons.items())]
            lines += ["# HELP callgate_decision_seconds Time to decide a call, in the sidecar.",
                      "# TYPE callgate_decision_seconds histogram"]
            total = 0
            for bound, n in zip((*BUCKETS, float("inf")), self._buckets, strict=True):
                total += n
                le = "+Inf" if bound == float("inf") else repr(bound)
                lines.append(f'callgate_decision_seconds_bucket{{le="{le}"}} {total}')
            lines += [f"callgate_decision_seconds_sum {self._sum!r}",
                      f"callgate_decision_seconds_count {self._count}",
                      "# HELP callgate_requests_refused_total Requests refused before a "
                      "decision, by HTTP status.",
                      "# TYPE callgate_requests_refused_total counter"]
            lines += [f'callgate_requests_refused_total{{status="{_label(s)}"}} {n}'
                      for s, n in sorted(self._refused.items())]
        lines += ["# HELP callgate_open_runs Runs started and not ended.",
                  "# TYPE callgate_open_runs gauge", f"callgate_open_runs {self._open_runs()}",
                  "# HELP callgate_pending_approvals Approvals waiting for an answer.",
                  "# TYPE callgate_pending_approvals gauge",
                  f"callgate_pending_approvals {self._pending()}"]
        return "\n".join(lines) + "\n"
