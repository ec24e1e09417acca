"""Responsiveness with 64 actors streaming logs: the console keeps refreshing and answering
keys. A measurement, printed (run with `-s`), never a timed assertion."""

from __future__ import annotations

import statistics
import time

import pytest
from demojob import DemoJob
from drive import wait_for

from monarch.console.app import MonarchTop

pytestmark = pytest.mark.timeout(240)

LOGGERS, RATE, SECONDS = 64, 10.0, 20.0


async def test_64_actors_streaming_logs(tmp_path, capsys):
    job = DemoJob(tmp_path, "--loggers", str(LOGGERS), "--log-rate", str(RATE))
    try:
        job.wait_ready(("trainers",))
        app = MonarchTop(job.client, refresh=0.5)
        async with app.run_test(size=(200, 50)) as pilot:
            chatty = lambda: [r for r in app.mesh_tree.rows_shown  # noqa: E731
                              if r.kind == "actor" and r.label.startswith("chatty")]
            await wait_for(pilot, lambda: len(chatty()) == LOGGERS, 60, "64 chatty actors")
            await wait_for(pilot, lambda: any("chatty rank" in line.text
                                              for line in app.log_pane.shown_lines))
            received0, started = app.logs.received, time.monotonic()
            ingested0 = job.client.stats()["store"]["ingested"]["log"]
            presses = []
            while time.monotonic() - started < SECONDS:
                before = time.perf_counter()
                await pilot.press("j" if len(presses) % 20 < 10 else "up")
                presses.append((time.perf_counter() - before) * 1000)
                await pilot.pause(0.25)
            elapsed = time.monotonic() - started
            ingested = job.client.stats()["store"]["ingested"]["log"] - ingested0
            window = [t for t in app._ticks if t[0] >= started]
            lags = sorted(t[1] * 1000 for t in window)
            feed = app.feed.statistics()
            report = {
                "actors streaming": LOGGERS,
                "lines/s the job logged": round(ingested / elapsed, 1),
                "lines/s the console received": round((app.logs.received - received0) / elapsed,
                                                      1),
                "screen updates/s": round(sum(t[2] or t[3] for t in window) / elapsed, 2),
                "log pane renders/s (cap 4)": round(sum(t[3] for t in window) / elapsed, 2),
                "topology refreshes/s (cap 2)": round(sum(t[2] for t in window) / elapsed, 2),
                "timer lag ms p50/p99/max": (round(lags[len(lags) // 2], 1),
                                             round(lags[int(len(lags) * 0.99)], 1),
                                             round(lags[-1], 1)),
                "key press handled ms p50/max": (round(statistics.median(presses), 1),
                                                 round(max(presses), 1)),
                "poll ms (last)": round(feed.last_poll_ms, 1),
                "log records dropped": feed.logs_dropped,
            }
            with capsys.disabled():
                print("\nconsole under load:", report)
            assert app.logs.received > received0  # the logs kept coming in
            assert app.mesh_tree.cursor_row >= 0 and app.is_running
    finally:
        job.stop()
