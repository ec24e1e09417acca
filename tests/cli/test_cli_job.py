"""The `monarch` command against a running example job (real processes, a private run dir).

Tests that only look share the module's job and leave every rank running; a test that kills,
stops or ends a job has one of its own, so the tests pass in any order.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest
from waiting import wait_until

pytestmark = pytest.mark.timeout(180)


def pids_by_rank(status: dict) -> dict[int, int]:
    pids = {p["proc"]: p["pid"] for h in status["hosts"] for p in h["procs"]}
    (workers,) = [m for m in status["meshes"] if m["name"] == "workers"]
    return {a["rank"]: pids[a["proc"]] for a in workers["actors"]}


def test_status_json_lists_every_rank(job, helpers):
    def counted() -> dict | None:  # each rank's first tick, once the controller counted it
        result = job.monarch("status", "--json")
        assert result.returncode == 0, result.stderr
        status = helpers.json_out(result)
        (workers,) = [m for m in status["meshes"] if m["name"] == "workers"]
        return status if all(a["messages"] >= 1 for a in workers["actors"]) else None

    status = wait_until(counted, "every worker's first message counted")
    assert status["job"]["job_id"] == job.job_id and status["job"]["health"] == "ok"
    (workers,) = [m for m in status["meshes"] if m["name"] == "workers"]
    assert workers["extent"] == {"labels": ["gpus"], "sizes": [4]}
    assert [a["rank"] for a in workers["actors"]] == [0, 1, 2, 3]
    assert [a["point"] for a in workers["actors"]] == [{"gpus": r} for r in range(4)]
    assert [a["state"] for a in workers["actors"]] == ["running"] * 4
    assert sorted(pids_by_rank(status)) == [0, 1, 2, 3]
    assert all(pid > 0 for pid in pids_by_rank(status).values())
    procs = [p for h in status["hosts"] for p in h["procs"]]
    assert {p["proc"] for p in procs} >= {a["proc"] for a in workers["actors"]} | {"controller"}
    text = job.monarch("status")
    assert text.returncode == 0 and "workers[3] __main__.Worker  running" in text.stdout
    ps = helpers.json_out(job.monarch("ps", "--json"))
    # (a debug session, if one ran earlier, adds the job's debug_controller)
    assert [(r["mesh"], r["rank"]) for r in ps if r["mesh"] != "debug_controller"] == [
        ("workers", r) for r in range(4)]


def test_logs_follow_one_rank(job):
    follower = subprocess.Popen(
        [sys.executable, "-m", "monarch.cli", "logs", "workers", "--rank", "2", "-f", "--json",
         "-n", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=job.env)
    try:
        seen = []
        assert follower.stdout is not None
        for line in follower.stdout:
            seen.append(json.loads(line))
            if len(seen) == 5:
                break
        assert all(r["mesh"] == "workers" and r["rank"] == 2 for r in seen), seen
        ticks = [int(r["text"].split()[1]) for r in seen]
        assert all(r["text"].endswith("rank 2") for r in seen)
        assert ticks == sorted(ticks) and len(set(ticks)) == 5
    finally:
        os.kill(follower.pid, signal.SIGINT)
        follower.wait(20)
    plain = job.monarch("logs", "workers", "-r", "1", "-n", "3")
    assert plain.returncode == 0 and len(plain.stdout.splitlines()) == 3
    assert all(" workers[1] tick " in line for line in plain.stdout.splitlines())


def test_debug_attaches_evaluates_and_continues(job):
    job.send("pause 1")
    script = "list\nattach workers 1\np secret * 100\nc\nq\n"
    # the session registers asynchronously: `list` until it shows up, then drive it
    wait_until(lambda: "| workers" in job.monarch("debug", input="list\nq\n").stdout,
               "the paused rank's debugger session", 60, interval=0.2)
    result = job.monarch("debug", input=script)
    assert result.returncode == 0, result.stderr
    assert "monarch_dbg> " in result.stdout and "| workers" in result.stdout
    assert "(Pdb) " in result.stdout and "2200" in result.stdout
    assert "session workers[1] ended" in result.stdout
    job.wait_line(r"^PAUSED-RESULT 1 23$", 60)


def test_stack_diagnose_trace_and_query(job, helpers, tmp_path):
    status = helpers.json_out(job.monarch("status", "--json"))
    stack = job.monarch("stack", "workers", "2")
    assert stack.returncode == 0, stack.stderr
    assert f"Process {pids_by_rank(status)[2]}" in stack.stdout and "Thread" in stack.stdout
    diagnose = job.monarch("diagnose", "--json")
    assert diagnose.returncode == 0 and helpers.json_out(diagnose)["ok"]
    out = tmp_path / "trace.json"

    def traced() -> bool:
        assert job.monarch("trace", "export", "-o", str(out)).returncode == 0
        return {e["name"] for e in json.loads(out.read_text())["traceEvents"]
                if e["ph"] == "X"} >= {"call workers.tick", "workers.tick"}

    wait_until(traced, "a tick's call and handler spans in the trace")

    def ticks() -> dict | None:  # more than the first tick of each rank: the ticker runs
        query = job.monarch("query", "--json",
                            "SELECT mesh, method, sum(value) AS value FROM metrics "
                            "WHERE name = 'messages_handled' AND method = 'tick' "
                            "AND mesh = 'workers' GROUP BY mesh, method")
        assert query.returncode == 0, query.stderr
        rows = [json.loads(line) for line in query.stdout.splitlines()]
        return rows[0] if len(rows) == 1 and rows[0]["value"] > 4 else None

    metric = wait_until(ticks, "more than 4 ticks handled")
    assert (metric["mesh"], metric["method"]) == ("workers", "tick")
    bad = job.monarch("query", "nonsense")
    assert bad.returncode == 2 and "SQL error" in bad.stderr


def test_errors_are_clear_and_exit_non_zero(job):
    wrong = job.monarch("--token", "nope", "status")
    assert wrong.returncode == 1 and "invalid token" in wrong.stderr
    empty = tempfile.mkdtemp(prefix="mnone")
    nojob = job.monarch("status", env=dict(job.env, MONARCH_RUN_DIR=empty))
    assert nojob.returncode == 3 and "no running monarch job" in nojob.stderr
    os.rmdir(empty)
    unknown = job.monarch("kill", "ghosts", "--yes")
    assert unknown.returncode == 1 and "no mesh 'ghosts'" in unknown.stderr
    bad_slice = job.monarch("kill", "workers", "--slice", "gpus=7", "--yes")
    assert bad_slice.returncode == 1 and "out of range" in bad_slice.stderr
    # a filter that matches nothing is an error naming what exists, not an empty success
    for command, message in ((["logs", "nosuchmesh"], "no mesh 'nosuchmesh'; the job has: "),
                             (["logs", "workers", "--rank", "99"], "no rank 99: workers has"),
                             (["trace", "export", "--mesh", "nosuch", "-o", "-"],
                              "no mesh 'nosuch'")):
        out = job.monarch(*command)
        assert out.returncode == 1 and message in out.stderr, (command, out.stderr)
        assert not out.stdout
    negative = job.monarch("logs", "-n", "-5")
    assert negative.returncode == 2 and "Traceback" not in negative.stderr
    drop = job.monarch("query", "DROP TABLE actors")
    assert drop.returncode == 2 and "only queries run here" in drop.stderr
    syntax = job.monarch("stop", "workers", "-s", "gpus=(", "--yes")
    assert syntax.returncode == 1 and "unbalanced parentheses" in syntax.stderr
    for command in (["--addr", "garbage", "--token", "x", "status"],
                    ["top", "--addr", "garbage"]):  # a usage error, not a traceback
        typo = job.monarch(*command)
        assert typo.returncode == 2, typo.stderr
        assert "not a host:port address: 'garbage'" in typo.stderr
        assert "Traceback" not in typo.stderr


@pytest.mark.parametrize(("setting", "value", "message"), [
    ("MONARCH_METRICS_PORT", "notaport", "MONARCH_METRICS_PORT='notaport': expected a whole"),
    ("MONARCH_STALL_S", "-5", "MONARCH_STALL_S='-5': expected a number above 0"),
    ("MONARCH_TELEMETRY_MB", "lots", "MONARCH_TELEMETRY_MB='lots': expected a number"),
    ("MONARCH_ADMIN_ADDR", "127.0.0.1:port", "MONARCH_ADMIN_ADDR must be host:port"),
])
def test_a_setting_that_does_not_read_stops_the_job_saying_which(tmp_path, setting, value,
                                                                 message):
    script = tmp_path / "s.py"
    script.write_text("from monarch.actor import this_host\nthis_host()\nprint('started')\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path,
                         env=dict(os.environ, MONARCH_RUN_DIR=str(tmp_path / "run"),
                                  **{setting: value}))
    assert out.returncode != 0 and "started" not in out.stdout
    assert message in out.stderr.splitlines()[-1]
    assert not [p for p in (tmp_path / "run").glob("*") if p.name != "history"]  # no job dir


def test_kill_ends_exactly_the_selected_ranks(fresh_job, helpers):
    job = fresh_job
    before = pids_by_rank(helpers.json_out(job.monarch("status", "--json")))
    declined = job.monarch("kill", "workers", "--slice", "gpus=0:2", input="n\n")
    assert declined.returncode == 1 and "aborted" in declined.stderr
    assert "2 process(es)" in declined.stderr
    result = job.monarch("kill", "workers", "--slice", "gpus=0:2", "--yes", "--json")
    assert result.returncode == 0, result.stderr
    killed = helpers.json_out(result)["killed"]
    assert sorted((k["rank"], k["pid"]) for k in killed) == [(0, before[0]), (1, before[1])]
    assert helpers.pid_gone(before[0]) and helpers.pid_gone(before[1])
    job.wait_line(r"^FAILURE workers 0 signal=9$")
    job.wait_line(r"^FAILURE workers 1 signal=9$")
    for rank in (2, 3):
        os.kill(before[rank], 0)  # still there
    after = job.monarch("status", "--json")
    assert after.returncode == 1  # the job is degraded
    status = helpers.json_out(after)
    assert status["job"]["health"] == "degraded"
    states = {a["rank"]: a["state"] for m in status["meshes"] for a in m["actors"]
              if m["name"] == "workers"}
    assert states == {0: "failed", 1: "failed", 2: "running", 3: "running"}
    failures = {(f["rank"], f["signal"]) for f in status["failures"]}
    assert failures == {(0, 9), (1, 9)}
    assert "Killed(sig=9)" in job.monarch("status").stdout


def test_stop_ends_a_rank_gracefully(fresh_job, helpers):
    job = fresh_job
    before = pids_by_rank(helpers.json_out(job.monarch("status", "--json")))
    result = job.monarch("stop", "workers", "--slice", "gpus=3", "--yes", "--json")
    assert result.returncode == 0, result.stderr
    stopped = helpers.json_out(result)
    assert stopped["done"] and [(s["rank"], s["pid"]) for s in stopped["stopped"]] == [
        (3, before[3])]
    assert helpers.pid_gone(before[3])
    os.kill(before[2], 0)  # untouched
    status = helpers.json_out(job.monarch("status", "--json"))
    states = {a["rank"]: a["state"] for m in status["meshes"] for a in m["actors"]
              if m["name"] == "workers"}
    assert states == {0: "running", 1: "running", 2: "running", 3: "stopped"}
    assert status["failures"] == [] and status["job"]["health"] == "ok"  # a stop is no failure


def test_job_end_removes_the_discovery_file(fresh_job):
    assert fresh_job.discovery.exists()
    assert fresh_job.stop() == 0
    assert not fresh_job.discovery.exists()


def test_with_two_jobs_running_a_command_says_which_it_acts_on(job, helpers):
    """`monarch status` silently picked the newest of two running scripts: it still does,
    and says so, naming the other and how to pick."""
    run_dir = tempfile.mkdtemp(prefix="mtwo")
    job = type(job)(run_dir)  # two jobs of their own, in a run directory of their own
    other = type(job)(run_dir)  # the newer
    try:
        out = job.monarch("status", "--json")
        assert out.returncode == 0
        assert (f"2 jobs are running; this is {other.job_id} (the newest"
                in out.stderr), out.stderr
        assert job.job_id in out.stderr and "Pick one with --job ID" in out.stderr
        assert helpers.json_out(out)["job"]["job_id"] == other.job_id
        picked = job.monarch("--job", job.job_id, "status", "--json")
        assert "jobs are running" not in picked.stderr
        assert helpers.json_out(picked)["job"]["job_id"] == job.job_id
    finally:
        other.stop()
        job.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
