"""The package as users install it: a wheel built from the checkout, installed with its
dependencies in a clean virtual environment, used from outside the source tree (a
hand-written package list once shipped a `monarch.job` that could not import)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(900)

PROGRAM = textwrap.dedent('''
    import monarch, sys
    from monarch.actor import Actor, endpoint, this_host
    from monarch.job import ProcessJob

    assert "site-packages" in monarch.__file__, monarch.__file__

    class Square(Actor):
        @endpoint
        def square(self, x: int) -> int:
            return x * x

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    print("local", sorted(procs.spawn("sq", Square).square.call(3).get().values()))
    procs.stop().get()

    job = ProcessJob({"hosts": 2})
    hosts = job.state(cached_path=None).hosts
    remote = hosts.spawn_procs(per_host={"gpus": 1}).spawn("sq", Square)
    print("job", sorted(remote.square.call(4).get().values()))
    job.kill()
''')


def test_the_wheel_installs_and_runs_outside_the_source_tree(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    source = tmp_path / "source"  # the tracked files: the build leaves nothing in the checkout
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
                    str(source)], check=True, timeout=300, env=env, cwd=tmp_path)
    (wheel,) = wheels.glob("pymonarch-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", str(wheel)], check=True,
                   timeout=600, env=env, cwd=tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "program.py").write_text(PROGRAM)
    env["MONARCH_RUN_DIR"] = str(tmp_path / "run")
    out = subprocess.run([python, "program.py"], capture_output=True, text=True, timeout=180,
                         env=env, cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "local [9, 9]" in out.stdout and "job [16, 16]" in out.stdout, out.stdout
    cli = subprocess.run([str(venv / "bin" / "monarch"), "--help"], capture_output=True,
                         text=True, timeout=60, env=env, cwd=work)
    assert cli.returncode == 0 and "top" in cli.stdout, cli.stderr
