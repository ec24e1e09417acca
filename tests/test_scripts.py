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
