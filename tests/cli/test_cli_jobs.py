"""`monarch apply`, `monarch exec`, `monarch jobs`, `monarch kill --allocation` on a ProcessJob kept
between commands (real processes, a private run directory)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from waiting import wait_gone, wait_until

pytestmark = pytest.mark.timeout(300)

JOB = "from monarch.job import ProcessJob\njob = ProcessJob({'trainers': 2, 'gen': 1})\n"
CLIENT = textwrap.dedent("""
    import sys
    from monarch.job import load_current_job
    state = load_current_job().state()
    state.trainers.spawn_procs(per_host={"gpus": 1}).initialized.get(timeout=120)
    print("READY", flush=True)
    sys.stdin.read()
""")


class Project:
    """A directory with job.py, and `monarch` run there with a private run directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "job.py").write_text(JOB)
        (root / "client.py").write_text(CLIENT)
        self.env = dict(os.environ, MONARCH_RUN_DIR=str(root / "run"), NO_COLOR="1",
                        PYTHONUNBUFFERED="1")

    def monarch(self, *args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "monarch.cli", *args], cwd=self.root,
                              env=self.env, capture_output=True, text=True, timeout=timeout)

    def rows(self) -> list[dict]:
        out = self.monarch("jobs", "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def allocation(self) -> dict:
        found = [r for r in self.rows() if r["kind"] == "allocation"]
        assert len(found) == 1, found
        return found[0]


@pytest.fixture
def project(tmp_path):
    project = Project(tmp_path)
    yield project
    project.monarch("kill", "--allocation", "--yes")  # whatever the test left
    for row in project.rows():  # and any allocation the job file no longer names
        if row["kind"] == "allocation":
            project.monarch("kill", "--allocation", row["id"], "--yes")


def worker_pids(row: dict) -> list[int]:
    record = json.loads((Path(row["path"]) / "allocation.json").read_text())
    return [w["pid"] for w in record["workers"]]


def test_apply_exec_jobs_and_kill_an_allocation(project):
    applied = project.monarch("apply", "job.py")
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.startswith("applied ProcessJob process-")
    row = project.allocation()
    assert (row["state"], row["client"], row["hosts"]) == ("running", "", "trainers=2 gen=1")
    workers = worker_pids(row)

    ran = project.monarch("exec", "--mesh", "trainers",
                          "echo out-$MONARCH_RANK_hosts; echo err-$MONARCH_RANK_hosts >&2; "
                          "exit $MONARCH_RANK_hosts")
    assert ran.returncode == 1, ran.stderr  # the largest exit code: host 1's
    assert sorted(ran.stdout.splitlines()) == ["[trainers/0] out-0", "[trainers/1] out-1"]
    assert "[trainers/1] err-1" in ran.stderr and "trainers/1: exit 1" in ran.stderr
    everywhere = project.monarch("exec", "--all", "pwd")
    assert everywhere.returncode == 0
    assert sorted(everywhere.stdout.splitlines()) == [
        f"[{label}] {project.root}" for label in ("gen/0", "trainers/0", "trainers/1")]

    again = project.monarch("apply")  # the recorded job, its allocation alive: reused
    assert again.stdout.startswith(f"reused ProcessJob {row['id']}"), again.stderr
    assert worker_pids(project.allocation()) == workers

    killed = project.monarch("kill", "--allocation", "--yes")
    assert killed.returncode == 0 and row["id"] in killed.stdout, killed.stderr
    wait_gone(*workers)
    assert not [r for r in project.rows() if r["kind"] == "allocation"]
    assert not (project.root / ".monarch" / "job_state.pkl").exists()
    missing = project.monarch("exec", "true")  # exec runs on an allocation, never makes one
    assert missing.returncode == 3 and "monarch apply" in missing.stderr


def test_kill_an_allocation_by_its_id(project):
    """`monarch kill --allocation ID` (as `monarch jobs` names it) ends its workers; the job
    saved in the allocation was saved while it was being applied, and was killed as a job
    not running: nothing ended, and the command said it had."""
    assert project.monarch("apply", "job.py").returncode == 0
    row = project.allocation()
    workers = worker_pids(row)
    killed = project.monarch("kill", "--allocation", row["id"], "--yes")
    assert killed.returncode == 0 and f"killed allocation {row['id']}" in killed.stdout
    wait_gone(*workers)
    assert not [r for r in project.rows() if r["kind"] == "allocation"]


def test_exec_streams_lines_as_they_are_written(project):
    assert project.monarch("apply", "job.py").returncode == 0
    flag = project.root / "flag"
    command = f"echo first; while [ ! -e {flag} ]; do sleep 0.05; done; echo second"
    child = subprocess.Popen([sys.executable, "-m", "monarch.cli", "exec", command],
                             cwd=project.root, env=project.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "first\n"  # while the command still runs
        flag.touch()
        assert child.stdout.readline() == "second\n"
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()


def test_jobs_shows_allocations_with_and_without_a_client(project):
    assert project.monarch("apply", "job.py").returncode == 0
    client = subprocess.Popen([sys.executable, "client.py"], cwd=project.root, env=project.env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "READY"
        rows = project.rows()
        controller = [r for r in rows if r["kind"] == "controller" and r["pid"] == client.pid]
        assert len(controller) == 1
        assert project.allocation()["client"] == controller[0]["id"]
        client.send_signal(signal.SIGKILL)  # the client dies; the allocation stays
        client.wait(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
    wait_until(lambda: project.allocation()["client"] == "", "the workers to let the dead "
               "client go", timeout=60)
    assert project.allocation()["state"] == "running"
    plain = project.monarch("jobs")
    assert plain.returncode == 0 and "ProcessJob" in plain.stdout
