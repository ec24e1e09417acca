"""A running example job (tests/cli/job_script.py as a subprocess) and a way to run `monarch`.

Everything runs in a private run directory (`MONARCH_RUN_DIR`), so jobs of other users of the
machine are never found; the job and every command are stopped by pid.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import pid_gone

SCRIPT = Path(__file__).with_name("job_script.py")
TICK = re.compile(r"^tick -?\d+ rank \d$")


class RunningJob:
    """The controller subprocess: its stdout lines, its stdin, its discovery info."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.env = dict(os.environ, MONARCH_RUN_DIR=run_dir, PYTHONUNBUFFERED="1",
                        NO_COLOR="1")
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=self.env, cwd=run_dir)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.job_id = self.wait_line(r"^READY (\S+)", 90).group(1)
        self.discovery = Path(run_dir) / self.job_id / "admin.json"
        self.info = json.loads(self.discovery.read_text())

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self.lines.append("<EOF>")
            self._cond.notify_all()

    def wait_line(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """Waits for a stdout line matching `pattern`."""
        regex = re.compile(pattern)

        def found() -> re.Match[str] | None:
            return next((m for m in map(regex.search, self.lines) if m), None)

        with self._cond:
            match = self._cond.wait_for(found, timeout)
        others = [line for line in self.lines if not TICK.match(line)]
        assert match, f"no line like {pattern!r} in {others[-40:]}"
        return match

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def monarch(self, *args: str, input: str | None = None, timeout: float = 60,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Runs `monarch ARGS` (a real process) against this job."""
        return subprocess.run([sys.executable, "-m", "monarch.cli", *args], input=input,
                              capture_output=True, text=True, timeout=timeout,
                              env=env or self.env)

    def stop(self) -> int:
        """Ends the job (quit on stdin; SIGKILL by pid after 30 s); returns its exit code."""
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


def _running_job() -> Iterator[RunningJob]:
    run_dir = tempfile.mkdtemp(prefix="mcli")
    running = RunningJob(run_dir)
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def job() -> Iterator[RunningJob]:
    """A job shared by a module's tests, which leave it as they found it (every rank running)."""
    yield from _running_job()


@pytest.fixture
def fresh_job() -> Iterator[RunningJob]:
    """A job of its own, for a test that kills, stops or ends it."""
    yield from _running_job()


def json_out(result: subprocess.CompletedProcess[str]) -> Any:
    """The JSON a `--json` command printed (asserting it printed some)."""
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def helpers() -> Any:
    """json_out and pid_gone, for the tests (no imports from conftest)."""
    return type("Helpers", (), {"json_out": staticmethod(json_out),
                                "pid_gone": staticmethod(pid_gone)})
