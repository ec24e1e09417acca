"""The output relay (`monarch._host._output_relay`): the local procs' stdout and stderr reach
the controller's through its pipes, whole, in order, before the answers that follow them, and
nothing is lost at the end of the script."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

SCRIPT = textwrap.dedent('''
    import asyncio, atexit, os, sys, time
    from monarch.actor import Actor, endpoint, this_host

    class Printer(Actor):
        @endpoint
        def say(self, n: int) -> list:
            print(f"out {n} from {os.getpid()}", flush=True)
            print(f"err {n} from {os.getpid()}", file=sys.stderr, flush=True)
            return [os.readlink("/proc/self/fd/1"), os.readlink("/proc/self/fd/2")]

        @endpoint
        def burst(self, lines: int) -> None:
            for i in range(lines):
                print(f"burst {os.getpid()} {i:06d} " + "x" * 100)
            sys.stdout.flush()

        @endpoint
        def last_words(self) -> None:  # printed as the proc ends, after every answer
            atexit.register(print, f"last words from {os.getpid()}", flush=True)

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("printer", Printer)
    mine = [os.readlink("/proc/self/fd/1"), os.readlink("/proc/self/fd/2")]
    for n in range(5):
        theirs = list(mesh.say.call(n).get(timeout=60).values())
        print(f"after {n}", flush=True)

    async def awaited():
        for n in range(5, 8):
            await mesh.say.call(n)
            print(f"after {n}", flush=True)

    asyncio.run(awaited())
    print("fds", mine == theirs[0], theirs[0][0] == theirs[0][1], theirs[0][0] == mine[0],
          flush=True)
    burst = mesh.burst.call(MODE_LINES)
    i = 0
    while not burst.done():  # the script prints while the relay writes the procs' lines
        print(f"ctl {i:06d} " + "y" * 100, flush=True)
        i += 1
        time.sleep(0.001)
    burst.get(timeout=120)
    print("burst done", flush=True)
    mesh.last_words.call().get(timeout=60)
    procs.stop().get(timeout=60)
''')
BURST = 20_000  # ~2.5 MB a proc: more than a pipe holds, read in several passes


def run(tmp_path: Path, *, merged: bool = False, relay: str | None = None,
        stdout: object = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "printing.py"
    script.write_text(SCRIPT.replace("MODE_LINES", str(BURST)))
    env = dict(os.environ)
    env.pop("MONARCH_OUTPUT_RELAY", None)
    # the script's print is then one write (PYTHONUNBUFFERED writes its text and its newline
    # apart, and any other writer's line may land between the two, relayed or not)
    env.pop("PYTHONUNBUFFERED", None)
    if relay is not None:
        env["MONARCH_OUTPUT_RELAY"] = relay
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
                          stdout=stdout,
                          stderr=subprocess.STDOUT if merged else subprocess.PIPE, timeout=200)


def _pids(lines: list[str], prefix: str) -> set[str]:
    return {line.split()[3] for line in lines if line.startswith(prefix)}


def test_lines_arrive_whole_in_order_and_before_the_answers(tmp_path):
    out = run(tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # relayed: the procs write into a pipe of their own, stdout and stderr apart as ours are
    assert "fds False False False" in lines, lines[-5:]
    for n in range(8):  # each actor's line is out before the caller printed what it returned
        # (`get` for 0-4, `await` for 5-7)
        after = lines.index(f"after {n}")
        assert len([line for line in lines[:after] if line.startswith(f"out {n} ")]) == 2
        assert f"err {n}" in out.stderr
    burst = [line for line in lines if line.startswith("burst ") and line != "burst done"]
    assert len(burst) == 2 * BURST  # nothing lost, no line cut or spliced into another
    pids = {line.split()[1] for line in burst}
    assert len(pids) == 2
    for pid in pids:
        mine = [line for line in burst if line.split()[1] == pid]
        assert [int(line.split()[2]) for line in mine] == list(range(BURST))
        assert all(line.endswith(" " + "x" * 100) for line in mine)
    assert lines.index("burst done") > max(lines.index(line) for line in burst[-2:])
    # the script's own lines, printed meanwhile, land between the procs' lines, never inside
    ours = [line for line in lines if "ctl " in line]
    assert ours and all(line.startswith("ctl ") and line.endswith(" " + "y" * 100)
                        for line in ours)
    # what procs print just before the script stops them still comes out
    assert len([line for line in lines if line.startswith("last words from ")]) == 2


def test_one_pipe_when_stdout_and_stderr_are_one_file(tmp_path):
    """`2>&1`: one pipe for both streams, so an actor's stdout and stderr lines keep their
    order."""
    out = run(tmp_path, merged=True)
    assert out.returncode == 0, out.stdout[-2000:]
    lines = out.stdout.splitlines()
    assert "fds False True False" in lines, lines[-5:]
    for pid in _pids(lines, "out 0 "):
        said = [line.split()[0] + line.split()[1] for line in lines
                if line.startswith(("out ", "err ")) and line.endswith(pid)]
        assert said == [f"{kind}{n}" for n in range(8) for kind in ("out", "err")]


def test_a_file_and_the_switch_off_write_directly(tmp_path):
    """Output to a file wakes nobody: procs write there themselves, as with the switch off."""
    with open(tmp_path / "out.txt", "w") as f:
        out = run(tmp_path, stdout=f)
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "out.txt").read_text()
    assert "fds False False True" in text  # stdout is the file itself; stderr is relayed
    assert text.count("last words from ") == 2
    off = run(tmp_path, relay="0")
    assert off.returncode == 0, off.stderr
    assert "fds True False True" in off.stdout.splitlines()  # every fd is the controller's


def test_a_switch_that_does_not_read_stops_the_script(tmp_path):
    out = run(tmp_path, relay="sometimes")
    assert out.returncode != 0
    assert "MONARCH_OUTPUT_RELAY='sometimes': expected one of" in out.stderr, out.stderr[-2000:]
