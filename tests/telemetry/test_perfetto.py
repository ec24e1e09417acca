from __future__ import annotations

import json
from pathlib import Path

from monarch.telemetry import SpanRecord, chrome_trace, write_chrome_trace

T = b"\x01" * 16


def span(name: str, sid: int, parent: int | None, start: int, end: int, source: str,
         **attrs: object) -> SpanRecord:
    return SpanRecord(T, bytes([sid]) * 8, None if parent is None else bytes([parent]) * 8,
                      name, start * 1000, end * 1000, dict(attrs), "ok", source)


SPANS = [
    span("call Trainer.step", 1, None, 0, 100, "controller"),
    span("call Trainer.step", 2, None, 50, 150, "controller"),  # pipelined: overlaps, no nest
    span("Trainer.step", 3, 1, 10, 90, "proc-0", mesh="trainer", rank=0),
    span("load", 4, 3, 20, 30, "proc-0", mesh="trainer", rank=0),
]


def test_trace_file_loads_as_json_with_complete_events(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    write_chrome_trace(SPANS, path, {"proc-0": {"pid": 4242}})
    events = json.loads(path.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == 4
    step = next(e for e in complete if e["name"] == "Trainer.step")
    assert step["pid"] == 4242 and step["ts"] == 10.0 and step["dur"] == 80.0
    assert step["args"]["trace_id"] == T.hex() and step["args"]["parent_span_id"] == "01" * 8
    names = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "process_name"}
    assert (4242, "proc-0") in names and any(n == "controller" for _, n in names)


def test_actor_spans_share_a_track_and_overlapping_calls_get_lanes() -> None:
    events = chrome_trace(SPANS)["traceEvents"]
    complete = {e["args"]["span_id"]: e for e in events if e["ph"] == "X"}
    assert complete["03" * 8]["tid"] == complete["04" * 8]["tid"]
    assert complete["01" * 8]["tid"] != complete["02" * 8]["tid"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads[complete["03" * 8]["tid"]] == "trainer[0]"


def test_flow_links_call_to_remote_invocation() -> None:
    events = chrome_trace(SPANS)["traceEvents"]
    flows = [e for e in events if e["ph"] in ("s", "f")]
    assert [e["ph"] for e in flows] == ["s", "f"]
    start, finish = flows
    assert start["id"] == finish["id"] and finish["bp"] == "e"
    assert start["ts"] == finish["ts"] == 10.0
    assert start["pid"] != finish["pid"]
