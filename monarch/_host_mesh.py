"""HostMesh: hosts arranged as a mesh; spawns proc meshes on them."""

from __future__ import annotations

from typing import Any

from . import _context, _process, _services
from ._future import Future, chained, resolved
from ._geometry import OnView
from ._proc_mesh import ProcMesh
from ._shape import View


class HostMesh(OnView):
    """Hosts (one per point of its extent), each with a host agent that spawns procs.

    `this_host()` is the local host (no dimensions); a cluster allocation gives a mesh with a
    `hosts` dimension. `spawn_procs(per_host={"gpus": 8})` adds one dimension per key.
    """

    def __init__(self, *, hosts: tuple[str, ...], full: View, view: View,
                 python: str | None = None, attached: Future[Any] | None = None) -> None:
        self._hosts = hosts
        self._full = full
        self._view = view
        self._python = python
        self._attached = attached
        """Settles once the hosts' workers took this job (None: they had already)."""

    def spawn_procs(self, per_host: dict[str, int] | None = None, bootstrap: Any = None,
                    *, name: str | None = None) -> ProcMesh:
        """Starts `prod(per_host.values())` procs on every host of this mesh; returns at once.

        The proc mesh's extent is this mesh's extent followed by `per_host`'s dimensions.
        `bootstrap`, if given, is called with no arguments in each new proc before any actor.
        """
        if self._attached is not None:
            self._attached.get()  # the workers took the job (or this raises why not)
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
                                      owner.actor_id, runtime.address if runtime else "",
                                      self._python).get()  # the job bounds it (config)
        full = View.dense(labels, sizes)
        mesh = ProcMesh(procs=procs, table=tuple(table), full=full, view=full, host_mesh=self)
        if owner._slot is not None:
            owner._slot.own(mesh)  # its descendants: stopped with it
        return mesh

    @property
    def initialized(self) -> Future[bool]:
        """A future of True once the hosts are usable (attached workers answered); it fails
        with the attach's RuntimeError if they did not."""
        if self._attached is None:
            return resolved(True)
        return chained(self._attached, lambda _: True)

    def _with(self, view: View) -> "HostMesh":
        return HostMesh(hosts=self._hosts, full=self._full, view=view, python=self._python,
                        attached=self._attached)

    def with_python_executable(self, python_executable: str) -> "HostMesh":
        """The same hosts, whose new procs run `python_executable` (a path on the hosts).

        Procs are forked from a zygote per interpreter on each host, started by the first
        spawn that asks for it. The interpreter must be able to import monarch.
        """
        if not isinstance(python_executable, str) or not python_executable:
            raise ValueError(f"python_executable must be a path, got {python_executable!r}")
        return HostMesh(hosts=self._hosts, full=self._full, view=self._view,
                        python=python_executable, attached=self._attached)

    def sync_workspace(self, workspace: Any = None, conda: bool = False,
                       auto_reload: bool = False, *, path: Any = None) -> Future[Any]:
        """Copies a local directory tree to every host of this mesh; importable in the procs.

        Only files whose content changed since the last sync reach a host (content hashes),
        and they travel on the data plane (`monarch.rdma`), not in control messages. A tree
        `proj/` lands in `$MONARCH_WORKSPACE_DIR/proj` on each host, which is put at the front
        of `sys.path` in every live proc of this job there, and of every proc started there
        later. Files deleted locally are deleted on the hosts.

        Args:
            workspace: a directory (str or Path), or a `Workspace`-like object whose `dirs`
                maps local directories to names on the hosts (or lists directories).
            conda: syncing the conda environment is not supported (ValueError if True).
            auto_reload: also `importlib.reload` the modules whose files changed, in every
                live proc on these hosts that had imported them.
            path: a directory, the same as `workspace`.

        Returns:
            A future (also awaitable) of a `WorkspaceSyncStats`: files and bytes sent to each
            host, files deleted, modules reloaded.
        """
        from ._workspace import _sync

        return _sync.sync_workspace(self, workspace if path is None else path, conda,
                                   auto_reload, both=workspace is not None and path is not None)

    def shutdown(self) -> Any:
        """Stops every proc this job started on these hosts."""
        return _services.call("shutdown_hosts", [self._hosts[r] for r in self._view.ranks()])

    stop = shutdown

    def __reduce__(self) -> Any:
        return _rebuild, (self._hosts, self._full.to_wire(), self._view.to_wire(), self._python)

    def __repr__(self) -> str:
        return f"HostMesh({self.extent})"


def _rebuild(hosts: tuple, full: tuple, view: tuple, python: str | None = None) -> HostMesh:
    return HostMesh(hosts=tuple(hosts), full=View.from_wire(full), view=View.from_wire(view),
                    python=python)


def local_host_mesh(host_id: str) -> HostMesh:
    """The mesh of one host with no dimensions."""
    view = View.dense([], [])
    return HostMesh(hosts=(host_id,), full=view, view=view)
