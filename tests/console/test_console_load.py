"""Responsiveness with 64 actors streaming logs: the console keeps refreshing and answering
keys. Each key press waits on its effects (the cursor moved, a new snapshot shown, more log
lines taken); how fast that went is a measurement, printed (run with `-s`), never asserted."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import tempfile
import time
from typing import Any

import pytest
from demojob import DemoJob
from drive import wait_for
from monarch.console.app import MonarchTop

pytestmark = pytest.mark.timeout(240)

LOGGERS, RATE, PRESSES = 64, 10.0, 20


def chatty_rows(app: MonarchTop) -> list:
    return [r for r in app.mesh_tree.rows_shown
            if r.kind == "actor" and r.label.startswith("chatty")]


async def press_and_see(pilot: Any, app: MonarchTop, key: str) -> tuple[float, float]:
    """Presses `key` (j or up), then waits for the cursor to move one row, a new snapshot to be
    shown and more log lines to come in; returns (ms the press took, ms until the cursor
    moved)."""
    row, snapshot, received = app.mesh_tree.cursor_row, app.snapshot, app.logs.received
    before = time.perf_counter()
    await pilot.press(key)
    took = (time.perf_counter() - before) * 1000
    await wait_for(pilot, lambda: app.mesh_tree.cursor_row == row + (1 if key == "j" else -1),
                   60, f"{key} to move the cursor from row {row}")
    moved = (time.perf_counter() - before) * 1000
    await wait_for(pilot, lambda: app.snapshot is not snapshot, 60, "a new snapshot shown")
    await wait_for(pilot, lambda: app.logs.received > received, 60, "more log lines")
    return took, moved


async def test_64_actors_streaming_logs(tmp_path, capsys):
    job = DemoJob(tmp_path, "--loggers", str(LOGGERS), "--log-rate", str(RATE))
    try:
        job.wait_ready(("trainers",))
        app = MonarchTop(job.client, refresh=0.5)
        async with app.run_test(size=(200, 50)) as pilot:
            await wait_for(pilot, lambda: len(chatty_rows(app)) == LOGGERS, 60,
                           "64 chatty actors")
            await wait_for(pilot, lambda: any("chatty rank" in line.text
                                              for line in app.log_pane.shown_lines))
            received0, started = app.logs.received, time.monotonic()
            ingested0 = job.client.stats()["store"]["ingested"]["log"]
            presses, answered = [], []
            for step in range(PRESSES):
                took, moved = await press_and_see(pilot, app, "j" if step % 10 < 5 else "up")
                presses.append(took)
                answered.append(moved)
            elapsed = time.monotonic() - started
            ingested = job.client.stats()["store"]["ingested"]["log"] - ingested0
            stats = app.statistics(window_s=elapsed)
            feed = app.feed.statistics()
            report = {
                "actors streaming": LOGGERS,
                "lines/s the job logged": round(ingested / elapsed, 1),
                "lines/s the console received": round((app.logs.received - received0) / elapsed,
                                                      1),
                "screen updates/s": round(stats.updates_per_s, 2),
                "log pane renders/s (cap 4)": round(stats.log_renders_per_s, 2),
                "topology refreshes/s (cap 2)": round(stats.snapshots_per_s, 2),
                "timer lag ms p50/p99/max": (round(stats.tick_lag_ms_p50, 1),
                                             round(stats.tick_lag_ms_p99, 1),
                                             round(stats.tick_lag_ms_max, 1)),
                "key press handled ms p50/max": (round(statistics.median(presses), 1),
                                                 round(max(presses), 1)),
                "cursor moved ms p50/max": (round(statistics.median(answered), 1),
                                            round(max(answered), 1)),
                "poll ms (last)": round(feed.last_poll_ms, 1),
                "log records dropped": feed.logs_dropped,
            }
            with capsys.disabled():
                print("\nconsole under load:", report)
            assert app.is_running
    finally:
        job.stop()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_64_actors_in_a_real_terminal(capsys):
    """`monarch demo --loggers 64` (without its grid of workers) in tmux: every key press
    moves the selection and the header keeps ticking; its refresh rate, read off the screen,
    is printed."""
    from test_console_tmux import MONARCH, Tmux

    run_dir = tempfile.mkdtemp(prefix="ct-")
    tmux = Tmux(f"cload-{os.getpid()}", f"{MONARCH} demo --grid 0 --loggers {LOGGERS} "
                f"--refresh 0.5", {"MONARCH_RUN_DIR": run_dir})
    try:
        tmux.wait("chatty0", "chatty rank", timeout=120)
        rates, moved_ms = [], []
        for press in range(PRESSES):
            detail = tmux.wait_re(r"detail: (.+?) ─").group(1)
            uptime = tmux.wait_re(r" up (\S+) • ").group(1)
            before = time.monotonic()
            tmux.keys("j" if press % 10 < 5 else "Up")
            tmux.wait_re(rf"detail: (?!{re.escape(detail)} ─).+? ─", timeout=60)
            moved_ms.append((time.monotonic() - before) * 1000)
            tmux.wait_re(rf" up (?!{re.escape(uptime)} • )\S+ • ", timeout=60)  # still ticking
            rates.append(float(tmux.wait_re(r"([\d.]+) fps").group(1)))
        with capsys.disabled():
            print(f"\nmonarch top in tmux, {LOGGERS} actors streaming: header refresh rate "
                  f"{min(rates):.1f}-{max(rates):.1f} updates/s (median "
                  f"{statistics.median(rates):.1f}); a key press moved the selection in "
                  f"{statistics.median(moved_ms):.0f} ms (median), {max(moved_ms):.0f} ms "
                  "at most")
        tmux.keys("q")
        tmux.wait("EXITED 0", timeout=60)
    finally:
        tmux.kill()
        shutil.rmtree(run_dir, ignore_errors=True)
