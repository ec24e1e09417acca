"""A job that calls 4 meshes of 8 actors in a loop (a 4 KiB argument, a line printed every 10
calls of each actor) until the controller's telemetry has filled every bound, then goes on
and samples its own RSS. Prints one JSON line per sample and a last one with the totals.

Run by tests/test_endurance.py with a small MONARCH_TELEMETRY_MB and its own history.
"""

from __future__ import annotations

import json
import sys

from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from leak_loop import Worker, rss_mb  # noqa: E402 - the loop of the issue, printing more

from monarch import admin  # noqa: E402
from monarch._runtime import _malloc  # noqa: E402
from monarch.actor import this_host  # noqa: E402

SAMPLE_CALLS = 8192  # actor invocations between samples
AFTER_FULL = 24  # samples taken once every bound is full


def full(stats: dict) -> bool:
    evicted = stats["store"]["evicted"]
    return all(evicted.get(kind, 0) > 0 for kind in ("span", "log"))


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 8})
    meshes = [procs.spawn(f"w{i}", Worker, 10) for i in range(4)]
    client = admin.connect()
    data = b"x" * 4096
    calls = lines = 0
    after = 0
    while after < AFTER_FULL:
        for _ in range(SAMPLE_CALLS // 32):
            for f in [m.step.call(data) for m in meshes]:
                f.get(timeout=60)
        calls += SAMPLE_CALLS
        lines = calls // 10
        stats = client.stats()
        filled = full(stats)
        after += filled
        # what the job keeps, not a history pass's passing peak (a Parquet compaction takes
        # ~10 MB for ~0.5 s): the free pages go back as the controller's watcher gives them
        # back every 10 s (`_malloc.trim`); what is still held stays in the figure
        _malloc.trim()
        print(json.dumps({"calls": calls, "rss_mb": rss_mb(), "full": filled,
                          "held_bytes": stats["store"]["held_bytes"],
                          "history": stats["history"]}), flush=True)
    procs.stop().get(timeout=60)
    dropped = {}
    for point in client.metrics():
        if point["name"] == "telemetry_dropped":
            kind = point["labels"].get("kind")
            dropped[kind] = dropped.get(kind, 0) + int(point["value"])
    counts = {table: client.query(f"SELECT count(*) AS n FROM {table}")["n"][0].as_py()
              for table in ("messages", "logs", "spans")}
    print(json.dumps({"done": True, "calls": calls, "lines": lines, "counts": counts,
                      "dropped": dropped, "history": client.stats()["history"]}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
