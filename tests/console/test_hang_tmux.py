"""A deadlocked pair of actors explains itself: `monarch ps --json` names both handlers with
growing running seconds, `monarch top` shows them stalled (tmux), SQL answers on the live job,
and after a SIGKILL of the controller the job's history answers the same questions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_console_tmux import MONARCH, Tmux
from waiting import wait_gone, wait_until

pytestmark = [pytest.mark.timeout(240)]

SCRIPT = Path(__file__).with_name("hangjob.py")


class HangJob:
    """hangjob.py as a subprocess in a private run directory, with a 1 s stall threshold."""

    def __init__(self, run_dir: Path) -> None:
        self.env = dict(os.environ, MONARCH_RUN_DIR=str(run_dir), MONARCH_STALL_S="1",
                        MONARCH_HISTORY="1", NO_COLOR="1", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=self.env)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        ready = wait_until(lambda: next((x for x in self.lines if x.startswith("READY ")), None),
                           "the job to be ready", 90)
        self.job_id = ready.split()[1]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def monarch(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([MONARCH, *args], capture_output=True, text=True, timeout=60,
                              env=self.env)

    def json(self, *args: str) -> object:
        done = self.monarch(*args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def rows(self, *args: str) -> list[dict]:
        done = self.monarch(*args)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]


def _by_mesh(rows: list[dict]) -> dict[str, dict]:
    return {r["mesh"]: r for r in rows}


def _both_running(job: HangJob) -> dict[str, dict] | None:
    rows = _by_mesh(job.json("ps", "--json"))
    ok = all(rows.get(m, {}).get("running") for m in ("generator", "scorer"))
    return rows if ok else None


def test_a_deadlocked_pair_is_named_shown_stalled_and_queryable_after_sigkill(tmp_path):
    job = HangJob(tmp_path / "run")
    tmux = None
    try:
        first = wait_until(lambda: _both_running(job), "both handlers reported", 60)
        gen, sco = first["generator"], first["scorer"]
        assert gen["running_method"] == "generate" and gen["running"][0]["caller"] == "root"
        assert gen["queued_methods"] == ["weights"]
        assert sco["running_method"] == "score"
        assert sco["running"][0]["caller"] == gen["actor_id"]
        assert sco["running"][0]["trace_id"] == gen["running"][0]["trace_id"]
        assert isinstance(gen["running_s"], float)
        later = wait_until(lambda: (lambda r: r if r["generator"]["running_s"]
                                    > gen["running_s"] + 0.5 and r["generator"]["stalled"]
                                    and r["scorer"]["stalled"] else None)(
            _by_mesh(job.json("ps", "--json"))), "running seconds to grow past 1 s", 60)
        assert later["scorer"]["running_s"] > sco["running_s"]
        stalled = job.json("ps", "--stalled", "--json")
        assert sorted(r["mesh"] for r in stalled) == ["generator", "scorer"]
        text = job.monarch("ps").stdout
        assert "in generate for" in text and "in score for" in text and "stalled" in text

        sql = ("SELECT mesh, running_method, caller, queued_methods, stalled FROM actors "
               "WHERE mesh IN ('generator', 'scorer') ORDER BY mesh")
        expected = [{"mesh": "generator", "running_method": "generate", "caller": "root",
                     "queued_methods": "weights", "stalled": True},
                    {"mesh": "scorer", "running_method": "score", "caller": gen["actor_id"],
                     "queued_methods": "", "stalled": True}]
        assert job.rows("query", "--json", sql) == expected
        bad = job.monarch("query", "SELECT nope FROM actors")
        assert bad.returncode == 2 and "nope" in bad.stderr  # the engine's message

        tmux = Tmux(f"mhang{os.getpid()}", f"{MONARCH} top --job {job.job_id} --refresh 0.3",
                    {k: v for k, v in job.env.items() if k.startswith(("MONARCH_", "NO_"))})
        screen = tmux.wait("generator[0]", "scorer[0]", "◷ stalled", "in generate for",
                           "in score for", timeout=60)
        assert "stalled" in screen
        tmux.keys("Q")
        tmux.wait("query (DataFusion SQL)")
        tmux.keys("Enter")
        tmux.wait("running_method", "generate", "score", "rows", timeout=30)
        tmux.keys("Escape")
        tmux.keys("q")

        pids = [r["pid"] for r in first.values()]
        history = tmp_path / "run" / "history" / job.job_id
        wait_until(lambda: _stalled_in_history(history) == {"generator", "scorer"},
                   "both stalls written to the history", 30)
        os.kill(job.proc.pid, signal.SIGKILL)
        job.proc.wait(30)
        wait_gone(*pids)  # the procs of a dead controller follow it

        (row,) = [r for r in job.json("jobs", "--json") if r["job_id"] == job.job_id]
        assert row["state"] == "crashed" and row["history"] == str(history)
        assert job.rows("query", "--job", job.job_id, "--json", sql) == expected
        events = job.rows("query", "--job", job.job_id, "--json",
                          "SELECT mesh, detail FROM actor_status_events "
                          "WHERE event = 'stalled' ORDER BY mesh")
        assert events == [{"mesh": "generator", "detail": "generate"},
                          {"mesh": "scorer", "detail": "score"}]
        handled = job.rows("query", "--job", job.job_id, "--json",
                           "SELECT mesh, method, sender FROM messages "
                           "WHERE mesh <> 'debug_controller' ORDER BY mesh")
        assert handled == [{"mesh": "generator", "method": "meet", "sender": "root"},
                           {"mesh": "scorer", "method": "meet", "sender": "root"}]
        logs = job.monarch("logs", "--job", job.job_id)
        assert "generating" in logs.stdout and "scoring" in logs.stdout, logs.stderr
    finally:
        if tmux is not None:
            tmux.tmux("kill-server")
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait(30)


def _stalled_in_history(history: Path) -> set[str]:
    """The meshes with a `stalled` event in the history's Parquet files so far."""
    import pyarrow.parquet as pq

    meshes = set()
    for path in sorted((history / "actor_status_events").glob("*.parquet")):
        table = pq.read_table(path, columns=["mesh", "event"]).to_pylist()
        meshes |= {row["mesh"] for row in table if row["event"] == "stalled"}
    return meshes
