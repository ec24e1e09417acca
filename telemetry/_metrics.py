"""In-process metric aggregation: the cheap counters the runtime bumps on every message.

Series are keyed by ``(name, *label_values)``; the label names live once per metric in its
`MetricSpec`. Updates take one short lock (a dict increment under the GIL is not atomic), and
`collect` returns the series changed since the previous collect as `MetricPoint` records.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
import time
from typing import Any

from ._records import MetricPoint

LATENCY_BOUNDS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0, 60.0,
)


@dataclasses.dataclass(frozen=True, slots=True)
class MetricSpec:
    """What a metric is: its kind, label names, help text and (histograms) bucket bounds."""

    name: str
    kind: str
    label_names: tuple[str, ...]
    description: str
    bounds: tuple[float, ...] = ()


BUILTIN = (
    MetricSpec("messages_handled", "counter", ("mesh", "method"), "Endpoint messages handled"),
    MetricSpec("handler_latency_seconds", "histogram", ("mesh", "method"),
               "Endpoint handler latency", LATENCY_BOUNDS),
    MetricSpec("queue_depth", "gauge", ("actor",), "Messages waiting in an actor's queue"),
    MetricSpec("message_bytes", "counter", ("direction",), "Message bytes sent/received"),
    MetricSpec("failures", "counter", ("mesh",), "Actor failures"),
    MetricSpec("transfer_bytes", "counter", ("kind",), "Data-plane bytes transferred"),
    MetricSpec("transfers", "counter", ("kind",), "Data-plane transfers"),
    MetricSpec("telemetry_dropped", "counter", ("kind",), "Telemetry records dropped"),
    MetricSpec("stalled_handlers", "gauge", (),
               "Handlers running longer than the stall threshold (MONARCH_STALL_S)"),
    MetricSpec("start_to_first_proc_ready_seconds", "gauge", (),
               "Seconds from the job's start to its first proc ready"),
    MetricSpec("actor_spawn_seconds", "histogram", ("mesh",),
               "Seconds from an actor's spawn request to the end of its __init__",
               LATENCY_BOUNDS),
    MetricSpec("messages_undelivered", "counter", ("reason",),
               "Messages that never reached a handler (refused, dropped, lost with a proc)"),
    MetricSpec("weight_version", "gauge", ("key",),
               "The newest version published of a state dict (monarch.weights)"),
    MetricSpec("weight_bytes", "gauge", ("key",),
               "Bytes of the newest version of a state dict (monarch.weights)"),
    MetricSpec("weight_reads", "counter", ("key",),
               "Reads of a state dict (monarch.weights.get_state_dict) since the job began"),
    MetricSpec("tensor_engine_ops", "counter", ("mesh_id",),
               "Ops the tensor engine sent to the workers of a proc mesh (mesh_id: the "
               "workers' actor mesh)"),
    MetricSpec("tensor_engine_batches", "counter", ("mesh_id",),
               "Batches of ops the tensor engine sent (one broadcast each)"),
    MetricSpec("tensor_engine_tensors", "gauge", ("mesh_id",),
               "Remote tensors the tensor engine holds on a proc mesh (made, not yet freed)"),
    MetricSpec("job_failures", "counter", ("cause",),
               "Failures by cause: user (an endpoint raised) or infrastructure (a proc died, "
               "a host was lost)"),
)


class _Histogram:
    __slots__ = ("buckets", "count", "sum")

    def __init__(self, nbuckets: int) -> None:
        self.buckets = [0] * nbuckets
        self.count = 0
        self.sum = 0.0


class MetricsTable:
    """Aggregates counters, gauges and histograms of one process."""

    def __init__(self, specs: tuple[MetricSpec, ...] = BUILTIN) -> None:
        self._specs = {spec.name: spec for spec in specs}
        self._lock = threading.Lock()
        self._values: dict[tuple[Any, ...], Any] = {}  # key -> float or _Histogram
        self._dirty: set[tuple[Any, ...]] = set()  # keys changed since the last collect

    def declare(self, spec: MetricSpec) -> None:
        """Adds a metric; re-declaring an existing name keeps the first spec."""
        self._specs.setdefault(spec.name, spec)

    def inc(self, key: tuple[Any, ...], amount: float = 1) -> None:
        """Adds ``amount`` to the counter series ``key`` = (name, *label_values)."""
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount
            self._dirty.add(key)

    def set(self, key: tuple[Any, ...], value: float) -> None:
        """Sets the gauge series ``key``."""
        with self._lock:
            self._values[key] = value
            self._dirty.add(key)

    def observe(self, key: tuple[Any, ...], value: float) -> None:
        """Adds one observation to the histogram series ``key``."""
        bounds = self._specs[key[0]].bounds
        index = bisect.bisect_left(bounds, value)
        with self._lock:
            hist = self._values.get(key)
            if hist is None:
                hist = self._values[key] = _Histogram(len(bounds) + 1)
            hist.buckets[index] += 1
            hist.count += 1
            hist.sum += value
            self._dirty.add(key)

    def value(self, key: tuple[Any, ...]) -> Any:
        """Returns a series' current value (a counter/gauge number), or None."""
        value = self._values.get(key)
        return value if not isinstance(value, _Histogram) else value.sum

    def collect(self, source: str, everything: bool = False) -> list[MetricPoint]:
        """Returns points for the series changed since the last collect (all if ``everything``)."""
        now = time.time_ns()
        with self._lock:
            keys = list(self._values) if everything else list(self._dirty)
            self._dirty.clear()
            return [self._point(key, now, source) for key in keys]

    def reset(self) -> None:
        """Forgets every value (a forked child starts from zero)."""
        self._lock = threading.Lock()
        self._values.clear()
        self._dirty.clear()

    def _point(self, key: tuple[Any, ...], now: int, source: str) -> MetricPoint:
        spec = self._specs[key[0]]
        labels = {n: str(v) for n, v in zip(spec.label_names, key[1:])}
        value = self._values[key]
        if isinstance(value, _Histogram):
            return MetricPoint(spec.name, "histogram", labels, value.sum, now, source,
                               value.count, spec.bounds, tuple(value.buckets), spec.description)
        return MetricPoint(spec.name, spec.kind, labels, value, now, source,
                           description=spec.description)
