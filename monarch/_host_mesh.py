"""HostMesh: hosts arranged as a mesh; spawns proc meshes on them."""

from __future__ import annotations

from typing import Any

from . import _context, _process, _services
from ._future import Future, resolved
from ._geometry import OnView
from ._proc_mesh import ProcMesh
from ._shape import View


class HostMesh(OnView):
    """Hosts (one per point of its extent), each with a host agent that spawns procs.

    `this_host()` is the local host (no dimensions); a cluster allocation gives a mesh with a
    `hosts` dimension. `spawn_procs(per_host={"gpus": 8})` adds one dimension per key.
    """

    def __init__(self, *, hosts: tuple[str, ...], full: View, view: View) -> None:
        self._hosts = hosts
        self._full = full
        self._view = view

    def spawn_procs(self, per_host: dict[str, int] | None = None, bootstrap: Any = None,
                    *, name: str | None = None) -> ProcMesh:
        """Starts `prod(per_host.values())` procs on every host of this mesh; returns at once.

        The proc mesh's extent is this mesh's extent followed by `per_host`'s dimensions.
        `bootstrap`, if given, is called with no arguments in each new proc before any actor.
        """
        per_host = dict(per_host or {})
        for label, size in per_host.items():
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"per_host[{label!r}] must be a positive int, got {size!r}")
            if label in self._view.extent.labels:
                raise ValueError(f"dimension {label!r} is already a dimension of the host mesh")
        hosts = [self._hosts[r] for r in self._view.ranks()]
        extent = self._view.extent
        labels, sizes = [*extent.labels, *per_host], [*extent.sizes, *per_host.values()]
        owner = _context.context().actor_instance  # its __supervise__ hears of dead procs
        runtime = _process.current()
        procs, table = _services.call("spawn_procs", hosts, labels, sizes, name, bootstrap,
                                      owner.actor_id, runtime.address if runtime else ""
                                      ).get(timeout=120)
        full = View.dense(labels, sizes)
        return ProcMesh(procs=procs, table=tuple(table), full=full, view=full, host_mesh=self)

    @property
    def initialized(self) -> Future[bool]:
        """A future of True once the hosts are usable; a HostMesh is made from hosts that
        answered already (this host, attached workers), so it is settled."""
        return resolved(True)

    def _with(self, view: View) -> "HostMesh":
        return HostMesh(hosts=self._hosts, full=self._full, view=view)

    def shutdown(self) -> Any:
        """Stops every proc this job started on these hosts."""
        return _services.call("shutdown_hosts", list(self._hosts))

    stop = shutdown

    def __reduce__(self) -> Any:
        return _rebuild, (self._hosts, self._full.to_wire(), self._view.to_wire())

    def __repr__(self) -> str:
        return f"HostMesh({self.extent})"


def _rebuild(hosts: tuple, full: tuple, view: tuple) -> HostMesh:
    return HostMesh(hosts=tuple(hosts), full=View.from_wire(full), view=View.from_wire(view))


def local_host_mesh(host_id: str) -> HostMesh:
    """The mesh of one host with no dimensions."""
    view = View.dense([], [])
    return HostMesh(hosts=(host_id,), full=view, view=view)
