"""BashActor: runs shell scripts on the hosts (what `exec_command` and `monarch exec` use).

It runs in procs, so it imports only the actor API. Each rank gets MONARCH_RANK_<dim> and
MONARCH_SIZE_<dim> in the script's environment.
"""

from __future__ import annotations

import os
import selectors
import shlex
import subprocess
import sys
import tempfile
from typing import Any

from .._actors._actor import Actor
from .._runtime._context import current_rank
from .._actors._endpoint import endpoint


def command_script(cmd: list[str], env: dict[str, str] | None = None,
                   workdir: str | None = None, client_cwd: str | None = None) -> str:
    """The bash script that runs `cmd` (one string: shell text as is; several: quoted words)
    with `env`, in `workdir` (or in the client's directory when the host has it)."""
    lines = ["#!/bin/bash"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    if workdir:
        lines.append(f"cd {shlex.quote(workdir)} || exit 1")
    elif client_cwd:
        lines.append(f"[ -d {shlex.quote(client_cwd)} ] && cd {shlex.quote(client_cwd)}")
    if is_python(cmd):
        cmd = [sys.executable, *cmd]
    lines.append(cmd[0] if len(cmd) == 1 else shlex.join(cmd))
    return "\n".join(lines) + "\n"


def is_python(cmd: list[str]) -> bool:
    """A Python file or `-m module` (run with the interpreter of the host that runs it)."""
    return bool(cmd) and (cmd[0].endswith(".py") or cmd[0] == "-m")


def _rank_env() -> dict[str, str]:
    rank = current_rank()
    env = {f"MONARCH_RANK_{k}": str(v) for k, v in dict(rank).items()}
    env.update({f"MONARCH_SIZE_{k}": str(v)
                for k, v in zip(rank.extent.labels, rank.extent.sizes)})
    return env


class BashActor(Actor):
    """Runs bash scripts: `run` returns the whole output, `run_streaming` sends it line by
    line to a port as it is produced."""

    @endpoint
    def run(self, script: str, target_ranks: list[int] | None = None,
            output_dir: str | None = None) -> dict[str, Any]:
        """Runs `script` to completion: {"returncode", "stdout", "stderr"} (with output_dir,
        the output goes to `stdout.txt` / `stderr.txt` there instead)."""
        if target_ranks is not None and current_rank().rank not in target_ranks:
            return {"returncode": 0, "stdout": "", "stderr": "", "skipped": True}
        return _run_script(script, output_dir)

    @endpoint
    def run_python(self, cmd: list[str], env: dict[str, str] | None = None,
                   workdir: str | None = None, client_cwd: str | None = None,
                   output_dir: str | None = None) -> dict[str, Any]:
        """Runs a Python command (`train.py ...` or `-m module ...`) with this host's
        interpreter, `env` added, in `workdir` (else `client_cwd` where it exists here); the
        result as `run`'s."""
        return _run_script(command_script(cmd, env, workdir, client_cwd), output_dir)

    @endpoint
    def run_streaming(self, script: str, output_port: Any, target_ranks: list[int],
                      tag: str | None = None) -> None:
        """Runs `script` on the ranks in `target_ranks`, sending `"<rank>:out:<line>"`,
        `"<rank>:err:<line>"` and finally `"<rank>:rc:<code>"` to `output_port`; other ranks
        send `"skip:<rank>"`. With a `tag`, `<rank>` reads `<tag>/<rank>`."""
        rank: Any = current_rank().rank
        if rank not in target_ranks:
            output_port.send(f"skip:{rank}")
            return
        rank = rank if tag is None else f"{tag}/{rank}"
        env = {**os.environ, **_rank_env()}
        with tempfile.NamedTemporaryFile("w", suffix=".sh") as f:
            f.write(script)
            f.flush()
            child = subprocess.Popen(["bash", f.name], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     text=True, env=env)
            assert child.stdout is not None and child.stderr is not None
            with selectors.DefaultSelector() as sel:
                sel.register(child.stdout, selectors.EVENT_READ, "out")
                sel.register(child.stderr, selectors.EVENT_READ, "err")
                while sel.get_map():
                    for key, _ in sel.select():
                        line = key.fileobj.readline()  # type: ignore[union-attr]
                        if not line:
                            sel.unregister(key.fileobj)
                        else:
                            output_port.send(f"{rank}:{key.data}:{line}")
            child.wait()
        output_port.send(f"{rank}:rc:{child.returncode}")


def _run_script(script: str, output_dir: str | None) -> dict[str, Any]:
    env = {**os.environ, **_rank_env()}
    with tempfile.NamedTemporaryFile("w", suffix=".sh") as f:
        f.write(script)
        f.flush()
        if output_dir is None:
            done = subprocess.run(["bash", f.name], capture_output=True, text=True, env=env)
            return {"returncode": done.returncode, "stdout": done.stdout,
                    "stderr": done.stderr}
        os.makedirs(output_dir, exist_ok=True)
        with open(os.path.join(output_dir, "stdout.txt"), "w") as out, \
                open(os.path.join(output_dir, "stderr.txt"), "w") as err:
            code = subprocess.run(["bash", f.name], stdout=out, stderr=err,
                                  env=env).returncode
        return {"returncode": code, "stdout": "", "stderr": ""}
