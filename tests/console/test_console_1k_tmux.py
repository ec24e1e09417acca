"""`monarch top` on a job of 1,024 actors, in a real terminal (issue 32): 64 procs × 16 meshes,
one rank of the mesh `train` stuck loading its batch while the 63 others wait in `all_reduce`.
The console finds the mesh, groups the 64 stacks (the odd rank first), draws the timeline and
the grid, and kills the stuck rank through the grid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_console_tmux import MONARCH, Tmux
from waiting import wait_gone, wait_until

pytestmark = [pytest.mark.timeout(420)]

SCRIPT = Path(__file__).with_name("bigjob.py")


class BigJob:
    """bigjob.py as a subprocess in a private run directory (stall threshold 2 s)."""

    def __init__(self, run_dir: Path) -> None:
        self.env = dict(os.environ, MONARCH_RUN_DIR=str(run_dir), MONARCH_STALL_S="2",
                        NO_COLOR="1", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=self.env)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        ready = wait_until(lambda: next((x for x in self.lines if x.startswith("READY ")), None),
                           lambda: f"the job to be ready; it printed: {self.lines[-20:]}", 180)
        self.job_id = ready.split()[1]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def ps(self) -> dict[str, dict]:
        done = subprocess.run([MONARCH, "ps", "--json"], capture_output=True, text=True,
                              timeout=60, env=self.env)
        assert done.returncode == 0, done.stderr
        return {(r["mesh"], r["rank"]): r for r in json.loads(done.stdout)}

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


def test_a_job_of_1024_actors_in_a_terminal(tmp_path):
    job = BigJob(tmp_path / "run")
    tmux = None
    try:
        rows = wait_until(lambda: (lambda r: r if sum(
            1 for (mesh, _), row in r.items() if mesh == "train" and row.get("running")) == 64
            else None)(job.ps()), "the 64 ranks of train in step", 120)
        assert sum(1 for mesh, _ in rows if mesh != "debug_controller") == 1024
        pids = {row["pid"] for row in rows.values()}
        stuck_pid = rows[("train", 7)]["pid"]

        env = {k: v for k, v in job.env.items() if k.startswith(("MONARCH_", "NO_"))}
        tmux = Tmux(f"c1k{os.getpid()}", f"{MONARCH} top --job {job.job_id} --refresh 0.5", env)
        tmux.wait("train", "m15", "k kill", timeout=90)
        tmux.keys(":")
        tmux.wait("or a slice: gpus=0:4")  # the command line is open
        tmux.type("meshes")
        tmux.wait_re(r":meshes · (\d+) of \1")
        tmux.keys("/")
        tmux.wait("filter: a regular expression")
        tmux.type("^train$")
        tmux.wait_re(r":meshes · 1 of \d+ · /\^train\$")
        tmux.keys("Enter")  # back to the tree, on the mesh
        tmux.wait("topology", "logs")

        tmux.keys("S")  # every rank's stack, grouped: the odd one out first
        screen = tmux.wait("train", "64 ranks, 2 distinct stacks", timeout=120)
        assert "rank 7: load_batch ← step" in screen, screen
        assert "ranks 0-6,8-63: all_reduce ← step" in screen, screen
        assert screen.index("rank 7: load_batch") < screen.index("ranks 0-6,8-63")
        tmux.keys("Escape")
        tmux.wait_gone("distinct stacks")

        tmux.keys("t")  # the timeline: 64 lanes, each rank in its handler up to now
        tmux.wait("timeline train", "64 lane(s)", "▶ step", timeout=60)
        tmux.keys("Escape")
        tmux.wait_gone("lane(s)")

        tmux.keys("v")  # the grid: 8 × 8 cells, all stalled
        tmux.wait("grid train {hosts: 8, gpus: 8}", "64 ranks", "64 stalled !", timeout=60)
        for _ in range(7):
            tmux.keys("Right")
        tmux.wait("rank 7 (hosts=0, gpus=7)", "in step")
        tmux.keys("k")
        tmux.wait("Kill train rank 7 (hosts=0, gpus=7)?", f"(pid {stuck_pid})")
        tmux.keys("y")
        tmux.wait("1 failed", timeout=60)
        wait_gone(stuck_pid)
        states = {rank: row["state"] for (mesh, rank), row in job.ps().items()
                  if mesh == "train"}
        assert {r for r, s in states.items() if s != "running"} == {7}
        wait_until(lambda: any(line.endswith("FAILED train") for line in job.lines),  # the
                   # script heard of it, and goes on
                   lambda: f"train's failure reported: {job.lines}", 30)
        tmux.keys("Escape")  # alone: a key right after it would read as alt+key
        tmux.wait_gone("grid train")
        tmux.keys("q")
        tmux.wait("EXITED 0")
    finally:
        if tmux is not None:
            tmux.kill()
        job.stop()
    wait_gone(*pids)  # the procs of a dead controller follow it
