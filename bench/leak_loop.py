"""The loop that found the controller's memory growth (issue 28), runnable under this project
and under torchmonarch 0.7.0 alike (public API only): 4 meshes of 8 actors called in a loop
with a 4 KiB argument, each actor printing a line every 50 of its calls. Prints the controller's
RSS every `--every` seconds as JSON lines, then a summary.

    python bench/leak_loop.py --minutes 5 [--every 30]
    /opt/ref/venv/bin/python bench/leak_loop.py --minutes 5    # from outside the checkout
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from monarch.actor import Actor, current_rank, endpoint, this_host


class Worker(Actor):
    """Answers the size of its argument; prints a line every `every` of its calls."""

    def __init__(self, every: int = 50) -> None:
        self.n, self.every = 0, every

    @endpoint
    def step(self, data: bytes) -> int:
        self.n += 1
        if self.n % self.every == 0:
            print(f"rank {current_rank().rank} step {self.n}", flush=True)
        return len(data)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--every", type=float, default=30.0)
    args = parser.parse_args()
    procs = this_host().spawn_procs(per_host={"gpus": 8})
    meshes = [procs.spawn(f"m{i}", Worker) for i in range(4)]
    data = b"x" * 4096
    start = time.monotonic()
    calls, next_sample, series = 0, start, []
    while time.monotonic() - start < args.minutes * 60:
        for future in [m.step.call(data) for m in meshes]:
            future.get()
        calls += 32
        if time.monotonic() >= next_sample:
            sample = {"t": round(time.monotonic() - start), "calls": calls, "rss_mb": rss_mb()}
            series.append(sample)
            print(json.dumps(sample), file=sys.stderr, flush=True)
            next_sample += args.every
    elapsed = time.monotonic() - start
    procs.stop().get()
    print(json.dumps({"calls": calls, "seconds": round(elapsed, 1),
                      "calls_per_s": round(calls / elapsed), "series": series}),
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
