from __future__ import annotations

import asyncio
import inspect

import pytest
from monarch.telemetry import (
    MetricPoint,
    Recorder,
    SpanRecord,
    current_trace_context,
    decode_batch,
    get_meter,
    install_otel,
    reset_actor_tags,
    set_actor_tags,
    span,
    start_span,
    traced,
)
from monarch.telemetry._otel import bridge

PARENT = (b"\x11" * 16, b"\x22" * 8)


def spans_of(wire: list) -> dict[str, SpanRecord]:
    return {s.name: s for s in decode_batch(wire).spans}


def test_user_span_is_child_of_invocation_and_parent_of_calls(recorder: Recorder, drain) -> None:
    invocation = start_span("Trainer.step", PARENT)
    with span("load") as otel_span:
        otel_span.set_attribute("batch", 3)
        inside = current_trace_context()
    invocation.end()
    got = spans_of(drain(recorder))
    load = got["load"]
    assert load.trace_id == PARENT[0]
    assert load.parent_span_id == got["Trainer.step"].span_id
    assert inside == (load.trace_id, load.span_id)  # what an outgoing call would carry
    assert load.attributes["batch"] == 3


def test_nested_user_spans_and_traced_functions(recorder: Recorder, drain) -> None:
    @traced
    def compute() -> tuple[bytes, bytes] | None:
        return current_trace_context()

    @traced(name="custom")
    def named() -> int:
        return 7

    with start_span("handler"), span("outer"):
        inner_ctx = compute()
        assert named() == 7
    got = spans_of(drain(recorder))
    assert got["compute"].parent_span_id == got["outer"].span_id
    assert got["custom"].parent_span_id == got["outer"].span_id
    assert got["outer"].parent_span_id == got["handler"].span_id
    assert inner_ctx == (got["compute"].trace_id, got["compute"].span_id)


def test_traced_async_function(recorder: Recorder, drain) -> None:
    @traced
    async def fetch() -> str:
        await asyncio.sleep(0)
        return "done"

    async def handler() -> str:
        with start_span("handler"):
            return await fetch()

    assert asyncio.run(handler()) == "done"
    got = spans_of(drain(recorder))
    assert got["fetch"].parent_span_id == got["handler"].span_id


def test_span_as_decorator(recorder: Recorder, drain) -> None:
    @span("decorated")
    def work(x: int) -> int:
        return x + 1

    assert work(1) == 2 and work.__name__ == "work"
    assert "decorated" in spans_of(drain(recorder))


def test_exception_marks_user_span_as_error(recorder: Recorder, drain) -> None:
    with pytest.raises(ValueError), span("bad"):
        raise ValueError("nope")
    bad = spans_of(drain(recorder))["bad"]
    assert bad.outcome == "error" and "nope" in bad.attributes["error"]
    assert current_trace_context() is None


def test_user_span_carries_actor_tags(recorder: Recorder, drain) -> None:
    token = set_actor_tags(mesh="trainer", actor_class="Trainer", rank=5)
    with span("tagged"):
        pass
    reset_actor_tags(token)
    attrs = spans_of(drain(recorder))["tagged"].attributes
    assert (attrs["mesh"], attrs["rank"], attrs["actor_class"]) == ("trainer", 5, "Trainer")


def test_raw_opentelemetry_spans_join_the_invocation_trace(recorder: Recorder, drain) -> None:
    from opentelemetry import trace

    install_otel()
    tracer = trace.get_tracer("user.library")
    with start_span("handler"), tracer.start_as_current_span("raw") as raw:
        assert trace.get_current_span() is raw
        raw_ctx = current_trace_context()
        with span("mine"):
            pass
    got = spans_of(drain(recorder))
    assert got["raw"].parent_span_id == got["handler"].span_id
    assert got["mine"].parent_span_id == got["raw"].span_id
    assert raw_ctx == (got["raw"].trace_id, got["raw"].span_id)


def test_user_span_outside_any_invocation_starts_a_trace(recorder: Recorder, drain) -> None:
    with span("root"):
        pass
    assert spans_of(drain(recorder))["root"].parent_span_id is None


def test_meter_instruments_become_metric_points(recorder: Recorder, drain) -> None:
    meter = get_meter()
    meter.create_counter("tokens").add(5, {"split": "train"})
    meter.create_histogram("loss").record(0.5)
    meter.create_up_down_counter("inflight").add(-2)
    bridge()._last_collect = 0.0  # collect now, not once a second
    found = {MetricPoint.from_wire(m).name: MetricPoint.from_wire(m)
             for m in drain(recorder)[4]}
    assert found["tokens"].kind == "counter" and found["tokens"].value == 5
    assert found["tokens"].labels == {"split": "train"} and found["tokens"].source == "proc-a"
    assert found["loss"].kind == "histogram" and found["loss"].count == 1
    assert found["inflight"].kind == "updown" and found["inflight"].value == -2


def test_signatures_match_monarch() -> None:
    assert list(inspect.signature(span).parameters) == ["name"]
    params = inspect.signature(traced).parameters
    assert list(params) == ["fn", "name"]
    assert params["name"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["fn"].default is None and params["name"].default is None
    assert list(inspect.signature(get_meter).parameters) == []
    from opentelemetry.metrics import Meter

    assert isinstance(get_meter(), Meter)
