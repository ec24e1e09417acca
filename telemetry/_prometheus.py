"""Prometheus export: a collector over the store and a loopback ``/metrics`` server.

Every series is the store's aggregate (`Store.metrics`), named ``monarch_<name>`` with characters
Prometheus does not allow replaced by ``_``. Counters get ``_total`` from prometheus_client.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ._records import MetricPoint

if TYPE_CHECKING:
    from ._store import Store

_INVALID = re.compile(r"[^a-zA-Z0-9_:]")


def metric_name(name: str) -> str:
    """The Prometheus name of a metric: ``monarch_`` + the sanitized name."""
    clean = _INVALID.sub("_", name)
    clean = clean.removesuffix("_total")
    return clean if clean.startswith("monarch_") else "monarch_" + clean


class StoreCollector:
    """A prometheus_client collector exposing a store's aggregated metrics."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def collect(self) -> Iterator[Any]:
        """Yields one metric family per metric name (called by prometheus_client)."""
        by_name: dict[str, list[MetricPoint]] = {}
        for point in self._store.metrics():
            by_name.setdefault(point.name, []).append(point)
        for points in by_name.values():
            label_names = sorted({name for p in points for name in p.labels})
            family = _family(points[0], label_names)
            for point in points:
                if point.kind == points[0].kind:
                    _add_sample(family, point, label_names)
            yield family

    def describe(self) -> list[Any]:
        """Nothing up front: the metric set changes as processes report (prometheus_client)."""
        return []


def _family(point: MetricPoint, label_names: list[str]) -> Any:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    kinds = {"counter": CounterMetricFamily, "histogram": HistogramMetricFamily}
    cls = kinds.get(point.kind, GaugeMetricFamily)
    help_text = point.description or point.name
    return cls(metric_name(point.name), help_text, labels=label_names)


def _add_sample(family: Any, point: MetricPoint, label_names: list[str]) -> None:
    labels = [point.labels.get(name, "") for name in label_names]
    if point.kind == "histogram":
        family.add_metric(labels, _cumulative(point), point.value)
    else:
        family.add_metric(labels, point.value)


def _cumulative(point: MetricPoint) -> list[tuple[str, float]]:
    running, out = 0, []  # type: tuple[int, list[tuple[str, float]]]
    for bound, count in zip([*map(str, point.bounds), "+Inf"], point.buckets):
        running += count
        out.append((bound, running))
    return out


class MetricsServer:
    """A running ``/metrics`` HTTP server; `close` stops it."""

    def __init__(self, httpd: Any, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) it listens on."""
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        """The metrics URL."""
        host, port = self.address
        return f"http://{host}:{port}/metrics"

    def close(self) -> None:
        """Stops serving and closes the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def serve_metrics(store: Store, host: str = "127.0.0.1", port: int = 0) -> MetricsServer:
    """Serves the store's metrics for Prometheus at ``http://host:port/metrics``.

    Args:
        store: the store to expose.
        host: address to bind (loopback by default).
        port: port to bind; 0 picks a free one (see `MetricsServer.address`).
    """
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))  # type: ignore[arg-type]
    httpd, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(httpd, thread)
