"""The zygote: a pre-imported, single-threaded process that forks procs on request.

Started once per host by the host agent (`python -m monarch._proc._zygote FD`), or forked by
a host worker before its threads start (`_host._agent.prefork`: one interpreter's start and
imports fewer per host). It speaks msgpack over the inherited socket FD: requests
`{"op": "fork", "proc", "config"}`, `{"op": "signal", "pid", "sig"}`,
`{"op": "preload", "modules"}`, `{"op": "environ", "env"}` (a forked zygote's environment);
events `{"ev": "forked", "proc", "pid"}`, `{"ev": "exited", "pid", "status"}` (exit code, or
minus the signal number).
It holds no threads and no zmq context, so forking is safe. It dies with its parent
(PR_SET_PDEATHSIG) and, when its socket closes, SIGKILLs every proc it forked and exits.
"""

from __future__ import annotations

import importlib
import os
import selectors
import signal
import socket
import sys
import tempfile
from typing import Any

import msgpack

from .._host import _lifeline


def main() -> None:
    fd, parent = int(sys.argv[1]), int(sys.argv[2])
    _lifeline.die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    importlib.import_module("monarch._proc._main")  # the whole proc runtime, imported once
    Zygote(socket.socket(fileno=fd)).run()


class Zygote:
    """The fork loop."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._children: set[int] = set()
        self._unpacker = msgpack.Unpacker(raw=False)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._sock, selectors.EVENT_READ, "sock")
        sel.register(self._wake_r, selectors.EVENT_READ, "chld")
        while True:
            for key, _ in sel.select(timeout=1.0):
                if key.data == "sock" and not self._read_requests():
                    self._shutdown()
                    return
            self._reap()

    def _read_requests(self) -> bool:
        try:
            data = self._sock.recv(1 << 20)
        except InterruptedError:
            return True
        if not data:
            return False
        self._unpacker.feed(data)
        for request in self._unpacker:
            self._handle(request)
        return True

    def _handle(self, request: dict[str, Any]) -> None:
        op = request.get("op")
        if op == "fork":
            self._fork(request["proc"], request["config"])
        elif op == "signal":
            pid = request["pid"]
            if pid in self._children:
                try:
                    os.kill(pid, request["sig"])
                except ProcessLookupError:
                    pass
        elif op == "environ":  # a forked zygote takes the environment an exec'd one is given
            from .._runtime import _malloc

            os.environ.clear()
            os.environ.update(request["env"])
            _malloc.apply_environment(request["env"])
        elif op == "preload":
            for name in request["modules"]:
                try:
                    importlib.import_module(name)
                except Exception:  # noqa: BLE001 - a preload is an optimisation only
                    pass

    def _fork(self, proc: str, config: dict[str, Any]) -> None:
        pid = os.fork()
        if pid == 0:
            self._become_proc(config)
        self._children.add(pid)
        self._send({"ev": "forked", "proc": proc, "pid": pid})

    def _become_proc(self, config: dict[str, Any]) -> None:
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._sock.close()
            launch = config.pop("launch", None)
            if config.get("bind"):
                from monarch._host._bootstrap_command import apply_bind

                launch = apply_bind(config["bind"], launch)
            if launch is not None:
                _exec(launch, config)  # becomes the bootstrap command (same pid); no return
            from monarch._proc import _main as _proc_main

            code = _proc_main.run(config)
        except BaseException:  # noqa: BLE001 - a proc must never return into the zygote
            import traceback

            traceback.print_exc()
            os._exit(1)
        # A proc that was stopped ends like any Python program: SystemExit unwinds out of the
        # zygote's loop (nothing there catches it) and the interpreter finalizes, so atexit
        # handlers, module finalizers and __del__ of module globals run, as in Monarch.
        raise _ProcExit(code)

    def _reap(self) -> None:
        try:
            os.read(self._wake_r, 4096)
        except BlockingIOError:
            pass
        while self._children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self._children.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            self._send({"ev": "exited", "pid": pid, "status": code})

    def _send(self, event: dict[str, Any]) -> None:
        try:
            self._sock.sendall(msgpack.packb(event))
        except OSError:
            pass

    def _shutdown(self) -> None:
        for pid in list(self._children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in list(self._children):
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _exec(launch: dict[str, Any], config: dict[str, Any]) -> None:
    """Replaces this freshly forked proc with its bootstrap command: the environment is the
    one the proc would have had (or empty, without `inherit_env`) with the command's `env` on
    top (None removes); the proc's configuration waits for it in a private file."""
    base = config["env"] if config["env"] is not None else dict(os.environ)
    env = dict(base) if launch["inherit_env"] else {}
    for key, value in launch["env"].items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    config = dict(config, env=None)  # the exec'd proc keeps the environment it is given
    where = config["run_dir"] if os.path.isdir(config["run_dir"]) else tempfile.gettempdir()
    path = os.path.join(where, f"{config['proc']}.boot")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(msgpack.packb(config))
    env["MONARCH_PROC_BOOT"] = path
    try:
        os.execvpe(launch["program"], launch["argv"], env)
    except OSError as exc:
        os.unlink(path)
        print(f"could not start proc {config['proc']}: {launch['program']}: {exc}",
              file=sys.stderr, flush=True)
        os._exit(127)


class _ProcExit(SystemExit):
    """A forked proc leaving the zygote's code for a normal interpreter exit."""


if __name__ == "__main__":
    main()
