"""SPMD on meshes: torchrun-style scripts over a proc mesh, as Monarch's `monarch.spmd`.

    from monarch.actor import this_host
    from monarch.spmd import SPMDActor

    procs = this_host().spawn_procs(per_host={"gpus": 4})
    spmd = procs.spawn("_SPMDActor", SPMDActor)
    addr, port = spmd.slice(gpus=0).get_host_port.call_one(None).get()
    spmd.main.call(addr, port, ["train.py", "--lr", "0.01"]).get()

Each proc gets the variables torchrun would give it (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME,
MASTER_ADDR, MASTER_PORT), derived from its point in the mesh: the last dimension is the local
one. `setup_torch_elastic_env(procs)` only sets them, for client code that calls
`torch.distributed` itself from its own actors.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ._mesh._spmd import Ranks, free_port, run_script
from .actor import Actor, ActorMesh, ProcMesh, current_rank, endpoint
from .tools.network import AddrType, get_ipaddr

__all__ = ["SPMDActor", "setup_torch_elastic_env", "setup_torch_elastic_env_async"]

_BOTH_OR_NEITHER = ("Either both master_addr and master_port must be specified or neither must "
                    "be specified.")


class SPMDActor(Actor):
    """Sets torchrun's environment in its proc and runs SPMD scripts there.

    Rank information comes from the actor's point in the mesh it was spawned as (its last
    dimension is the local one); the attributes `rank`, `local_rank`, `world_size`,
    `local_world_size`, `nproc_per_node`, `group_rank` and `group_world_size` hold it.
    """

    def __init__(self) -> None:
        self._ranks = ranks = Ranks.of(current_rank())
        self.rank: int = ranks.rank
        self.local_rank: int = ranks.local_rank
        self.world_size: int = ranks.world_size
        self.local_world_size: int = ranks.local_world_size
        self.nproc_per_node: int = ranks.local_world_size
        self.group_rank: int = ranks.group_rank
        self.group_world_size: int = ranks.group_world_size

    def _setup_env(self, master_addr: str, master_port: int) -> None:
        os.environ.update(self._ranks.env(master_addr, master_port))

    @endpoint
    def get_host_port(self, use_ipaddr: AddrType | None) -> tuple[str, int]:
        """This host's name (or IP address of the `use_ipaddr` family) and a free TCP port.

        Raises:
            RuntimeError: the host's name resolves to no address of that family.
        """
        hostname = socket.gethostname()
        port = free_port()
        if use_ipaddr is None:
            return hostname, port
        return get_ipaddr(hostname, port, use_ipaddr), port

    @endpoint
    def setup_env(self, master_addr: str, master_port: int) -> None:
        """Sets torchrun's environment variables in this proc."""
        self._setup_env(master_addr, master_port)

    @endpoint
    def main(self, master_addr: str, master_port: int, script_args: list[str]) -> bool:
        """Sets torchrun's environment, then runs the script as torchrun's child would.

        Args:
            master_addr: the rendezvous host (MASTER_ADDR).
            master_port: the rendezvous port (MASTER_PORT).
            script_args: `[script_path, *args]` or `["-m", module, *args]`.

        Returns:
            True once the script has finished (returned, or called `sys.exit(0)`).

        Raises:
            ValueError: no script or module specified.
            SystemExit: the script exited with a non-zero code (the actor fails, as a
                `BaseException` escaping an endpoint does).
        """
        self._setup_env(master_addr, master_port)
        run_script(script_args)
        return True


def setup_torch_elastic_env(proc_mesh: ProcMesh, master_addr: str | None = None,
                            master_port: int | None = None,
                            use_ipaddr: AddrType | None = None) -> None:
    """Sets torchrun's environment variables (RANK, LOCAL_RANK, WORLD_SIZE, ...) in every proc.

    Spawns an `SPMDActor` mesh named `_SPMDActor` on `proc_mesh`. With neither `master_addr` nor
    `master_port`, the first proc (all coordinates 0) is the master: its host and a port free
    there, its address resolved in the `use_ipaddr` family when one is given.

    Raises:
        AssertionError: only one of `master_addr` and `master_port` is given.
        TypeError: `proc_mesh` is not a ProcMesh.
    """
    actors, first = _spawn(proc_mesh, master_addr, master_port)
    if master_addr is None:
        master_addr, master_port = first.get_host_port.call_one(use_ipaddr).get()
    assert master_port is not None
    actors.setup_env.call(master_addr, master_port).get()


async def setup_torch_elastic_env_async(proc_mesh: ProcMesh, master_addr: str | None = None,
                                        master_port: int | None = None,
                                        use_ipaddr: AddrType | None = None) -> None:
    """`setup_torch_elastic_env`, awaitable."""
    actors, first = _spawn(proc_mesh, master_addr, master_port)
    if master_addr is None:
        master_addr, master_port = await first.get_host_port.call_one(use_ipaddr)
    assert master_port is not None
    await actors.setup_env.call(master_addr, master_port)


def _spawn(proc_mesh: ProcMesh, master_addr: str | None,
           master_port: int | None) -> tuple[ActorMesh[SPMDActor], Any]:
    if (master_addr is None) != (master_port is None):
        raise AssertionError(_BOTH_OR_NEITHER)
    if not isinstance(proc_mesh, ProcMesh):
        raise TypeError(f"setup_torch_elastic_env expects a ProcMesh, got "
                        f"{type(proc_mesh).__name__}")
    actors = proc_mesh.spawn("_SPMDActor", SPMDActor)
    return actors, actors.slice(**dict.fromkeys(proc_mesh.extent.labels, 0))
