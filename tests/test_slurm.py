"""A job on a real Slurm 22.05 cluster (several fake nodes on this machine)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from waiting import wait_until

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
    """A running Slurm cluster of 2 nodes; started (and stopped) here if there is none."""
    started = False
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if not sinfo_idle():
        if sudo and not shutil.which("sudo"):
            pytest.skip("Slurm is not running, and neither root nor sudo can start it")
        out = subprocess.run([*sudo, "bash", str(ROOT / ".ci" / "slurm-setup.sh"), "2"],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr
        started = True
    yield
    if started:
        subprocess.run([*sudo, "bash", str(ROOT / ".ci" / "slurm-setup.sh"), "stop"], timeout=60)


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
        hosts = job.state().trainers
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
