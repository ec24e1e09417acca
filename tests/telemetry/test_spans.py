from __future__ import annotations

import asyncio
import threading

from monarch.telemetry import (
    Recorder,
    SpanRecord,
    current_trace_context,
    decode_batch,
    start_span,
)


def spans_of(wire: list) -> dict[str, SpanRecord]:
    return {s.name: s for s in decode_batch(wire).spans}


def test_span_with_envelope_parent_joins_that_trace(recorder: Recorder, drain) -> None:
    parent = (b"\x01" * 16, b"\x02" * 8)
    handle = start_span("Trainer.step", parent, {"mesh": "trainer", "rank": 0})
    handle.end("ok", {"bytes_out": 12})
    span = spans_of(drain(recorder))["Trainer.step"]
    assert (span.trace_id, span.parent_span_id) == parent
    assert span.attributes == {"mesh": "trainer", "rank": 0, "bytes_out": 12}
    assert span.outcome == "ok" and span.end_ns >= span.start_ns
    assert span.source == "proc-a"


def test_active_span_is_the_current_context_until_it_ends() -> None:
    assert current_trace_context() is None
    outer = start_span("outer")
    assert current_trace_context() == outer.context
    inner = start_span("inner")
    assert inner.trace_id == outer.trace_id and inner.parent_span_id == outer.span_id
    inner.end()
    assert current_trace_context() == outer.context
    outer.end()
    assert current_trace_context() is None


def test_inactive_span_does_not_become_the_parent_of_later_calls(recorder: Recorder) -> None:
    call = start_span("call Trainer.step", activate=False)
    assert current_trace_context() is None
    second = start_span("call Trainer.step 2", activate=False)
    assert second.trace_id != call.trace_id
    call.end()
    second.end()


def test_span_ended_on_another_thread_is_recorded(recorder: Recorder, drain) -> None:
    call = start_span("call", activate=False)
    ender = threading.Thread(target=call.end, args=("error",))
    ender.start()
    ender.join()
    assert spans_of(drain(recorder))["call"].outcome == "error"


def test_active_span_ended_elsewhere_stays_current_where_it_started() -> None:
    handle = start_span("misused")  # activate=True, but ended on another thread
    ender = threading.Thread(target=handle.end)
    ender.start()
    ender.join()
    assert current_trace_context() == handle.context  # why call spans pass activate=False


def test_end_twice_records_once(recorder: Recorder, drain) -> None:
    handle = start_span("once")
    handle.end()
    handle.end("error")
    assert len(decode_batch(drain(recorder)).spans) == 1


def test_context_manager_marks_escaping_exception_as_error(recorder: Recorder, drain) -> None:
    try:
        with start_span("fails"):
            raise RuntimeError("x")
    except RuntimeError:
        pass
    assert spans_of(drain(recorder))["fails"].outcome == "error"


def test_ids_are_random_and_well_formed() -> None:
    handles = [start_span(str(i), activate=False) for i in range(200)]
    assert len({h.span_id for h in handles}) == 200
    assert len({h.trace_id for h in handles}) == 200
    assert all(len(h.trace_id) == 16 and len(h.span_id) == 8 for h in handles)


def test_each_asyncio_task_has_its_own_context(recorder: Recorder) -> None:
    async def handler(name: str) -> tuple[bytes, bytes] | None:
        with start_span(name) as handle:
            await asyncio.sleep(0)
            assert current_trace_context() == handle.context
            return handle.context

    async def main() -> list:
        return await asyncio.gather(handler("a"), handler("b"))

    contexts = asyncio.run(main())
    assert contexts[0] != contexts[1]
    assert current_trace_context() is None
