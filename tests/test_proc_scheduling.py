"""Procs run their threads under SCHED_BATCH (`_proc._main._batch_scheduling`): a thread woken
by a message does not preempt the one running, which holds the GIL it would only wait for.
MONARCH_PROC_BATCH_SCHED=0 keeps the kernel's default; a value that is neither on nor off
stops the job at its start, naming the switch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="Linux only")]

SCRIPT = textwrap.dedent('''
    import os
    from monarch.actor import Actor, endpoint, this_host


    class Policy(Actor):
        @endpoint
        def policies(self):
            """This actor's thread's policy, and every thread's of its proc."""
            every = {os.sched_getscheduler(int(tid)) for tid in os.listdir("/proc/self/task")}
            return os.sched_getscheduler(0), sorted(every)


    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mine, every = zip(*procs.spawn("policy", Policy).policies.call().get().values())
    print("actor", sorted(set(mine)), "threads", sorted(set(sum(every, []))))
    print("controller", os.sched_getscheduler(0))
    procs.stop().get()
''')


def run(flag: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MONARCH_PROC_BATCH_SCHED"}
    if flag is not None:
        env["MONARCH_PROC_BATCH_SCHED"] = flag
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=100, env=env)


def test_a_procs_threads_run_batch_scheduled_and_the_controller_is_left_alone():
    out = run(None)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"actor [{os.SCHED_BATCH}] threads [{os.SCHED_BATCH}]" in out.stdout, out.stdout
    assert f"controller {os.SCHED_OTHER}" in out.stdout  # the user's process keeps its own


def test_switched_off_procs_keep_the_default_policy():
    out = run("off")
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"actor [{os.SCHED_OTHER}] threads [{os.SCHED_OTHER}]" in out.stdout, out.stdout


def test_a_switch_neither_on_nor_off_stops_the_job_at_its_start():
    out = run("sometimes")
    assert out.returncode != 0
    assert ("MONARCH_PROC_BATCH_SCHED='sometimes': expected one of 1/true/on/yes (on) or "
            "0/false/off/no (off)") in out.stderr, out.stderr[-3000:]
