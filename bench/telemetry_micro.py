"""Micro-benchmark of telemetry's hot paths (a few seconds; no processes, no sockets).

    python bench/telemetry_micro.py [--quick]

Prints the median cost per operation of what the runtime does per message, twice: the general
path it used before site spans ("before": a lean span with its own attribute dict, separate
metric calls, spans in full form on the wire and made into records at ingest) and the site-span
path it uses now ("after"). Then a few other costs: a print() through the log tee (minus a print
to the same sink without it), an HLC stamp, and a span query that builds records.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import timeit
from collections.abc import Callable

from monarch.telemetry import (
    Recorder,
    Store,
    StreamTee,
    begin_invocation,
    call_site,
    count_bytes,
    count_message,
    encode_batch,
    end_invocation,
    invocation_site,
    now,
    observe_handler_latency,
    set_process_recorder,
    start_site_span,
    start_span,
)

N = 20_000
BATCH = 100  # spans per shipped batch (a proc ships every 100 ms)
PARENT = (b"\x01" * 16, b"\x02" * 8)


def per_op(fn: Callable[[], object], reset: Callable[[], object], repeat: int = 7,
           number: int = N) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` runs of ``number`` calls."""
    runs = []
    for _ in range(repeat):
        runs.append(timeit.timeit(fn, number=number) / number)
        reset()
    return statistics.median(runs)


# -- what a proc does per invocation -------------------------------------------------------------

def invocation_before() -> None:
    """The runtime's calls per invocation before site spans: 1 span, 3 metric calls."""
    count_bytes("received", 128)
    span = start_span("trainer.step", PARENT, {"mesh": "trainer", "actor_class": "Trainer",
                                                "rank": 0, "method": "step", "bytes_in": 128})
    span.end("ok")
    count_message("trainer", "step")
    observe_handler_latency("trainer", "step", 0.0004)


def invocation_after() -> None:
    """The runtime's calls per invocation now: one site lookup, begin, end."""
    site = invocation_site("trainer", "Trainer", 0, "step")
    end_invocation(begin_invocation(site, PARENT, 128), "ok")


def call_before() -> None:
    """The caller's span of one call, before site spans."""
    start_span("call trainer.step", None, {"mesh": "trainer", "method": "step",
                                            "adverb": "broadcast"}, activate=False).end("ok")


def call_after() -> None:
    """The caller's span of one call now."""
    start_site_span(call_site("trainer", "step", "broadcast")).end("ok")


def drained_batches(recorder: Recorder, record: Callable[[], None], n: int) -> list[bytes]:
    """``n`` encoded batches of `BATCH` spans each, every span in its own trace."""
    batches = []
    for _ in range(n):
        for _ in range(BATCH):
            record()
        wire = recorder.drain(10**6)
        assert wire is not None
        batches.append(encode_batch(wire))
    return batches


def fresh_parent_invocation(after: bool) -> Callable[[], None]:
    """An invocation whose parent is a new trace (as one broadcast each)."""
    counter = itertools.count()

    def before() -> None:
        parent = (os.urandom(16), next(counter).to_bytes(8, "big"))
        span = start_span("trainer.step", parent, {"mesh": "trainer", "actor_class": "Trainer",
                                                    "rank": 0, "method": "step",
                                                    "bytes_in": 128})
        span.end("ok")

    def site() -> None:
        parent = (os.urandom(16), next(counter).to_bytes(8, "big"))
        end_invocation(begin_invocation(invocation_site("trainer", "Trainer", 0, "step"), parent,
                                        128), "ok")

    return site if after else before


def ingest_cost(batches: list[bytes], warm: int = 50_000) -> float:
    """Seconds per span of `Store.ingest` on a store already holding ``warm`` spans (so that
    each span ingested also evicts one)."""
    store = Store(max_spans=warm)
    cycle = itertools.cycle(batches)
    while store.statistics().held["span"] < warm:
        store.ingest(next(cycle))
    return per_op(lambda: store.ingest(next(cycle)), lambda: None, 7, 200) / BATCH


def main() -> None:
    quick = "--quick" in sys.argv
    repeat = 3 if quick else 7
    recorder = Recorder(max_spans=10**7, max_logs=10**7)
    recorder.configure({"host": "h", "proc": "trainer-0", "job": "j"})
    set_process_recorder(recorder)

    def clear() -> None:
        recorder.drain(10**8)

    def drain_encode() -> None:
        recorder.drain_bytes(10**6)

    rows: list[tuple[str, float, float]] = []

    def pair(name: str, before: Callable[[], object], after: Callable[[], object],
             number: int = N) -> None:
        rows.append((name, per_op(before, clear, repeat, number),
                     per_op(after, clear, repeat, number)))

    pair("proc: span + metrics per invocation", invocation_before, invocation_after)

    def batch_of(record: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(BATCH):
                record()
            drain_encode()
        return run

    span_only = per_op(invocation_before, clear, repeat), per_op(invocation_after, clear, repeat)
    with_drain = (per_op(batch_of(invocation_before), clear, repeat, 200) / BATCH,
                  per_op(batch_of(invocation_after), clear, repeat, 200) / BATCH)
    rows.append(("proc: drain + encode, per span", with_drain[0] - span_only[0],
                 with_drain[1] - span_only[1]))
    rows.append(("proc: total per invocation", *with_drain))
    pair("controller: call span start+end", call_before, call_after)

    generic = drained_batches(recorder, fresh_parent_invocation(False), 64)
    compact = drained_batches(recorder, fresh_parent_invocation(True), 64)
    rows.append(("controller: Store.ingest, per span", ingest_cost(generic),
                 ingest_cost(compact)))

    print(f"{'per operation (median of ' + str(repeat) + ')':45s} {'before':>9s} {'after':>9s}")
    for name, before, after in rows:
        print(f"{name:45s} {before * 1e6:7.2f} µs {after * 1e6:7.2f} µs")

    sink = open("/dev/null", "w")  # noqa: SIM115
    tee = StreamTee(sink, "stdout", recorder)
    bare = per_op(lambda: print("loss=0.25 step=100", file=sink), clear, repeat)
    teed = per_op(lambda: print("loss=0.25 step=100", file=tee), clear, repeat)  # type: ignore[arg-type]
    store = Store()
    for batch in compact[:10]:
        store.ingest(batch)
    others = {
        "print() through the tee (extra per line)": teed - bare,
        "HLC now()": per_op(now, clear, repeat),
        "Store.spans(limit=1000), per span returned": per_op(lambda: store.spans(limit=1000),
                                                            clear, repeat, 20) / 1000,
    }
    print()
    for name, seconds in others.items():
        print(f"{name:45s} {seconds * 1e6:7.2f} µs")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
