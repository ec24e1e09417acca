"""A host worker forks its zygote at its start (`_host._agent.prefork`) instead of starting a
fresh interpreter that imports the proc runtime again: the procs must not tell the difference.
They run with the zygote's environment (the malloc defaults, the workspace) and no stdin,
`ps` shows the zygote and its procs as a zygote's, not as copies of the worker, and a worker
killed with SIGKILL takes its zygote and procs with it. `MONARCH_PREFORK_ZYGOTE=0` starts one as before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from waiting import wait_gone

from monarch._host._agent import MALLOC_DEFAULTS
from monarch._runtime._pids import proc_stat
from monarch.actor import Actor, endpoint
from monarch.job import ProcessJob

pytestmark = pytest.mark.timeout(300)


def environ_of(pid: int) -> dict[str, str]:
    """The environment process `pid` was started (exec'd) with."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(item.decode().split("=", 1) for item in f.read().split(b"\0")
                    if b"=" in item)


def cmdline_of(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


class Where(Actor):
    @endpoint
    def where(self) -> dict:
        zygote = os.getppid()
        worker = int(proc_stat(zygote)[1])  # the zygote's parent
        return {"pid": os.getpid(), "zygote": zygote, "worker": worker,
                "stdin": os.readlink("/proc/self/fd/0"),
                "env": {k: os.environ.get(k) for k in [*MALLOC_DEFAULTS,
                                                       "MONARCH_WORKSPACE_DIR"]}}


def one_host() -> tuple[ProcessJob, list]:
    """A ProcessJob of one host and where its two procs run; the job is killed if that fails
    (its worker outlived a failed spawn once, found at the session's end)."""
    job = ProcessJob({"hosts": 1})
    try:
        procs = job.state(cached_path=None).hosts.spawn_procs(per_host={"gpus": 2})
        found = list(procs.spawn("where", Where).where.call().get(timeout=60).values())
    except BaseException:
        job.kill()
        raise
    return job, found


@pytest.mark.parametrize("forked", [True, False])
def test_procs_of_a_forked_or_started_zygote_are_alike(forked, monkeypatch):
    monkeypatch.setenv("MONARCH_PREFORK_ZYGOTE", "1" if forked else "0")
    for key in MALLOC_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    job, found = one_host()
    try:
        (zygote,) = {f["zygote"] for f in found}
        (worker,) = {f["worker"] for f in found}
        assert "monarch._host.worker" in " ".join(cmdline_of(worker))
        for pid in [zygote, *(f["pid"] for f in found)]:  # `ps` tells them from the worker
            line = cmdline_of(pid)
            assert line[:3] == [sys.executable, "-m", "monarch._proc._zygote"], line
        for f in found:  # the environment of an exec'd zygote, in both cases
            assert f["env"]["MALLOC_ARENA_MAX"] == MALLOC_DEFAULTS["MALLOC_ARENA_MAX"]
            assert f["env"]["MONARCH_WORKSPACE_DIR"]
            assert f["stdin"] == os.devnull  # a proc never reads the terminal's input
        # a forked zygote started with its worker's environment (no malloc defaults) and was
        # given the zygote's; an exec'd one was started with it
        started_with = environ_of(zygote).get("MALLOC_ARENA_MAX")
        assert started_with == (None if forked else MALLOC_DEFAULTS["MALLOC_ARENA_MAX"])

        os.kill(worker, signal.SIGKILL)  # the worker dies: its zygote and procs with it
        wait_gone(zygote, *(f["pid"] for f in found), timeout=30)
    finally:
        job.kill()


def test_a_worker_with_threads_running_does_not_fork_its_zygote():
    """`prefork` forks only a process whose one thread is its main one (forking a process
    with threads copies locks other threads hold)."""
    code = ("import threading, time\n"
            "from monarch._host._agent import prefork\n"
            "t = threading.Thread(target=time.sleep, args=(2,)); t.start()\n"
            "print(prefork() is None)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "True", out.stderr


def test_the_command_line_is_rewritten_within_its_length():
    """`set_cmdline` writes over the argument area: what `ps` reads; a longer line is cut."""
    code = ("import sys, time\n"
            "from monarch._host._title import set_cmdline\n"
            "print(set_cmdline(['renamed', 'x' * 10000]), flush=True)\n"
            "time.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", code, "padding" * 20], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "True"
        line = cmdline_of(child.pid)
        assert line[0] == "renamed" and set(line[1]) == {"x"}
        assert len("\0".join(line)) < len(code) + 200 + len(sys.executable)
    finally:
        child.kill()
        child.wait()


def test_a_bad_switch_value_stops_the_worker_naming_it():
    env = dict(os.environ, MONARCH_PREFORK_ZYGOTE="sometimes")
    out = subprocess.run([sys.executable, "-m", "monarch._host.worker", "--address",
                          "tcp://127.0.0.1:0"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0
    assert "MONARCH_PREFORK_ZYGOTE='sometimes': expected one of" in out.stderr, out.stderr
