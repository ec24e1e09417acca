"""The real `monarch top` and `monarch demo` in a terminal: tmux runs them, keys go in with
`send-keys`, the screen comes back with `capture-pane`."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from demojob import DemoJob
from waiting import alive, wait_gone, wait_until

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]

MONARCH = str(Path(sys.executable).parent / "monarch")
T = TypeVar("T")


class Tmux:
    """One detached tmux session of 200x50 running `command`, on a tmux server of its own
    (a shared server could size the window after someone else's client)."""

    def __init__(self, name: str, command: str, env: dict[str, str]) -> None:
        self.name = name
        exports = " ".join(f"{k}={v}" for k, v in env.items())
        # without COLUMNS/LINES (whatever set them here), the app reads the pane's real size
        wrapped = f"env -u COLUMNS -u LINES {exports} {command}; echo EXITED $?; sleep 60"
        self.tmux("new-session", "-d", "-s", name, "-x", "200", "-y", "50", wrapped)

    def tmux(self, *args: str) -> str:
        out = subprocess.run(["tmux", "-f", "/dev/null", "-L", self.name, *args],
                             capture_output=True, text=True, timeout=30)
        if out.returncode != 0 and args[0] != "kill-server":
            raise RuntimeError(f"tmux {args[0]}: {out.stderr}")
        return out.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.name, "-l", text)
        self.keys("Enter")

    def wait(self, *texts: str, timeout: float = 30.0) -> str:
        return self._wait(lambda screen: all(t in screen for t in texts) and screen,
                          f"{texts} on screen", timeout)

    def wait_gone(self, text: str, timeout: float = 30.0) -> None:
        self._wait(lambda screen: text not in screen, f"{text!r} off the screen", timeout)

    def wait_re(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        return self._wait(lambda screen: re.search(pattern, screen), f"{pattern!r} on screen",
                          timeout)

    def _wait(self, found: Callable[[str], T], what: str, timeout: float) -> T:
        """Reads the screen until `found(screen)` is truthy; fails showing the last screen."""
        last = [""]

        def check() -> T:
            last[0] = self.screen()
            return found(last[0])

        return wait_until(check, lambda: f"{what}; the screen:\n{last[0]}", timeout, 0.1)

    def kill(self) -> None:
        self.tmux("kill-server")


@pytest.fixture
def job(tmp_path):
    job = DemoJob(tmp_path)
    try:
        job.wait_ready()
        yield job
    finally:
        job.stop()


def test_monarch_top_in_a_terminal(job):
    env = {"MONARCH_RUN_DIR": str(job.run_dir), "COLORTERM": "truecolor"}
    tmux = Tmux(f"ctop-{os.getpid()}", f"{MONARCH} top --refresh 0.5", env)
    try:
        screen = tmux.wait("trainers[3]", "inspector[0]", "health ok", "k kill")
        assert job.info["job_id"] in screen and "topology" in screen and "logs" in screen
        tmux.keys("G")  # the last row: the inspector
        tmux.wait("› inspector[0]")
        job.touch("breakpoint")
        tmux.wait("paused in pdb", "pdb at inspect")
        tmux.keys("a")  # the terminal is handed to pdb
        tmux.wait("attached to inspector[0]", "(Pdb)")
        tmux.type("p secret * 3")
        session = job.client.sessions()[0]
        # `secret` is step * 7, evaluated inside the actor: the answer is a multiple of 21
        answer = tmux.wait_re(r"\(Pdb\) p secret \* 3\s+(\d+)\s").group(1)
        assert int(answer) % 21 == 0 and session["actor_name"] == "inspector"
        tmux.type("secret = 777")
        tmux.type("c")
        tmux.wait("monarch top", "k kill")  # the console is back
        assert job.wait_until(lambda: job.client.logs(text="inspector resumed: secret=777"))
        tmux.keys("d")
        tmux.wait("diagnostics", "PASS")
        tmux.keys("Escape")  # alone: a key right after it would read as alt+key
        tmux.wait_gone("PASS")
        tmux.keys("?")
        tmux.wait("any key closes", "kill the selection")
        tmux.keys("x")
        tmux.keys("q")
        tmux.wait("EXITED 0")
    finally:
        tmux.kill()


def test_monarch_top_diagnose_prints_json(job):
    import json

    env = dict(os.environ, MONARCH_RUN_DIR=str(job.run_dir))
    out = subprocess.run([MONARCH, "top", "--diagnose"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] and len(report["checks"]) >= 5
    # a proc that cannot answer (SIGSTOP) fails its ping: exit status 1
    pid = job.mesh("rewards")["actors"][0]["proc"]
    pid = next(p["pid"] for h in job.client.topology()["hosts"] for p in h["procs"]
               if p["proc"] == pid)
    os.kill(pid, signal.SIGSTOP)
    try:
        out = subprocess.run([MONARCH, "top", "--diagnose"], env=env, capture_output=True,
                             text=True, timeout=60)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert not report["ok"] and [c["pid"] for c in report["checks"]
                                 if c["status"] == "fail"] == [pid]
    empty = dict(env, MONARCH_RUN_DIR=str(job.run_dir / "none"))
    out = subprocess.run([MONARCH, "top", "--diagnose"], env=empty, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 3 and "no running monarch job" in out.stderr


def test_monarch_demo_in_a_terminal(tmp_path):
    import json
    import tempfile

    run_dir = tempfile.mkdtemp(prefix="ct-")
    scratch = tempfile.mkdtemp(prefix="ctmp-")  # the demo's TMPDIR
    tmux = Tmux(f"cdemo-{os.getpid()}", f"{MONARCH} demo --refresh 0.5",
                {"MONARCH_RUN_DIR": run_dir, "TMPDIR": scratch})
    try:
        tmux.wait("trainers[3]", "generators[1]", "rewards[0]", "inspector[0]",
                  "F fail a rank", timeout=90)
        (found,) = Path(run_dir).glob("*/admin.json")
        pid = json.loads(found.read_text())["pid"]  # the workload's controller
        tmux.keys("F")
        tmux.wait("✖ failed", "injected failure")
        tmux.keys("q")
        tmux.wait("EXITED 0")
        wait_gone(pid)  # the workload did not outlive the console
        screen = tmux.wait("workload stopped", "was removed; --keep-log keeps it")
        log = re.search(r"its log (\S+) was removed", screen.replace("\n", ""))
        assert log and log.group(1).startswith(scratch) and not Path(log.group(1)).exists()
        assert os.listdir(scratch) == []  # nothing left behind
    finally:
        tmux.kill()
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.parametrize("ending", ["terminal closes", "SIGTERM"])
def test_monarch_demo_leaves_nothing_when_its_terminal_closes_or_it_is_terminated(ending):
    import json
    import tempfile

    run_dir = tempfile.mkdtemp(prefix="ct-")
    scratch = tempfile.mkdtemp(prefix="ctmp-")  # the demo's TMPDIR
    demo = 0
    tmux = Tmux(f"chup-{os.getpid()}", f"{MONARCH} demo --refresh 0.5",
                {"MONARCH_RUN_DIR": run_dir, "TMPDIR": scratch})
    try:
        tmux.wait("trainers[3]", "inspector[0]", timeout=90)
        (found,) = Path(run_dir).glob("*/admin.json")
        pid = json.loads(found.read_text())["pid"]
        shell = int(tmux.tmux("display", "-p", "-t", tmux.name, "#{pane_pid}"))
        demo = int(Path(f"/proc/{shell}/task/{shell}/children").read_text().split()[0])
        assert "demo" in Path(f"/proc/{demo}/cmdline").read_text()  # `monarch demo` itself
        assert os.listdir(scratch)  # the demo's log is there while it runs
        if ending == "SIGTERM":  # the console ends as `q` ends it: the terminal is restored
            os.kill(demo, signal.SIGTERM)
            tmux.wait("EXITED 0", timeout=90)
            tmux.wait_gone("trainers[3]")
        else:
            tmux.kill()  # the terminal goes away: SIGHUP to `monarch demo`
        wait_gone(pid, timeout=60)  # the workload did not outlive its terminal
        wait_until(lambda: os.listdir(scratch) == [], "the demo to remove its log")
        wait_gone(demo, timeout=60)  # nor the console (its threads once held it forever)
    finally:
        tmux.kill()
        if demo and alive(demo):
            os.kill(demo, signal.SIGKILL)
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
