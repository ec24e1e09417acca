"""What `SPMDActor` does in its proc: torchrun's environment from a mesh point, and the script.

torchrun starts one process per local rank and hands it its place in the job through environment
variables (RANK, LOCAL_RANK, WORLD_SIZE, ... see torch.distributed.run). A mesh already has one
proc per rank, so the actor derives the same variables from its point: the last dimension is the
"local" one (a host's GPUs), the rank is the point's row-major rank. Then it runs the script as
torchrun's child would: `python script.py args` (runpy.run_path) or `python -m module args`
(runpy.run_module), as `__main__`, with `sys.argv` set.

Exits: `sys.exit(0)` / `sys.exit()` is a script that finished (torchrun counts exit code 0 as
success); any other exit code propagates as the `SystemExit` it is, which the runtime treats as
a `BaseException` escaping an endpoint, as Monarch 0.7.0 does. An exception propagates to the
caller as an `ActorError` carrying the script's traceback.
"""

from __future__ import annotations

import math
import runpy
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from .._geometry._extent import Point


@dataclass(frozen=True, slots=True)
class Ranks:
    """A proc's place in the job, as torchrun counts it."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int

    @classmethod
    def of(cls, point: Point) -> Ranks:
        """The place of the proc at `point` of its mesh: the last dimension is the local one
        (a host's GPUs); a mesh with no dimensions is one proc, rank 0 of a world of 1."""
        sizes = point.extent.sizes
        local_rank = point[point.extent.labels[-1]] if sizes else 0
        return cls(point.rank, local_rank, math.prod(sizes), sizes[-1] if sizes else 1)

    @property
    def group_rank(self) -> int:
        """The index of the proc's host (torchrun's node rank)."""
        return self.rank // self.local_world_size

    @property
    def group_world_size(self) -> int:
        """The number of hosts."""
        return -(-self.world_size // self.local_world_size)

    def env(self, master_addr: str, master_port: int) -> dict[str, str]:
        """The variables torchrun sets for this proc."""
        return {
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
            "RANK": str(self.rank),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.group_rank),
            "GROUP_WORLD_SIZE": str(self.group_world_size),
            "ROLE_RANK": str(self.rank),
            "ROLE_WORLD_SIZE": str(self.world_size),
            "ROLE_NAME": "rank",
            "WORLD_SIZE": str(self.world_size),
        }


def run_script(script_args: Sequence[str]) -> None:
    """Runs `[script, *args]` or `["-m", module, *args]` as `__main__`, as torchrun's child.

    Raises:
        ValueError: `script_args` is empty, or `-m` names no module.
        SystemExit: the script exited with a non-zero code.
    """
    if not script_args:
        raise ValueError("No script or module specified")
    args = [str(arg) for arg in script_args]
    try:
        if args[0] == "-m":
            if len(args) < 2:
                raise ValueError("No module specified after -m")
            sys.argv = args[1:]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = args
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise


def free_port() -> int:
    """A TCP port free on every interface right now (the master's store binds them all)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])
