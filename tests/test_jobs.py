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

from monarch._runtime._rundir import run_root, sweep_dead
from monarch.actor import Actor, endpoint, this_host
from monarch.job import LocalJob, ProcessJob, job_load, list_allocations

CLIENT = Path(__file__).with_name("job_client.py")
pytestmark = pytest.mark.timeout(300)


class Probe(Actor):
    @endpoint
    def env(self, name: str) -> tuple:
        """The variable in this proc and in its zygote (its parent)."""
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            zygote = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        value = zygote.get(name.encode())
        return os.environ.get(name), value.decode() if value is not None else None

    @endpoint
    def start_sleeper(self) -> int:
        return subprocess.Popen(["sleep", "600"]).pid


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
    sleeper = procs.spawn("probe", Probe).start_sleeper.call_one().get(timeout=60)
    job.kill()
    wait_gone(*(s.pid for s in after.values()))
    sweep_dead(run_root())  # what the next job would do for the SIGKILLed worker's directory
    wait_gone(sleeper)  # what a proc started does not outlive the allocation
    assert not [r for r in list_allocations() if r["path"] == str(saved._dir)]
    assert not any(alive(s.pid) for s in after.values())


def _our_workers() -> list[int]:
    """Host workers this test process started (children running monarch._host.worker)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (proc / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"monarch._host.worker" in cmd and alive(int(proc.name)):
            found.append(int(proc.name))
    return found


class _Unreachable(ProcessJob):
    """A job whose hosts start but cannot be attached to (a firewall, a wrong address)."""

    def _state(self):
        raise RuntimeError("the hosts cannot be reached")


def test_an_allocation_state_cannot_reach_is_not_left_behind():
    """`state()` applied a new allocation, then could not attach to it: the allocation is
    killed, not left running where nothing can find it again."""
    assert not _our_workers()
    before = {r["path"] for r in list_allocations()}
    job = _Unreachable({"hosts": 2})
    with pytest.raises(RuntimeError, match="cannot be reached"):
        job.state(cached_path=None)
    wait_until(lambda: not _our_workers(), "the allocation's workers to end")
    assert {r["path"] for r in list_allocations()} <= before
    assert not job.active


def test_with_python_executable_runs_procs_under_another_interpreter(fault_log, tmp_path):
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f"#!/bin/sh\nMONARCH_WRAPPED=yes exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    job = ProcessJob({"hosts": 1})
    try:
        hosts = job.state(cached_path=None).hosts
        plain = hosts.spawn_procs().spawn("plain", Probe)
        wrapped = hosts.with_python_executable(str(wrapper)).spawn_procs().spawn("wrapped", Probe)
        assert plain.env.call_one("MONARCH_WRAPPED").get(timeout=60) == (None, None)
        # Each proc runs the wrapper (forked from the host's zygote, then exec'd): the
        # wrapper's environment is the proc's own, not its parent's.
        assert wrapped.env.call_one("MONARCH_WRAPPED").get(timeout=60) == ("yes", None)
        local = this_host().with_python_executable(str(wrapper)).spawn_procs()
        assert local.spawn("local", Probe).env.call_one("MONARCH_WRAPPED").get(
            timeout=60) == ("yes", None)
        local.stop().get(timeout=30)
    finally:
        job.kill()


def test_local_job_is_this_host_under_every_name(tmp_path):
    job = LocalJob(hosts=("trainers", "workers"))
    state = job.state(cached_path=str(tmp_path / "job.pkl"))
    assert state.trainers.extent.labels == [] and state.workers.extent.labels == []
    assert not job.can_run(job)  # a local job is never reused: it costs nothing
    assert isinstance(job_load(str(tmp_path / "job.pkl")), LocalJob)
    with pytest.raises(AttributeError, match="Available names: trainers, workers"):
        state.evaluators


HOSTS_FROM_CONFIG = """
from monarch.job import hosts_from_config
from monarch.actor import this_host
hosts = hosts_from_config("trainers")
assert hosts.spawn_procs().initialized.get(timeout=120)
print(len(hosts), flush=True)
"""


def test_hosts_from_config_uses_the_project_job_or_two_local_hosts(tmp_path):
    (tmp_path / "script.py").write_text(HOSTS_FROM_CONFIG)
    env = dict(os.environ, MONARCH_RUN_DIR=str(tmp_path / "run"))

    def run() -> str:
        out = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    def allocations() -> list[dict]:
        records = (tmp_path / "run" / "allocations").glob("*/allocation.json")
        return [json.loads(p.read_text()) for p in records]

    assert run() == "2"  # no project job: two local hosts, for this run only
    assert allocations() == []
    (tmp_path / "job.py").write_text("from monarch.job import ProcessJob\n"
                                     "job = ProcessJob({'trainers': 3})\n")
    os.makedirs(tmp_path / ".monarch" / "default")
    (tmp_path / ".monarch" / "default" / "spec").write_text(str(tmp_path / "job.py"))
    assert run() == "3"  # the project's job, which stays for the next run
    [record] = allocations()
    assert run() == "3"
    assert [a["id"] for a in allocations()] == [record["id"]]
    job_load(str(tmp_path / ".monarch" / "job_state.pkl")).kill()
    wait_gone(*(w["pid"] for w in record["workers"]))


def test_exec_command_runs_on_the_hosts_and_returns_the_worst_exit_code(tmp_path, capfd):
    from monarch.job import exec_command

    hosts = LocalJob().state(cached_path=None).hosts
    code = exec_command(hosts, ["sh", "-c", "echo said-$MONARCH_RANK_gpus; exit $((2 + "
                                "MONARCH_RANK_gpus))"], per_host={"gpus": 2}).get(timeout=120)
    assert code == 3
    assert sorted(line for line in capfd.readouterr().out.splitlines()
                  if line.startswith("said-")) == ["said-0", "said-1"]
    out = tmp_path / "out"
    assert exec_command(hosts, ["pwd"], workdir=str(tmp_path),
                        output_dir=str(out)).get(timeout=120) == 0
    assert (out / "stdout.txt").read_text().strip() == str(tmp_path)


def test_exec_command_runs_a_python_command_with_the_hosts_interpreter(tmp_path, capfd):
    """A `.py` file or `-m module` goes to BashActor.run_python: the host's own Python, the
    env added, in the workdir."""
    from monarch.job import exec_command

    (tmp_path / "hello.py").write_text("import os, sys\n"
                                       "print('py', os.environ['GREETING'], os.getcwd(),\n"
                                       "      sys.executable)\nsys.exit(4)\n")
    hosts = LocalJob().state(cached_path=None).hosts
    code = exec_command(hosts, ["hello.py"], env={"GREETING": "hi"},
                        workdir=str(tmp_path)).get(timeout=120)
    assert code == 4
    assert f"py hi {tmp_path} {sys.executable}" in capfd.readouterr().out
    assert exec_command(hosts, ["-m", "json.tool", "--help"]).get(timeout=120) == 0
