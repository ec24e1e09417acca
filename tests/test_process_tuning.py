"""How the job tunes its processes, and how a user undoes it.

Procs run their threads under SCHED_BATCH (`_proc._main._batch_scheduling`): a thread woken
by a message does not preempt the one running, which holds the GIL it would only wait for.
MONARCH_PROC_BATCH_SCHED=0 keeps the kernel's default; a value that is neither on nor off
stops the job at its start, naming the switch.

The controller's young collections come every 2,000 allocations instead of 700
(`_controller._job._space_young_collections`), unless MONARCH_CONTROLLER_GC_GEN0 says
otherwise or the script set its own threshold."""

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


def run(flag: str | None, script: str = SCRIPT,
        name: str = "MONARCH_PROC_BATCH_SCHED") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != name}
    if flag is not None:
        env[name] = flag
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
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


GC_SCRIPT = textwrap.dedent('''
    import gc, sys
    if len(sys.argv) > 1:
        gc.set_threshold(int(sys.argv[1]))
    from monarch.actor import this_host
    print("before", gc.get_threshold()[0])
    this_host()  # starts the job: this process becomes its controller
    print("after", gc.get_threshold()[0])
''')


@pytest.mark.parametrize("flag, own, expected", [(None, None, 2000), ("700", None, 700),
                                                 ("2500", None, 2500), (None, "1234", 1234)])
def test_the_controller_spaces_its_young_collections_unless_told_otherwise(flag, own, expected):
    script = GC_SCRIPT if own is None else GC_SCRIPT.replace("len(sys.argv) > 1",
                                                             f"True or {own}").replace(
        "int(sys.argv[1])", own)
    out = run(flag, script, "MONARCH_CONTROLLER_GC_GEN0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["before", own or "700", "after", str(expected)]


@pytest.mark.parametrize("flag, why", [("many", "expected a whole number"),
                                       ("0", "expected a number at least 1")])
def test_a_young_collection_setting_that_does_not_read_stops_the_job(flag, why):
    out = run(flag, GC_SCRIPT, "MONARCH_CONTROLLER_GC_GEN0")
    assert out.returncode != 0
    assert f"MONARCH_CONTROLLER_GC_GEN0='{flag}': {why}" in out.stderr, out.stderr[-3000:]
