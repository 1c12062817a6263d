"""Sending audit spans over OTLP/HTTP with the OpenTelemetry SDK (the ``otel`` extra).

The one module that imports ``opentelemetry``. :func:`send_spans` exports spans built from a log
(``callgate audit export --format otlp``); :class:`OtlpExporter` is a live observer of an
``AuditStore`` (``store.add_observer(exporter)``, ``callgate serve --otlp-endpoint``): it turns
each decision appended into a span and hands it to the SDK's batch processor, whose own thread
does the sending, so a collector that is slow or down never holds up or changes a decision
(spans are dropped when its queue is full). An allowed call's span waits for the call's result
(for at most ``MAX_WAITING`` calls), so live and exported spans are the same.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable

from callgate._errors import AuditError
from callgate.audit._export import RunMeta, SpanData, span_for
from callgate.audit._store import AuditRecord
from callgate.audit._view import CallView

try:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
except ImportError as exc:  # pragma: no cover - the extra is installed in development
    raise AuditError("OpenTelemetry export needs the otel extra: pip install 'callgate[otel]'"
                     ) from exc

log = logging.getLogger("callgate.audit")

#: Where OTLP/HTTP traces go unless told otherwise (a collector on this host).
DEFAULT_ENDPOINT = "http://127.0.0.1:4318/v1/traces"
#: Allowed calls whose span waits for their result; past that the oldest is sent without it.
MAX_WAITING = 1024

_RESOURCE = Resource.create({"service.name": "callgate"})
_SCOPE = InstrumentationScope("callgate")


def to_readable(span: SpanData) -> ReadableSpan:
    """The SDK's span for ``span``: its ids, times and attributes as they are."""
    context = SpanContext(int(span.trace_id, 16), int(span.span_id, 16), is_remote=False,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED))
    status = Status(StatusCode.ERROR, span.error) if span.error else Status(StatusCode.UNSET)
    return ReadableSpan(name=span.name, context=context, resource=_RESOURCE,
                        attributes=dict(span.attributes), kind=SpanKind.INTERNAL,
                        status=status, start_time=span.start_ns, end_time=span.end_ns,
                        instrumentation_scope=_SCOPE)


def send_spans(spans: Iterable[SpanData], endpoint: str = DEFAULT_ENDPOINT, *,
               timeout_s: float = 10.0, batch: int = 512) -> int:
    """Export ``spans`` to the OTLP/HTTP ``endpoint`` in batches; how many were sent.
    AuditError when the collector refuses them or cannot be reached."""
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s)
    sent = 0
    try:
        pending: list[ReadableSpan] = []
        for span in spans:
            pending.append(to_readable(span))
            if len(pending) >= batch:
                sent += _send(exporter, pending, endpoint)
                pending = []
        if pending:
            sent += _send(exporter, pending, endpoint)
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
    return sent


def _send(exporter: OTLPSpanExporter, spans: list[ReadableSpan], endpoint: str) -> int:
    if exporter.export(spans) is not SpanExportResult.SUCCESS:
        raise AuditError(f"the OTLP collector at {endpoint} did not take the spans")
    return len(spans)


class OtlpExporter:
    """A live observer of an ``AuditStore``: one span per decided call, sent in the background.

    ``include_arguments`` / ``include_outputs`` put the call's parameters / the result's output
    (and the reason messages, which quote arguments) in the spans; both off by default.
    """

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, *, include_arguments: bool = False,
                 include_outputs: bool = False, timeout_s: float = 10.0) -> None:
        self.endpoint = endpoint
        self._include = (include_arguments, include_outputs)
        self._processor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s), schedule_delay_millis=500)
        self._runs: dict[str, RunMeta] = {}
        self._taint: dict[str, set[str]] = {}  # each run's taint so far, as pair_calls has it
        self._waiting: OrderedDict[str, tuple[CallView, RunMeta]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, record: AuditRecord) -> None:
        """Take in one appended record (the store calls this; it never raises out of it)."""
        with self._lock:
            if record.kind == "run-start":
                p = record.payload
                self._runs[record.run_id] = RunMeta(record.run_id, str(p.get("principal", "")),
                                                    str(p.get("policy_name", "")))
            elif record.kind == "decision":
                self._decision(record)
            elif record.kind == "result":
                result = record.payload.get("result")
                call_id = str(result.get("call_id", "")) if isinstance(result, dict) else ""
                found = self._waiting.pop(call_id, None)
                if found is not None:
                    self._emit(CallView(found[0].decision, record, found[0].run_taint),
                               found[1])
                self._taint.setdefault(record.run_id, set()).update(
                    CallView(record, record).taint_out)
            elif record.kind == "run-end":
                for call_id, (view, meta) in list(self._waiting.items()):
                    if meta.run_id == record.run_id:
                        del self._waiting[call_id]
                        self._emit(view, meta)
                self._runs.pop(record.run_id, None)
                self._taint.pop(record.run_id, None)

    def _decision(self, record: AuditRecord) -> None:
        view = CallView(record, run_taint=tuple(sorted(self._taint.get(record.run_id, ()))))
        meta = self._runs.get(record.run_id) or RunMeta(record.run_id, "", "")
        if view.verdict != "allow":
            self._emit(view, meta)
            return
        self._waiting[view.call_id] = (view, meta)
        while len(self._waiting) > MAX_WAITING:
            _, (old, old_meta) = self._waiting.popitem(last=False)
            self._emit(old, old_meta)

    def _emit(self, view: CallView, meta: RunMeta) -> None:
        arguments, outputs = self._include
        span = span_for(view, meta, include_arguments=arguments, include_outputs=outputs)
        self._processor.on_end(to_readable(span))

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Send every span taken in so far (calls still waiting for a result included)."""
        with self._lock:
            for view, meta in self._waiting.values():
                self._emit(view, meta)
            self._waiting.clear()
        return bool(self._processor.force_flush(int(timeout_s * 1000)))

    def shutdown(self) -> None:
        """Flush and stop the background sender. Never raises."""
        try:
            self.flush()
            self._processor.shutdown()  # type: ignore[no-untyped-call]
        except Exception as exc:  # a collector's failure is logged, never raised
            log.warning("OTLP exporter shutdown: %s", exc)
