"""Micro-benchmark of telemetry's hot paths (a few seconds; no processes, no sockets).

    python bench/telemetry_micro.py [--quick] [--gc]

Prints the median cost per operation of what the runtime does per message, twice: on the
general path ("before": a lean span with its own attribute dict, three metric calls, spans in
full form on the wire, a `SpanRecord` per span at ingest; the path the runtime took until site
spans) and on the site-span path the runtime takes now ("after"). Then a few other costs: a
print() through the log tee (minus a print to the same sink without it), an HLC stamp, and a
span query, which is where records are made now.

Batches hold `BATCH` spans, what a proc handling 10k messages/s ships every 100 ms. Like
`timeit`, the figures exclude the garbage collector unless ``--gc`` is given.
"""

from __future__ import annotations

import gc
import itertools
import os
import statistics
import sys
import time
import timeit
from collections.abc import Callable

from monarch.telemetry import (
    Recorder,
    Store,
    StreamTee,
    begin_invocation,
    call_site,
    end_invocation,
    invocation_site,
    now,
    process_recorder,
    set_process_recorder,
    start_site_span,
    start_span,
)

N = 20_000
BATCH = 1000


def per_op(fn: Callable[[], object], reset: Callable[[], object], repeat: int,
           number: int = N) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` runs of ``number`` calls."""
    runs = []
    for _ in range(repeat):
        timer = timeit.Timer(fn, gc.enable if "--gc" in sys.argv else "pass")
        runs.append(timer.timeit(number=number) / number)
        reset()
    return statistics.median(runs)


def per_item(prepare: Callable[[], object], fn: Callable[[object], object], items: int,
             repeat: int) -> float:
    """Median seconds per item of ``fn(prepare())`` (only ``fn`` is timed)."""
    runs = []
    for _ in range(repeat):
        arg = prepare()
        if "--gc" not in sys.argv:
            gc.disable()
        start = time.perf_counter()
        fn(arg)
        runs.append((time.perf_counter() - start) / items)
        gc.enable()
    return statistics.median(runs)


# -- the runtime's calls, per path -------------------------------------------------------------

def invocation_before(parent: tuple[bytes, bytes]) -> None:
    """Per invocation before site spans: 1 span with its attributes, 3 metric calls (the
    metrics table's own calls: the helpers the runtime used then are gone)."""
    metrics = process_recorder().metrics
    metrics.inc(("message_bytes", "received"), 128)
    span = start_span("trainer.step", parent, {"mesh": "trainer", "actor_class": "Trainer",
                                                "rank": 0, "method": "step", "bytes_in": 128})
    span.end("ok")
    metrics.inc(("messages_handled", "trainer", "step"))
    metrics.observe(("handler_latency_seconds", "trainer", "step"), 0.0004)


def invocation_after(parent: tuple[bytes, bytes]) -> None:
    """Per invocation now: a site lookup, begin, end (which also feeds the metrics)."""
    site = invocation_site("trainer", "Trainer", 0, "step")
    end_invocation(begin_invocation(site, parent, 128), "ok")


def call_before() -> None:
    """The caller's span of one call, before site spans."""
    start_span("call trainer.step", None, {"mesh": "trainer", "method": "step",
                                            "adverb": "broadcast"}, activate=False).end("ok")


def call_after() -> None:
    """The caller's span of one call now."""
    start_site_span(call_site("trainer", "step", "broadcast")).end("ok")


def new_parent() -> tuple[bytes, bytes]:
    """The parent of an invocation: each its own trace, as one broadcast each."""
    return os.urandom(16), os.urandom(8)


PARENTS = [new_parent() for _ in range(BATCH)]


def main() -> None:
    repeat = 3 if "--quick" in sys.argv else 7
    recorder = Recorder(max_spans=10**7, max_logs=10**7)
    recorder.configure({"host": "h", "proc": "trainer-0", "job": "j"})
    set_process_recorder(recorder)

    def clear() -> None:
        recorder.drain(10**8)

    def filled(invocation: Callable[[tuple[bytes, bytes]], None]) -> Callable[[], None]:
        def fill() -> None:
            clear()
            for parent in PARENTS:
                invocation(parent)
        return fill

    def batches(invocation: Callable[[tuple[bytes, bytes]], None]) -> list[bytes]:
        out = []
        for _ in range(16):
            filled(invocation)()
            out.append(recorder.drain_bytes(10**6) or b"")
        return out

    def ingest_cost(shipped: list[bytes]) -> float:
        store = Store(max_spans=50_000)  # full: each span ingested also evicts one
        cycle = itertools.cycle(shipped)
        for _ in range(60):
            store.ingest(next(cycle))
        return per_item(lambda: None, lambda _: [store.ingest(next(cycle)) for _ in range(10)],
                        10 * BATCH, repeat)

    parent = PARENTS[0]
    rows: list[tuple[str, float, float]] = [
        ("proc: span + metrics, per invocation",
         per_op(lambda: invocation_before(parent), clear, repeat),
         per_op(lambda: invocation_after(parent), clear, repeat)),
        ("proc: drain + encode, per span",
         per_item(filled(invocation_before), lambda _: recorder.drain_bytes(10**6), BATCH,
                  repeat),
         per_item(filled(invocation_after), lambda _: recorder.drain_bytes(10**6), BATCH,
                  repeat)),
    ]
    rows.append(("proc: total per invocation", rows[0][1] + rows[1][1], rows[0][2] + rows[1][2]))
    rows.append(("controller: call span start+end", per_op(call_before, clear, repeat),
                 per_op(call_after, clear, repeat)))
    rows.append(("controller: Store.ingest, per span", ingest_cost(batches(invocation_before)),
                 ingest_cost(batches(invocation_after))))

    gc_note = "with GC" if "--gc" in sys.argv else "no GC"
    print(f"{f'per operation (median of {repeat}, {gc_note})':45s} {'before':>9s} {'after':>9s}")
    for name, before, after in rows:
        print(f"{name:45s} {before * 1e6:6.2f} µs {after * 1e6:6.2f} µs")

    sink = open("/dev/null", "w")  # noqa: SIM115
    tee = StreamTee(sink, "stdout", recorder)
    bare = per_op(lambda: print("loss=0.25 step=100", file=sink), clear, repeat)
    teed = per_op(lambda: print("loss=0.25 step=100", file=tee), clear, repeat)  # type: ignore[arg-type]
    store = Store()
    for shipped in batches(invocation_after)[:2]:
        store.ingest(shipped)
    others = {
        "print() through the tee (extra per line)": teed - bare,
        "HLC now()": per_op(now, clear, repeat),
        "Store.spans(limit=1000), per span returned": per_op(lambda: store.spans(limit=1000),
                                                            clear, repeat, 20) / 1000,
        "Store.spans(trace_id=...), per query": per_op(
            lambda: store.spans(trace_id=PARENTS[7][0]), clear, repeat, 200),
    }
    others["Store.ingest of a log line, book full (150k lines)"] = log_ingest_cost(repeat)
    print()
    for name, seconds in others.items():
        print(f"{name:45s} {seconds * 1e6:6.2f} µs")
    sys.stdout.flush()


def log_ingest_cost(repeat: int) -> float:
    """Seconds a log line costs `Store.ingest` once its log book is full: batches of 16 lines
    (one per actor) from 64 procs, in order as a printing job ships them, each batch stamped
    later than the last (what a 1,024-actor job printing a line per call sends)."""
    from monarch.telemetry import _context, set_actor_tags

    hlc = itertools.count(1)

    def batch(proc: int) -> bytes:
        recorder = Recorder()
        recorder.configure({"host": "h", "proc": f"p{proc}", "pid": 1000 + proc, "job": "j"})
        for mesh in range(16):
            set_actor_tags(mesh=f"k{mesh}", rank=proc, actor="Worker")
            recorder.add_log((next(hlc), time.time_ns(), "stdout", 20, "step 100 loss 0.25",
                              _context._tags.get(), None))
        return recorder.drain_bytes() or b""

    store = Store(max_logs=150_000)
    for i in range(150_000 // 16 + 64):
        store.ingest(batch(i % 64))
    shipped = [batch(i % 64) for i in range(64 * 8 * repeat)]
    feed = iter(shipped)
    return per_item(lambda: None, lambda _: [store.ingest(next(feed)) for _ in range(64)],
                    64 * 16, repeat)


if __name__ == "__main__":
    main()
