"""Micro-benchmark of telemetry's hot paths (a few seconds; no processes, no sockets).

    python bench/telemetry_micro.py

Prints the median cost per operation of: a lean span start+end, a print() through the log tee
(minus a print to the same sink without it), the metric hooks the runtime calls per message,
an HLC stamp, and draining + encoding a batch.
"""

from __future__ import annotations

import statistics
import sys
import timeit
from collections.abc import Callable

from monarch.telemetry import (
    Recorder,
    StreamTee,
    count_bytes,
    count_message,
    encode_batch,
    now,
    observe_handler_latency,
    set_process_recorder,
    start_span,
)

N = 20_000


def per_op(fn: Callable[[], object], reset: Callable[[], object], repeat: int = 7,
           number: int = N) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` runs of ``number`` calls."""
    runs = []
    for _ in range(repeat):
        runs.append(timeit.timeit(fn, number=number) / number)
        reset()
    return statistics.median(runs)


def main() -> None:
    recorder = Recorder(max_spans=10**7, max_logs=10**7)
    set_process_recorder(recorder)
    clear = lambda: recorder.drain(10**8)
    parent = (b"\x01" * 16, b"\x02" * 8)

    def span() -> None:
        h = start_span("Trainer.step", parent, {"mesh": "trainer", "rank": 0, "method": "step"})
        h.end("ok")

    def hooks() -> None:
        count_message("trainer", "step")
        observe_handler_latency("trainer", "step", 0.0004)
        count_bytes("received", 128)

    sink = open("/dev/null", "w")  # noqa: SIM115
    tee = StreamTee(sink, "stdout", recorder)
    bare = per_op(lambda: print("loss=0.25 step=100", file=sink), clear)
    teed = per_op(lambda: print("loss=0.25 step=100", file=tee), clear)  # type: ignore[arg-type]

    def batch() -> None:
        for _ in range(100):
            span()
        encode_batch(recorder.drain(10**6) or [])

    results = {
        "lean span start+end": per_op(span, clear),
        "print() through the tee (extra per line)": teed - bare,
        "metric hooks per message (3 calls)": per_op(hooks, clear),
        "HLC now()": per_op(now, clear),
        "span + drain + encode, per span (batches of 100)": per_op(batch, clear, 5, 200) / 100,
    }
    for name, seconds in results.items():
        print(f"{name:45s} {seconds * 1e6:7.2f} µs")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
