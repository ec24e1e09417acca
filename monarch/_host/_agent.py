"""The host agent: spawns and reaps the procs of one host through its zygote.

The agent's thread starts the zygote (so the zygote's parent-death signal is tied to a thread
that lives as long as the agent) and reads its events: a proc's exit is known within
milliseconds of waitpid. Callbacks run on that thread; they must hand work off quickly.
"""

from __future__ import annotations

import os
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import msgpack

from ._output_relay import OutputRelay
from ._title import set_cmdline

ZYGOTE = "monarch._proc._zygote"
"""The zygote's program (`python -m`), exec'd or run in a forked child (`prefork`): the host
room starts it by name and never imports the proc room."""
PROC_RUNTIME = "monarch._proc._main"
"""What the zygote imports before it forks: a worker that forks its zygote imports it first."""

MALLOC_DEFAULTS = {
    "MALLOC_ARENA_MAX": "1",
    "MALLOC_MMAP_THRESHOLD_": str(1 << 32),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 32),
}
"""glibc malloc settings of the zygote and so of every proc: one arena, big blocks from the
heap and kept when freed. A proc receiving large messages (bytes, tensors: 64 MiB frames) then
reuses the memory of the last one instead of faulting in fresh pages for each (~3x faster here);
the price is that a proc keeps its peak heap. Any of them set in the environment wins."""


def proc_environment(env: dict[str, str] | None) -> dict[str, str]:
    """The zygote's environment: `env` (default: this process's) with MALLOC_DEFAULTS added."""
    out = dict(os.environ if env is None else env)
    for key, value in MALLOC_DEFAULTS.items():
        out.setdefault(key, value)
    return out


class Prefork:
    """A zygote forked from this process before its threads started (`prefork`): its pid and
    our end of its socket, for a `HostAgent` to take; `wait` and `kill` as a Popen's."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid, self.sock = pid, sock
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere
                self.returncode = 0
                break
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"zygote {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def prefork() -> Prefork | None:
    """Forks this host's zygote from this process, which must have no thread but its main one
    yet (a host worker at its start): the child imports the proc runtime and serves forks (the
    `HostAgent` given the result sends it its environment first); this process goes on. None
    (the agent then starts a zygote of its own) where forking is not safe: another thread
    runs. It saves each host an interpreter's start and the imports the two share: a
    ProcessJob of 16 hosts x 4 procs came up in 2.5-2.9 s instead of 3.4-4.5 on 2 cores."""
    if threading.active_count() != 1 or not hasattr(os, "fork"):
        return None
    import importlib

    importlib.import_module(PROC_RUNTIME)  # imported once: both processes have it
    parent = os.getpid()
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the zygote: never returns into the caller
        ours.close()
        os.setsid()  # a session of its own, as an exec'd zygote's (a terminal's ^C is ours)
        devnull = os.open(os.devnull, os.O_RDONLY)  # no stdin, as an exec'd zygote's
        os.dup2(devnull, 0)
        os.close(devnull)
        args = [ZYGOTE, str(theirs.fileno()), str(parent)]
        # as `ps` shows an exec'd zygote (and so its procs), not as the worker it was
        set_cmdline([sys.executable, "-m", *args])
        sys.argv = args  # runs as `python -m monarch._proc._zygote FD PID` would
        runpy.run_module(ZYGOTE, run_name="__main__", alter_sys=True)
        raise SystemExit(0)  # its socket closed: it killed its procs; exit as Python does
    theirs.close()
    return Prefork(pid, ours)


class Started:
    """A zygote started ahead of its `HostAgent` (`start_zygote`): its process and our end of
    its socket, for the agent to take."""

    def __init__(self, process: subprocess.Popen[bytes], sock: socket.socket,
                 relay: OutputRelay | None = None) -> None:
        self.process, self.sock = process, sock
        self.relay = relay
        """What relays its procs' stdout and stderr (`_output_relay`), if anything does."""

    def close(self) -> None:
        """Lets it go unused: its socket closed, it exits."""
        self.sock.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.relay is not None:
            self.relay.close()


def start_zygote(python: str | None = None, env: dict[str, str] | None = None,
                 relay_output: bool = False) -> Started:
    """Starts a zygote (`python -m monarch._proc._zygote`) now, for a `HostAgent` made later
    to take (`started=`): a controller starts its local one first thing, so the zygote's
    imports of the proc runtime (~0.1-0.2 s) run beside the controller's own job start, not
    after it, at the first `spawn_procs`. With `relay_output`, its procs' stdout and stderr
    reach ours through an `OutputRelay` (`Started.relay`; see `_output_relay`)."""
    relay = OutputRelay.start() if relay_output else None
    ours, theirs = socket.socketpair()
    try:
        process = subprocess.Popen(
            [python or sys.executable, "-m", ZYGOTE, str(theirs.fileno()), str(os.getpid())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, start_new_session=True,
            stdout=relay.fds.get(1) if relay else None,
            stderr=relay.fds.get(2) if relay else None, env=proc_environment(env))
    except BaseException:
        ours.close()
        if relay is not None:
            relay.close()
        raise
    finally:
        theirs.close()
    if relay is not None:
        relay.handed_over()
    return Started(process, ours, relay)


class HostAgent:
    """Forks procs on this host and reports their pids and exits."""

    def __init__(self, on_fork: Callable[[str, int], None], on_exit: Callable[[int, int], None],
                 on_lost: Callable[[], None], python: str | None = None,
                 env: dict[str, str] | None = None, forked: Prefork | None = None,
                 started: Started | None = None) -> None:
        self.python = python or sys.executable
        """The interpreter the zygote (and so every proc it forks) runs."""
        self._env = env
        self._forked = forked if self.python == sys.executable else None
        """A zygote forked already (`prefork`), taken instead of starting one."""
        if forked is not None and self._forked is None:
            forked.sock.close()  # another interpreter was asked for: that one is not used
            forked.kill()
            forked.wait()
        self._started_zygote = started
        """A zygote started already (`start_zygote`, with this agent's interpreter and
        environment), taken instead of starting one."""
        self._on_fork = on_fork
        self._on_exit = on_exit
        self._on_lost = on_lost
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._zygote: subprocess.Popen[bytes] | None = None
        self._closed = False

    def fork(self, proc: str, config: dict[str, Any]) -> None:
        """Asks the zygote to fork proc `proc` with `config` (see `_proc_main.run`)."""
        self._request({"op": "fork", "proc": proc, "config": config})

    def signal(self, pid: int, sig: int) -> None:
        """Sends `sig` to a proc this agent forked."""
        self._request({"op": "signal", "pid": pid, "sig": sig})

    def preload(self, modules: list[str]) -> None:
        """Has the zygote import `modules` when idle, so later procs start with them."""
        self._request({"op": "preload", "modules": modules})

    def start(self) -> None:
        """Starts the zygote now (it imports the proc runtime meanwhile), not at the first fork."""
        self._ensure_started()

    @property
    def zygote_pid(self) -> int | None:
        """The zygote's pid, once started."""
        return self._zygote.pid if self._zygote else None

    def close(self) -> None:
        """Closes the zygote's socket: it SIGKILLs every proc it forked and exits."""
        self._closed = True
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if self._zygote is not None:
            try:
                self._zygote.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._zygote.kill()

    def _request(self, request: dict[str, Any]) -> None:
        self._ensure_started()
        data = msgpack.packb(request)
        with self._send_lock:
            if self._sock is None:
                raise RuntimeError("the host agent is closed")
            self._sock.sendall(data)

    def _ensure_started(self) -> None:
        if self._thread is None:
            with self._send_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="monarch-host-agent",
                                                    daemon=True)
                    self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            raise RuntimeError(f"could not start the zygote: {self._start_error}")

    def _run(self) -> None:
        try:
            if self._forked is not None:
                ours = self._forked.sock
                env = proc_environment(self._env)
                ours.sendall(msgpack.packb({"op": "environ", "env": env}))
                self._zygote = self._forked  # type: ignore[assignment]
            elif self._started_zygote is not None:
                ours, self._zygote = self._started_zygote.sock, self._started_zygote.process
            else:
                ours, theirs = socket.socketpair()
                self._zygote = subprocess.Popen(
                    [self.python, "-m", ZYGOTE, str(theirs.fileno()),
                     str(os.getpid())],
                    pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                    start_new_session=True, env=proc_environment(self._env))
                theirs.close()
            self._sock = ours
        except BaseException as exc:  # noqa: BLE001 - reported to whoever waits
            self._start_error = exc
            return
        finally:
            self._started.set()
        self._read_events(ours)
        if not self._closed:
            self._on_lost()  # the zygote died: its procs died with it (parent-death signal)

    def _read_events(self, sock: socket.socket) -> None:
        unpacker = msgpack.Unpacker(raw=False)
        while True:
            try:
                data = sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                return
            unpacker.feed(data)
            for event in unpacker:
                if event["ev"] == "forked":
                    self._on_fork(event["proc"], event["pid"])
                elif event["ev"] == "exited":
                    self._on_exit(event["pid"], event["status"])
