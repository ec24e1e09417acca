"""Jobs that outlive scripts: a script run twice against one ProcessJob allocation attaches to
the same workers; a killed allocation is replaced; a client that dies leaves it running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import alive, wait_gone, wait_until

from monarch.job import ProcessJob, job_load, list_allocations

CLIENT = Path(__file__).with_name("job_client.py")
pytestmark = pytest.mark.timeout(300)


def run_client(cwd: Path, *args: str) -> dict:
    """Runs the client script to its end; its JSON line."""
    out = subprocess.run([sys.executable, str(CLIENT), "process", *args], cwd=cwd,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def workers_of(result: dict) -> dict[str, set[int]]:
    return {mesh: {v["worker"] for v in values} for mesh, values in result["meshes"].items()}


def procs_of(result: dict) -> set[int]:
    return {v["pid"] for values in result["meshes"].values() for v in values}


@pytest.fixture
def project(tmp_path):
    """A project directory; whatever job the test left in its cache is killed at the end."""
    yield tmp_path
    cache = tmp_path / ".monarch" / "job_state.pkl"
    if cache.exists():
        job = job_load(str(cache))
        pids = [s.pid for s in job._running.workers.values()] if job._running else []
        job.kill()
        wait_gone(*pids)


def test_second_run_reuses_the_workers_and_a_killed_allocation_is_replaced(project):
    first = run_client(project)
    workers = workers_of(first)
    assert len(workers["trainers"]) == 2 and len(workers["gen"]) == 1
    cache = project / ".monarch" / "job_state.pkl"
    job = job_load(str(cache))
    assert {s.pid for s in job._running.workers.values()} == workers["trainers"] | workers["gen"]

    second = run_client(project)
    assert workers_of(second) == workers  # the same worker processes...
    assert not procs_of(second) & procs_of(first)  # ...running new procs
    wait_gone(*procs_of(first))  # the first run's procs ended with it

    # One worker of the allocation dies: the next run replaces the whole allocation.
    lost = sorted(workers["trainers"])[0]
    os.kill(lost, signal.SIGKILL)
    wait_gone(lost)
    third = run_client(project)
    replaced = workers_of(third)
    assert not (replaced["trainers"] | replaced["gen"]) & (workers["trainers"] | workers["gen"])
    wait_gone(*(workers["trainers"] | workers["gen"]))  # the survivors were killed with it

    # The allocation is killed (`job.kill()` from anywhere): the next run makes a new one.
    job_load(str(cache)).kill()
    wait_gone(*(replaced["trainers"] | replaced["gen"]))
    fourth = run_client(project)
    assert not (workers_of(fourth)["trainers"] & replaced["trainers"])


def test_a_client_that_dies_leaves_the_allocation_and_the_next_reattaches(project):
    client = subprocess.Popen([sys.executable, str(CLIENT), "process", "--hang"], cwd=project,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(client.stdout.readline())
        assert client.stdout.readline().strip() == "READY"
        rows = {r["id"]: r for r in list_allocations()}
        allocation = job_load(str(project / ".monarch" / "job_state.pkl"))._running._dir.name
        assert rows[allocation]["state"] == "running" and rows[allocation]["client"]
        client.send_signal(signal.SIGKILL)  # the kernel died: no goodbye to the workers
        client.wait(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
    second = run_client(project)
    assert workers_of(second) == workers_of(first)
    wait_gone(*procs_of(first))  # the dead client's procs were ended by their workers
    wait_until(lambda: {r["id"]: r for r in list_allocations()}[allocation]["client"] == "",
               "the allocation to show no client")


def test_state_restarts_a_dead_host_and_kill_ends_everything(fault_log, tmp_path):
    job = ProcessJob({"hosts": 2})
    state = job.state(cached_path=str(tmp_path / "job.pkl"))
    before = job.workers
    first = state.hosts.spawn_procs(per_host={"gpus": 1})
    assert first.initialized.get(timeout=60)
    os.kill(before["hosts_1"].pid, signal.SIGKILL)
    fault_log.wait_for(lambda f: "was lost" in f.report() and "hosts_1" in f.report(),
                       timeout=60)
    state = job.state(cached_path=str(tmp_path / "job.pkl"))
    after = job.workers
    assert after["hosts_0"] == before["hosts_0"]  # the live host is kept
    assert after["hosts_1"].pid != before["hosts_1"].pid
    assert after["hosts_1"].ip == before["hosts_1"].ip == "127.0.0.3"  # same "machine"
    saved = job_load(str(tmp_path / "job.pkl"))
    assert saved.workers["hosts_1"].pid == after["hosts_1"].pid  # the cache follows
    procs = state.hosts.slice(hosts=1).spawn_procs(per_host={"gpus": 1})
    assert procs.initialized.get(timeout=60)
    job.kill()
    wait_gone(*(s.pid for s in after.values()))
    assert not [r for r in list_allocations() if r["path"] == str(saved._dir)]
    assert not any(alive(s.pid) for s in after.values())
