"""OTLP/HTTP (protobuf) export of the store's spans, logs and metrics, configured by ``OTEL_*``
variables.

`OtlpConfig.from_env` reads the standard variables when the exporter starts (never at import):
``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://localhost:4318``; ``/v1/traces``, ``/v1/logs``
and ``/v1/metrics`` are appended), ``OTEL_EXPORTER_OTLP_{TRACES,LOGS,METRICS}_ENDPOINT`` (used
as given), ``OTEL_EXPORTER_OTLP_HEADERS`` (plus the ``_TRACES_``/``_LOGS_``/``_METRICS_``
variants), ``OTEL_EXPORTER_OTLP_TIMEOUT`` (ms), ``OTEL_EXPORTER_OTLP_COMPRESSION``
(``gzip``/``none``), ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_METRIC_EXPORT_INTERVAL`` (ms, default 60000), ``OTEL_METRICS_EXPORTER`` (``none``: no
metrics) and ``OTEL_SDK_DISABLED``. Spans and logs go as the store takes them; the metric series
(`Store.metrics`, cumulative) every interval and once more at `OtlpExporter.stop`. Ours, not
OpenTelemetry's exporter, which costs about 40 % more CPU on the same records (DESIGN.md,
``bench/otlp_exporters.py``). A POST refused for a passing reason (connection refused or reset, a
timeout, HTTP 429/502/503/504) is retried with exponential backoff and jitter, honouring
``Retry-After``, as OpenTelemetry's own OTLP exporters do, for up to ``retry_s`` seconds (and no
later than the deadline of `OtlpExporter.stop`); a batch still refused then, or refused for
good (another 4xx/5xx), is counted and dropped. Nothing is raised into the job.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import random
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._otlp_encode import encode_logs, encode_metrics, encode_spans
from ._records import LogRecord, MetricPoint, SpanRecord

if TYPE_CHECKING:
    from ._store import Store
    from ._subscribe import Subscription

DEFAULT_ENDPOINT = "http://localhost:4318"
RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
"""HTTP answers after which OTLP exporters try again (the OTLP/HTTP specification's list)."""


def _seconds(value: str | None) -> float | None:
    """A ``Retry-After`` given in seconds (an HTTP date is ignored)."""
    try:
        return max(float(value), 0.0) if value else None
    except ValueError:
        return None


def _signal(env: Mapping[str, str], base: str, headers: Mapping[str, str],
            signal: str) -> tuple[str, dict[str, str]]:
    """The endpoint and headers of one signal (``traces``, ``logs`` or ``metrics``)."""
    name = signal.upper()
    endpoint = env.get(f"OTEL_EXPORTER_OTLP_{name}_ENDPOINT") or f"{base}/v1/{signal}"
    return endpoint, {**headers, **parse_pairs(env.get(f"OTEL_EXPORTER_OTLP_{name}_HEADERS", ""))}


def parse_pairs(text: str) -> dict[str, str]:
    """Parses ``k1=v1,k2=v2`` (values percent-decoded), as OTEL_*_HEADERS/ATTRIBUTES use it."""
    pairs = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            pairs[urllib.parse.unquote(key.strip())] = urllib.parse.unquote(value.strip())
    return pairs


@dataclasses.dataclass(frozen=True)
class OtlpConfig:
    """Where and how to send; see `from_env` for the variables."""

    traces_endpoint: str = DEFAULT_ENDPOINT + "/v1/traces"
    logs_endpoint: str = DEFAULT_ENDPOINT + "/v1/logs"
    traces_headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    logs_headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    timeout_s: float = 10.0
    gzip: bool = False
    service_name: str = "monarch"
    resource_attributes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    enabled: bool = True
    metrics_endpoint: str = DEFAULT_ENDPOINT + "/v1/metrics"
    metrics_headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    metrics_interval_s: float = 60.0
    metrics_enabled: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OtlpConfig:
        """Builds the config from ``environ`` (default: ``os.environ``, read now)."""
        env = os.environ if environ is None else environ
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
        headers = parse_pairs(env.get("OTEL_EXPORTER_OTLP_HEADERS", ""))
        attributes = parse_pairs(env.get("OTEL_RESOURCE_ATTRIBUTES", ""))
        service = env.get("OTEL_SERVICE_NAME") or attributes.get("service.name") or "monarch"
        traces, logs, metrics = (_signal(env, base, headers, s) for s in ("traces", "logs",
                                                                          "metrics"))
        return cls(
            traces_endpoint=traces[0], logs_endpoint=logs[0], traces_headers=traces[1],
            logs_headers=logs[1], metrics_endpoint=metrics[0], metrics_headers=metrics[1],
            metrics_interval_s=float(env.get("OTEL_METRIC_EXPORT_INTERVAL", "60000")) / 1000.0,
            metrics_enabled=env.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower() != "none",
            timeout_s=float(env.get("OTEL_EXPORTER_OTLP_TIMEOUT", "10000")) / 1000.0,
            gzip=env.get("OTEL_EXPORTER_OTLP_COMPRESSION", "none").strip().lower() == "gzip",
            service_name=service,
            resource_attributes={k: v for k, v in attributes.items() if k != "service.name"},
            enabled=env.get("OTEL_SDK_DISABLED", "").strip().lower() != "true",
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ExporterStatistics:
    """A snapshot of an exporter's counters."""

    spans_sent: int
    logs_sent: int
    posts_failed: int
    records_failed: int
    records_dropped: int
    last_error: str | None
    retries: int = 0
    metric_points_sent: int = 0


class OtlpExporter:
    """Sends the store's new spans and logs, and its metric series every
    ``config.metrics_interval_s``, to an OTLP/HTTP endpoint from a background thread.

    Args:
        store: the store to follow.
        config: where to send; None reads the ``OTEL_*`` variables at `start`.
        max_batch: records per POST.
        interval_s: longest wait before a partial batch is sent.
        queue_size: records buffered for export before new ones are dropped (and counted).
    """

    def __init__(self, store: Store, config: OtlpConfig | None = None, *, max_batch: int = 512,
                 interval_s: float = 1.0, queue_size: int = 50_000, retry_s: float = 60.0,
                 backoff_s: float = 0.5) -> None:
        self._store = store
        self.config = config
        self._max_batch, self._interval_s, self._queue_size = max_batch, interval_s, queue_size
        self._retry_s, self._backoff_s = retry_s, backoff_s
        self._deadline: float | None = None  # set by stop(): retries end by then
        self._subscription: Subscription | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._counts = {"spans": 0, "logs": 0, "metrics": 0, "posts_failed": 0,
                        "records_failed": 0, "retries": 0}
        self._start_ns = time.time_ns()  # cumulative sums began by then (at the latest)
        self._last_error: str | None = None

    def start(self) -> OtlpExporter:
        """Reads the config (if none given), subscribes to the store and starts the thread."""
        if self.config is None:
            self.config = OtlpConfig.from_env()
        if self._thread is None and self.config.enabled:
            self._subscription = self._store.subscribe(("span", "log"), self._queue_size)
            self._thread = threading.Thread(target=self._run, name="monarch-otlp", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Sends what is queued and the metric series (retrying a collector that is briefly
        away; all within ``timeout`` s), then stops the thread."""
        self._deadline = time.monotonic() + timeout
        self._stopping.set()
        if self._subscription is not None:
            self._subscription.close()
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None

    def export_spans(self, spans: list[SpanRecord]) -> bool:
        """POSTs ``spans`` now; returns whether the endpoint accepted them."""
        config = self._config()
        body = encode_spans(spans, self._store.resources(), config.service_name,
                            config.resource_attributes)
        ok = self._post(config.traces_endpoint, body, config.traces_headers, len(spans))
        self._counts["spans"] += len(spans) if ok else 0
        return ok

    def export_logs(self, logs: list[LogRecord]) -> bool:
        """POSTs ``logs`` now; returns whether the endpoint accepted them."""
        config = self._config()
        body = encode_logs(logs, self._store.resources(), config.service_name,
                           config.resource_attributes)
        ok = self._post(config.logs_endpoint, body, config.logs_headers, len(logs))
        self._counts["logs"] += len(logs) if ok else 0
        return ok

    def export_metrics(self, points: list[MetricPoint] | None = None) -> bool:
        """POSTs the store's metric series (or ``points``) now; returns whether the endpoint
        accepted them (True when there are none)."""
        config = self._config()
        points = self._store.metrics() if points is None else points
        if not points:
            return True
        body = encode_metrics(points, config.service_name, config.resource_attributes,
                              self._start_ns, time.time_ns())
        ok = self._post(config.metrics_endpoint, body, config.metrics_headers, len(points))
        self._counts["metrics"] += len(points) if ok else 0
        return ok

    def statistics(self) -> ExporterStatistics:
        """Returns a snapshot of the counters."""
        dropped = self._subscription.dropped if self._subscription is not None else 0
        c = self._counts
        return ExporterStatistics(c["spans"], c["logs"], c["posts_failed"], c["records_failed"],
                                  dropped, self._last_error, c["retries"], c["metrics"])

    def _config(self) -> OtlpConfig:
        if self.config is None:
            self.config = OtlpConfig.from_env()
        return self.config

    def _run(self) -> None:
        subscription = self._subscription
        assert subscription is not None and self.config is not None
        interval = self.config.metrics_interval_s
        metrics_due = time.monotonic() + interval
        while True:
            records = self._gather(subscription)
            if records:
                self._send(records)
            done = not records and (self._stopping.is_set() or subscription.closed)
            if self.config.metrics_enabled and (done or time.monotonic() >= metrics_due):
                self._send_metrics()  # the last values, once spans and logs are out, at stop
                metrics_due = time.monotonic() + interval
            if done:
                return

    def _gather(self, subscription: Subscription) -> list[Any]:
        deadline = time.monotonic() + self._interval_s
        records: list[Any] = []
        while (len(records) < self._max_batch and not self._stopping.is_set()
               and not subscription.closed):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            records += subscription.wait(left, self._max_batch - len(records))
        return records + subscription.poll(max(self._max_batch - len(records), 0))

    def _send(self, records: list[Any]) -> None:
        spans = [r for r in records if isinstance(r, SpanRecord)]
        logs = [r for r in records if isinstance(r, LogRecord)]
        try:
            if spans:
                self.export_spans(spans)
            if logs:
                self.export_logs(logs)
        except Exception as exc:  # an encoding bug must not kill the thread
            self._fail(len(records), exc)

    def _send_metrics(self) -> None:
        try:
            self.export_metrics()
        except Exception as exc:  # as in _send
            self._fail(0, exc)

    def _post(self, url: str, body: bytes, headers: Mapping[str, str], n: int) -> bool:
        config = self._config()
        all_headers = {"Content-Type": "application/x-protobuf", **headers}
        if config.gzip:
            body = gzip.compress(body)
            all_headers["Content-Encoding"] = "gzip"
        give_up = time.monotonic() + self._retry_s
        import urllib.request  # here: the HTTP client was ~15 ms of every proc's start

        for attempt in range(1_000_000):
            request = urllib.request.Request(url, body, all_headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=config.timeout_s) as response:
                    response.read()
                return True
            except Exception as exc:  # URLError, HTTPError, timeouts, refused connections...
                delay = self._retry_delay(exc, attempt, give_up)
                if delay is None:
                    self._fail(n, exc)
                    return False
                self._last_error = f"{type(exc).__name__}: {exc} (retrying)"
                self._counts["retries"] += 1
                time.sleep(delay)
        return False

    def _retry_delay(self, exc: Exception, attempt: int, give_up: float) -> float | None:
        """Seconds to wait before the next try, or None: a lasting refusal, or no time left."""
        import urllib.error

        retry_after = None
        if isinstance(exc, urllib.error.HTTPError):
            if exc.code not in RETRYABLE_STATUS:
                return None
            retry_after = _seconds(exc.headers.get("Retry-After") if exc.headers else None)
        elif not isinstance(exc, (urllib.error.URLError, OSError, TimeoutError)):
            return None
        delay = self._backoff_s * (2 ** min(attempt, 6)) * random.uniform(0.8, 1.2)
        if retry_after is not None:
            delay = max(delay, retry_after)
        end = give_up if self._deadline is None else min(give_up, self._deadline)
        return delay if time.monotonic() + delay < end else None

    def _fail(self, n: int, exc: Exception) -> None:
        self._counts["posts_failed"] += 1
        self._counts["records_failed"] += n
        self._last_error = f"{type(exc).__name__}: {exc}"
