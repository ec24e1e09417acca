"""A job on a real Slurm 22.05 cluster (several fake nodes on this machine)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from waiting import wait_until

from monarch._runtime._rundir import run_root, sweep_dead
from monarch.actor import Actor, SupervisionError, current_rank, endpoint

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(240)


class Where(Actor):
    @endpoint
    def where(self) -> dict:
        return {"point": dict(current_rank()), "node": os.environ.get("SLURMD_NODENAME"),
                "job": os.environ.get("SLURM_JOB_ID"), "pid": os.getpid()}


def sinfo_idle() -> bool:
    if not shutil.which("sinfo"):
        return False
    out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    return out.returncode == 0 and "idle" in out.stdout


@pytest.fixture(scope="module")
def slurm():
    """A running Slurm cluster of 4 nodes; started (and stopped) here if there is none."""
    started = False
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if not sinfo_idle():
        if sudo and not shutil.which("sudo"):
            pytest.skip("Slurm is not running, and neither root nor sudo can start it")
        out = subprocess.run([*sudo, "bash", str(ROOT / ".ci" / "slurm-setup.sh"), "4"],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr
        started = True
    yield
    if started:
        # the jobs' steps report their end to slurmctld: stopping it first strands them
        # (their slurmd and slurmstepd then outlive the run)
        try:
            wait_until(lambda: not _queued(), "the Slurm jobs to end", 60)
        except AssertionError:
            pass  # stop anyway: the daemons are killed below
        subprocess.run([*sudo, "bash", str(ROOT / ".ci" / "slurm-setup.sh"), "stop"], timeout=60)


def _queued() -> str:
    """The jobs Slurm still has (empty once every job ended)."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


def worker_pids(port: int) -> dict[str, int]:
    """Our workers of this port, by Slurm node name."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"monarch._host.worker" in cmd and str(port).encode() in cmd:
            for item in env:
                if item.startswith(b"SLURMD_NODENAME="):
                    found[item.split(b"=", 1)[1].decode()] = int(proc.name)
    return found


def test_slurm_job_spans_nodes_and_losing_one_is_a_supervision_event(slurm, tmp_path,
                                                                     fault_log):
    from monarch.job import SlurmJob

    port = 24000 + os.getpid() % 1000
    job = SlurmJob(meshes={"trainers": 2}, log_dir=str(tmp_path / "logs"), monarch_port=port,
                   job_start_timeout=120)
    try:
        hosts = job.state(cached_path=None).trainers  # nothing written in the cwd
        assert hosts.sizes == {"hosts": 2}
        procs = hosts.spawn_procs(per_host={"gpus": 2})
        mesh = procs.spawn("slurmed", Where)
        found = mesh.where.call().get(timeout=60)
        nodes = {point["hosts"]: info["node"] for point, info in found.items()}
        assert sorted(nodes.values()) == ["n1", "n2"]
        assert {info["job"] for info in found.values()} == {job.job_ids["trainers"]}

        lost_node = nodes[1]
        os.kill(worker_pids(port)[lost_node], signal.SIGKILL)
        failure = fault_log.wait_for(
            lambda f: f.name == "slurmed" and "was lost" in f.report(), timeout=60)
        assert "no heartbeat" in failure.report()
        with pytest.raises(SupervisionError):
            mesh.slice(hosts=1, gpus=0).where.call_one().get(timeout=30)
        assert len(mesh.slice(hosts=0).where.call().get(timeout=30)) == 2
    finally:
        job.kill()
    wait_until(lambda: not worker_pids(port), "the Slurm workers to exit")
    sweep_dead(run_root())  # what the next job would do for the SIGKILLed worker's directory


CLIENT = Path(__file__).with_name("job_client.py")


def run_client(cwd: Path, port: int, log_dir: Path) -> dict:
    """Runs tests/job_client.py against a SlurmJob to its end; its JSON line."""
    import json
    import sys

    out = subprocess.run([sys.executable, str(CLIENT), "slurm", "--port", str(port),
                          "--log-dir", str(log_dir)], cwd=cwd, capture_output=True, text=True,
                         timeout=200)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_slurm_allocation_outlives_the_script_and_a_cancelled_one_is_replaced(slurm, tmp_path):
    from monarch.job import job_load

    port = 25000 + os.getpid() % 1000
    cache = tmp_path / ".monarch" / "job_state.pkl"
    try:
        first = run_client(tmp_path, port, tmp_path / "logs")
        nodes = {m: sorted(v["node"] for v in vals) for m, vals in first["meshes"].items()}
        assert len(set(nodes["trainers"])) == 3 and len(set(nodes["gen"])) == 1
        assert not set(nodes["trainers"]) & set(nodes["gen"])  # one allocation, split by mesh
        workers = {v["worker"] for vals in first["meshes"].values() for v in vals}
        job = job_load(str(cache))
        slurm_id = job._running.slurm_job_id
        assert "OverSubscribe=NO" in subprocess.run(  # --exclusive: whole nodes
            ["scontrol", "show", "job", slurm_id], capture_output=True, text=True).stdout

        second = run_client(tmp_path, port, tmp_path / "logs")
        assert {v["worker"] for vals in second["meshes"].values() for v in vals} == workers
        assert job_load(str(cache))._running.slurm_job_id == slurm_id

        subprocess.run(["scancel", slurm_id], check=True)
        wait_until(lambda: not worker_pids(port), "the cancelled job's workers to exit")
        third = run_client(tmp_path, port, tmp_path / "logs")
        assert not {v["worker"] for vals in third["meshes"].values() for v in vals} & workers
        assert job_load(str(cache))._running.slurm_job_id != slurm_id
    finally:
        if cache.exists():
            job_load(str(cache)).kill()
    wait_until(lambda: not worker_pids(port), "the Slurm workers to exit")


def test_share_node_puts_two_workers_on_one_shared_node(slurm, tmp_path):
    from monarch.job import SlurmJob

    port = 26000 + os.getpid() % 1000
    job = SlurmJob(meshes={"pair": 1}, log_dir=str(tmp_path / "logs"), monarch_port=port,
                   job_start_timeout=120)
    job.share_node(tasks_per_node=2, gpus_per_task=0, partition="debug")
    try:
        hosts = job.state(cached_path=None).pair
        assert hosts.sizes == {"hosts": 2}  # two workers of one node
        found = hosts.spawn_procs().spawn("shared", Where).where.call().get(timeout=60)
        assert len({info["node"] for info in found.values()}) == 1
        shown = subprocess.run(["scontrol", "show", "job", job.slurm_job_id],
                               capture_output=True, text=True).stdout
        assert "OverSubscribe=OK" in shown and "NumTasks=2" in shown
        assert "CPUs/Task=2" in shown  # half of a 4-CPU node per task
    finally:
        job.kill()
    wait_until(lambda: not worker_pids(port) and not worker_pids(port + 1),
               "the Slurm workers to exit")
