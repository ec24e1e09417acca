"""Chrome/Perfetto trace JSON: open the file at https://ui.perfetto.dev or chrome://tracing.

One process track per Monarch process (named after it, with its real pid when known), one thread
track per actor (``mesh[rank]``) or ``main``; every span is a complete event (``"ph": "X"``) with
its attributes and ids in ``args``; a flow arrow links each span to a parent recorded in
another process (the controller's call to the actor's invocation). Spans that overlap without
nesting (pipelined calls) go to extra lanes of the same actor, since a track must nest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from ._records import SpanRecord


def chrome_trace(spans: Iterable[SpanRecord],
                 resources: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Returns the trace as a JSON-ready dict (``{"traceEvents": [...], ...}``)."""
    ordered = sorted(spans, key=lambda s: (s.start_ns, -s.end_ns))
    pids = _pids(ordered, resources or {})
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": source}}
        for source, pid in pids.items()]
    lanes = _Lanes()
    placed: dict[bytes, tuple[int, int, SpanRecord]] = {}
    for span in ordered:
        pid = pids[span.source]
        tid = lanes.place(pid, _actor_of(span), span)
        placed[span.span_id] = (pid, tid, span)
        events.append(_complete(span, pid, tid))
    events += lanes.thread_names()
    events += _flows(placed)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(spans: Iterable[SpanRecord], path: str | os.PathLike[str],
                       resources: dict[str, dict[str, Any]] | None = None) -> None:
    """Writes spans as a Chrome/Perfetto trace JSON file.

    Args:
        spans: the spans, e.g. ``store.spans(limit=...)``.
        path: the file to write.
        resources: per-process resource tags (``store.resources()``) for real pids and hosts.
    """
    with open(path, "w", encoding="utf-8") as f:
        json.dump(chrome_trace(spans, resources), f, default=str)


def _pids(spans: list[SpanRecord], resources: dict[str, dict[str, Any]]) -> dict[str, int]:
    pids: dict[str, int] = {}
    for span in spans:
        if span.source not in pids:
            pid = resources.get(span.source, {}).get("pid")
            taken = set(pids.values())
            if not isinstance(pid, int) or pid in taken:
                pid = max(taken | {1_000_000}) + 1  # no real pid: synthetic, above real ones
            pids[span.source] = pid
    return pids


def _actor_of(span: SpanRecord) -> str:
    attrs = span.attributes
    mesh = attrs.get("mesh")
    if mesh is None:
        return "main"
    rank = attrs.get("rank")
    return f"{mesh}[{rank}]" if rank is not None else str(mesh)


def _us(ns: int) -> float:
    return ns / 1000.0


def _complete(span: SpanRecord, pid: int, tid: int) -> dict[str, Any]:
    args = {**span.attributes, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
            "outcome": span.outcome}
    if span.parent_span_id is not None:
        args["parent_span_id"] = span.parent_span_id.hex()
    return {"name": span.name, "cat": "monarch", "ph": "X", "ts": _us(span.start_ns),
            "dur": _us(max(span.end_ns - span.start_ns, 0)), "pid": pid, "tid": tid,
            "args": args}


def _flows(placed: dict[bytes, tuple[int, int, SpanRecord]]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for flow_id, (pid, tid, span) in enumerate(placed.values(), start=1):
        parent = placed.get(span.parent_span_id or b"")
        if parent is None or parent[0] == pid:
            continue
        ppid, ptid, pspan = parent
        ts = min(max(span.start_ns, pspan.start_ns), pspan.end_ns)
        common = {"name": "call", "cat": "monarch.flow", "id": flow_id}
        events.append({**common, "ph": "s", "ts": _us(ts), "pid": ppid, "tid": ptid})
        events.append({**common, "ph": "f", "bp": "e", "ts": _us(span.start_ns), "pid": pid,
                       "tid": tid})
    return events


class _Lanes:
    """Assigns each span a thread id such that spans on one thread nest properly."""

    def __init__(self) -> None:
        self._stacks: dict[tuple[int, str], list[list[int]]] = {}  # lane -> open end times
        self._tids: dict[tuple[int, str, int], int] = {}

    def place(self, pid: int, actor: str, span: SpanRecord) -> int:
        lanes = self._stacks.setdefault((pid, actor), [])
        for index, stack in enumerate(lanes):
            while stack and stack[-1] <= span.start_ns:
                stack.pop()
            if not stack or stack[-1] >= span.end_ns:
                stack.append(span.end_ns)
                return self._tid(pid, actor, index)
        lanes.append([span.end_ns])
        return self._tid(pid, actor, len(lanes) - 1)

    def _tid(self, pid: int, actor: str, lane: int) -> int:
        return self._tids.setdefault((pid, actor, lane), len(self._tids) + 1)

    def thread_names(self) -> list[dict[str, Any]]:
        return [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                 "args": {"name": actor if lane == 0 else f"{actor} #{lane + 1}"}}
                for (pid, actor, lane), tid in self._tids.items()]
