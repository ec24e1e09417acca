"""Hours, not minutes: the controller's memory stays within its telemetry budget however long
a job calls its meshes, and nothing the actors emit is lost on the way to SQL.

The job (`tests/endurance_loop.py`, its own controller) runs the loop of a real training
script with a small budget, so every bound fills within seconds, then goes on; its RSS is
sampled by calls made, never by time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from monarch.actor import Actor, endpoint, this_host

pytestmark = pytest.mark.timeout(600)

LOOP = Path(__file__).with_name("endurance_loop.py")


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    return (sum((x - mx) * (y - my) for x, y in points)
            / sum((x - mx) ** 2 for x, _ in points))


def test_memory_stops_growing_once_the_budget_is_full_and_nothing_is_lost(
        tmp_path: Path) -> None:
    env = dict(os.environ, MONARCH_RUN_DIR=str(tmp_path / "run"), MONARCH_HISTORY="1",
               MONARCH_TELEMETRY_MB="24")
    out = subprocess.run([sys.executable, str(LOOP)], capture_output=True, text=True,
                         env=env, timeout=540, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    samples, (done,) = rows[:-1], rows[-1:]
    full = [s for s in samples if s["full"]]
    assert len(full) >= 24, "the loop stopped before it filled the store's bounds"

    # every part stays within its share of the 24 MB, and the RSS stops growing with it:
    # the code before the budget grew ~70 MB per 100k calls here
    for s in full:
        assert sum(v for k, v in s["held_bytes"].items()) <= 24e6
    after = full[4:]  # past the warm-up of the first full samples
    per_100k = _slope([(s["calls"], s["rss_mb"]) for s in after]) * 100_000
    series = [round(s["rss_mb"]) for s in samples]
    assert per_100k < 4.0, f"RSS grows {per_100k:.1f} MB per 100k calls: {series}"
    first, last = after[:6], after[-6:]
    growth = sum(s["rss_mb"] for s in last) / 6 - sum(s["rss_mb"] for s in first) / 6
    assert growth < 15, f"RSS grew {growth:.0f} MB once full: {series}"

    # what the store evicted was in the history first: SQL counts every record emitted
    calls = done["calls"]
    assert done["dropped"] == {} and done["history"]["lost"] == 0, done
    assert done["counts"] == {"messages": calls,  # one flight-record entry per invocation
                              "spans": calls + calls // 8,  # and a call span per mesh call
                              "logs": 32 * (calls // 32 // 10)}, done


class Pinger(Actor):
    @endpoint
    def ping(self) -> int:
        return 1


def test_a_job_that_spawns_and_stops_meshes_keeps_the_newest_ended_records(
        fault_log: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records of ended procs and meshes (the console's and CLI's view of the past) are bounded:
    past `KEEP_ENDED` the oldest go, with what the job kept of them."""
    from monarch._controller import _supervisor
    from monarch._controller._job import current_job

    monkeypatch.setattr(_supervisor, "KEEP_ENDED", 4)
    monkeypatch.setattr(_supervisor, "FORGET_STEP", 2)
    spawned = []
    for i in range(6):
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        mesh = procs.spawn(f"churn{i}", Pinger)
        assert mesh.ping.call().get(timeout=60).item(gpus=1) == 1
        procs.stop().get(timeout=60)
        spawned.append(procs._procs)
    job = current_job()
    supervisor = job.supervisor
    known = job._on_io(lambda: ({r.procs for r in supervisor.procs.values()},
                                {m.name for m in supervisor.meshes.values()},
                                set(job.proc_extents)))().get(timeout=10)
    procs_known, meshes_known, extents = known
    # 12 procs ended (and those of earlier tests): past 4 + 2, back to the newest 4
    assert set(spawned[:3]).isdisjoint(procs_known | extents)
    assert len(supervisor._ended) <= 6
    assert spawned[-2:] == [p for p in spawned if p in procs_known][-2:]
    assert {"churn0", "churn1", "churn2"}.isdisjoint(meshes_known)
    assert {"churn4", "churn5"} <= meshes_known
