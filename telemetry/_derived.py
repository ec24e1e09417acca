"""Views derived from metric points alone: the state dicts of `monarch.weights` and the tensor
engines. Pure functions over anything with `name`, `labels` and `value` (`MetricPoint`s of a
live store, or rows of a history's `metrics` table), so the live topology and a finished job's
history show the same (`monarch top --job ID`)."""

from __future__ import annotations

from typing import Any

WEIGHT_FIELDS = {"weight_version": "version", "weight_bytes": "bytes", "weight_reads": "reads"}
ENGINE_FIELDS = {"tensor_engine_ops": "ops", "tensor_engine_batches": "batches",
                 "tensor_engine_tensors": "tensors"}
METRICS = frozenset(WEIGHT_FIELDS) | frozenset(ENGINE_FIELDS)
"""The metrics `weights` and `tensor_engines` read (a history reads only these)."""


def weights(points: Any) -> list[dict[str, Any]]:
    """The state dicts of `monarch.weights`: key, newest version, its bytes, reads so far."""
    found: dict[str, dict[str, Any]] = {}
    for point in points:
        field = WEIGHT_FIELDS.get(point.name)
        if field is not None and "key" in point.labels:
            entry = found.setdefault(point.labels["key"], {"key": point.labels["key"],
                                                           "version": 0, "bytes": 0,
                                                           "reads": 0})
            entry[field] = int(point.value)
    return sorted(found.values(), key=lambda w: w["key"])


def tensor_engines(points: Any) -> list[dict[str, Any]]:
    """The tensor engines (one per proc mesh that ran tensor ops): the workers' actor mesh,
    ops and batches sent, remote tensors alive (summed over the processes that drive it)."""
    found: dict[str, dict[str, Any]] = {}
    for point in points:
        field = ENGINE_FIELDS.get(point.name)
        if field is not None and "mesh_id" in point.labels:
            mesh = point.labels["mesh_id"]
            entry = found.setdefault(mesh, {"mesh": mesh, "ops": 0, "batches": 0,
                                            "tensors": 0})
            entry[field] += int(point.value)
    return sorted(found.values(), key=lambda e: e["mesh"])
