"""Whole scripts as users run them: classes from __main__, and every example."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(180)


def run(path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=150, cwd=cwd)


def test_actor_classes_and_functions_from_main(tmp_path):
    script = tmp_path / "main_script.py"
    script.write_text(textwrap.dedent('''
        from monarch.actor import Actor, endpoint, this_host

        SCALE = 3

        def helper(x):
            return x * SCALE

        class Local(Actor):
            def __init__(self, fn):
                self.fn = fn

            @endpoint
            def apply(self, x):
                return helper(self.fn(x))

        procs = this_host().spawn_procs(per_host={"gpus": 2})
        mesh = procs.spawn("local", Local, lambda v: v + 1)
        print(sorted(mesh.apply.call(4).get().values()))
        procs.stop().get()
    '''))
    out = run(script, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[15, 15]"


EXAMPLES = {
    "hello_world.py": "hello world from rank 7",
    "slicing.py": "one actor: hi from {}",
    "errors.py": "still serving: [42, 42]",
    "trainer.py": "weights: [0.0, 0.98, 2.0, 2.99, 3.99, 4.98, 5.99, 7.0]",
    "fault_tolerance.py": "handled in __supervise__: ['the process this actor was running on "
                          "exited with non-zero code 1']",
    "spmd_ddp.py": "final parameters agree across 4 ranks",
    "distributed_tensors.py": "replicas hold identical weights: True",
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs_with_no_arguments(name, tmp_path):
    out = run(ROOT / "examples" / name, tmp_path)
    assert out.returncode == 0, out.stderr
    assert EXAMPLES[name] in out.stdout


def test_every_example_is_smoke_tested():
    assert {p.name for p in (ROOT / "examples").glob("*.py")} <= set(EXAMPLES) | EXTRA_EXAMPLES


EXTRA_EXAMPLES: set[str] = {"spmd_ddp_train.py", "rl_grpo.py", "ft_training.py"}
"""Examples smoke-tested by other test modules or examples: `spmd_ddp_train.py` is a torchrun
script (it needs torchrun's environment), run by `spmd_ddp.py` and tests/test_spmd.py;
`rl_grpo.py` and `ft_training.py` run in tests/test_workloads.py."""


def test_tracebacks_of_a_main_actor_name_its_file_and_show_its_lines(tmp_path):
    """An actor class of the user's script travels by value; its code keeps the script's file
    name, so the remote traceback shows the file and the failing line (cloudpickle's own
    `<dynamic-code>` showed neither)."""
    script = tmp_path / "boom_script.py"
    script.write_text(textwrap.dedent('''
        from monarch.actor import Actor, ActorError, endpoint, this_host

        class Boom(Actor):
            @endpoint
            def boom(self, x):
                raise ValueError(f"boom from main {x}")

        procs = this_host().spawn_procs(per_host={"gpus": 1})
        try:
            procs.spawn("boom", Boom).boom.call_one(7).get()
        except ActorError as e:
            print(str(e))
        procs.stop().get()
    '''))
    out = run(script, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "<dynamic-code>" not in out.stdout
    assert f'File "{script}", line 7, in boom' in out.stdout, out.stdout
    assert 'raise ValueError(f"boom from main {x}")' in out.stdout


def test_lines_of_many_ranks_stay_whole_whatever_the_buffering(tmp_path):
    """8 ranks printing 200 lines each into one pipe: every line arrives whole, with
    PYTHONUNBUFFERED=1 (many Docker images set it: print's text and its newline were written
    apart, 301 of 1,600 lines came out merged) as without it."""
    import os
    import re

    script = tmp_path / "chatty.py"
    script.write_text(textwrap.dedent('''
        from monarch.actor import Actor, current_rank, endpoint, this_host

        class Chatty(Actor):
            @endpoint
            def talk(self, n):
                r = current_rank().rank
                for i in range(n):
                    print(f"rank line {r}-{i}")

        procs = this_host().spawn_procs(per_host={"gpus": 8})
        procs.spawn("chatty", Chatty).talk.call(200).get()
        procs.stop().get()
    '''))
    for unbuffered in ("1", ""):
        env = dict(os.environ, PYTHONUNBUFFERED=unbuffered)
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             timeout=150, cwd=tmp_path, env=env)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        bad = [line for line in lines if not re.fullmatch(r"rank line \d-\d+", line)]
        assert not bad, f"PYTHONUNBUFFERED={unbuffered!r}: {bad[:5]}"
        assert sorted(lines) == sorted(f"rank line {r}-{i}" for r in range(8)
                                       for i in range(200))


@pytest.mark.parametrize(("ending", "state", "code", "reason"), [
    ("pass", "finished", 0, ""),
    ("procs.spawn('a', A).boom.call_one().get()", "failed", 1,
     "ActorError: Actor call a.boom failed. (ValueError: bad thing)"),
    ("raise KeyboardInterrupt", "failed", 130, "KeyboardInterrupt"),
])
def test_monarch_jobs_says_how_a_script_ended(tmp_path, ending, state, code, reason):
    """`monarch jobs` said `finished` (exit_code None) for a script that died of an unhandled
    ActorError or a Ctrl-C: the history records the exit code and why."""
    import json
    import os

    script = tmp_path / "ending.py"
    script.write_text(textwrap.dedent(f'''
        from monarch.actor import Actor, endpoint, this_host

        class A(Actor):
            @endpoint
            def boom(self):
                raise ValueError("bad thing")

        procs = this_host().spawn_procs(per_host={{"gpus": 1}})
        {ending}
    '''))
    env = dict(os.environ, MONARCH_RUN_DIR=str(tmp_path / "run"), MONARCH_HISTORY="1")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=150, cwd=tmp_path, env=env)
    # a KeyboardInterrupt ends Python by SIGINT (a shell shows 130), as without monarch
    assert out.returncode == (-2 if code == 130 else code), out.stderr
    jobs = subprocess.run([sys.executable, "-m", "monarch.cli", "jobs", "--json"],
                          capture_output=True, text=True, timeout=60, env=env)
    (row,) = json.loads(jobs.stdout)
    assert (row["state"], row["exit_code"], row["reason"]) == (state, code, reason)
