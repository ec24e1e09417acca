"""The one check of whether a pid is alive: a zombie is not, a reused pid is not the process
recorded, and a pid of another host is never called dead."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from monarch._runtime._pids import GONE, pid_alive, proc_stat, start_time
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child
    child.kill()
    child.wait()


def no_such_pid() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def test_a_running_process_is_alive_and_named_by_its_start_time(sleeper):
    started = start_time(sleeper.pid)
    assert started != GONE
    assert pid_alive(sleeper.pid) and pid_alive(sleeper.pid, started)
    assert pid_alive(os.getpid(), start_time(os.getpid()), hostname=socket.gethostname())


def test_a_reused_pid_is_not_the_process_recorded(sleeper):
    # the record names this pid with another start time: a process that exited since
    assert not pid_alive(sleeper.pid, str(int(start_time(sleeper.pid)) - 1))
    assert not pid_alive(sleeper.pid, GONE)


def test_a_zombie_is_not_alive_and_is_left_to_its_parent():
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])
    wait_until(lambda: (proc_stat(child.pid) or ["?"])[0] == "Z", "the child to be a zombie")
    assert not pid_alive(child.pid)
    assert start_time(child.pid) == GONE
    assert (proc_stat(child.pid) or ["?"])[0] == "Z"  # not reaped by the check...
    assert child.wait(timeout=10) == 7  # ...so its parent still gets its status


def test_a_process_that_exited_is_not_alive():
    assert not pid_alive(no_such_pid())
    assert not pid_alive(no_such_pid(), "12345")
    assert start_time(no_such_pid()) == GONE
    assert not pid_alive(0) and not pid_alive(-1)  # process groups, not processes


def test_a_pid_of_another_host_is_never_called_dead():
    other = socket.gethostname() + "-elsewhere"
    assert pid_alive(no_such_pid(), "12345", hostname=other)
    assert not pid_alive(no_such_pid(), hostname=socket.gethostname())
