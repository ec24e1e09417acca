"""Running shell commands on a job's hosts: `exec_command`, and the streaming that
`monarch exec` prints.

One proc per host runs a `BashActor`; lines come back through a Port as they are written, and
the result is the largest exit code of the ranks.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
from typing import Any, Callable

from .._runtime._future import Future
from ._bash import BashActor, command_script, is_python

HOST_FAILED = 255
"""The exit code counted for a host that failed before its command ended."""


def exec_command(host_mesh: Any, cmd: list[str], env: dict[str, str] | None = None,
                 workdir: str | None = None, output_dir: str | None = None,
                 rank: int | None = None, point: dict[str, int] | None = None,
                 per_host: dict[str, int] | None = None) -> Future[int]:
    """Runs `cmd` on the hosts of `host_mesh`; a future of the largest exit code.

    The command starts now, on a thread of its own; the future only observes it. Its procs
    are stopped before the future settles.

    Args:
        host_mesh: where to run.
        cmd: the command and its arguments (a `.py` file or `-m module` runs with the procs'
            Python).
        env: extra environment variables.
        workdir: working directory on the hosts (default: this directory, where it exists).
        output_dir: write each rank's `stdout.txt`/`stderr.txt` there instead of printing.
        rank: only this flat rank; point: only this coordinate (not both).
        per_host: procs per host, as in `spawn_procs`.
    """
    if rank is not None and point is not None:
        raise ValueError("rank and point are mutually exclusive")
    if not cmd:
        raise ValueError("exec_command needs a command")
    cmd, client_cwd = list(cmd), os.getcwd()

    def run() -> int:
        target = host_mesh
        if point is not None:
            target = host_mesh.slice(**point)
        elif rank is not None:
            target = host_mesh.flatten("rank").slice(rank=rank)
        procs = target.spawn_procs(per_host=per_host)
        try:
            actors = procs.spawn("BashActor", BashActor)
            if is_python(cmd):  # with the hosts' own interpreter
                call = actors.run_python.call(cmd, env=env, workdir=workdir,
                                              client_cwd=client_cwd, output_dir=output_dir)
            else:
                call = actors.run.call(command_script(cmd, env, workdir, client_cwd),
                                       output_dir=output_dir)
            worst = 0
            for _, result in call.get():  # (point, result) of each rank
                worst = max(worst, result.get("returncode", 1))
                if output_dir is None:
                    sys.stdout.write(result.get("stdout", ""))
                    sys.stderr.write(result.get("stderr", ""))
            return worst
        finally:
            procs.stop().get()

    return in_thread(run)


def in_thread(fn: Callable[[], Any]) -> Future[Any]:
    """Runs `fn` on a new thread (in this context); a future of its result."""
    done: Future[Any] = Future._pending()
    done._unobserved = True
    ctx = contextvars.copy_context()

    def main() -> None:
        try:
            value = ctx.run(fn)
        except BaseException as exc:  # noqa: BLE001 - delivered through the future
            done.set_exception(exc)
        else:
            done.set_result(value)

    threading.Thread(target=main, name="monarch-exec-command", daemon=False).start()
    return done


def stream_command(targets: list[tuple[str, Any]], script: str,
                   on_line: Callable[[str, str, str], None]) -> dict[str, int]:
    """Runs `script` on every host of every (name, HostMesh) target, one proc per host,
    calling `on_line(host label, "out"|"err", line)` as lines arrive; the exit code of each
    host label (`trainers/1`). A host that fails meanwhile counts `HOST_FAILED`."""
    from .._actors._channel import Channel

    port, receiver = Channel[str].open()
    running: list[tuple[list[str], Any, Any]] = []
    for name, hosts in targets:
        procs = hosts.spawn_procs(name=f"exec-{name}")
        actors = procs.spawn("exec", BashActor)
        labels = [f"{name}/{i}" for i in range(len(actors))]
        call = actors.run_streaming.call(script, port, list(range(len(actors))), tag=name)
        running.append((labels, call, procs))
    codes: dict[str, int] = {}
    try:
        expected = {label for labels, _, _ in running for label in labels}
        next_value = None  # a future that timed out still takes the next value: keep it
        while set(codes) < expected:
            next_value = next_value or receiver.recv()
            try:
                message = next_value.get(timeout=0.5)
            except TimeoutError:
                _count_failed(running, codes)
                continue
            next_value = None
            label, _, rest = message.partition(":")
            tag, _, text = rest.partition(":")
            if label == "skip":
                continue
            if tag == "rc":
                codes[label] = int(text)
            else:
                on_line(label, tag, text)
    finally:
        receiver.close()
        for _, _, procs in running:
            try:
                procs.stop().get(timeout=30)
            except Exception:  # noqa: BLE001 - a host that died has nothing left to stop
                pass
    return codes


def _count_failed(running: list[tuple[list[str], Any, Any]], codes: dict[str, int]) -> None:
    for labels, call, _ in running:
        if call.done() and call.exception() is not None:
            for label in labels:
                codes.setdefault(label, HOST_FAILED)
