"""HostMesh: hosts arranged as a mesh; spawns proc meshes on them."""

from __future__ import annotations

import math
import secrets
import threading
from typing import Any, Callable

from .._runtime import _context, _process_runtime as _process, _controller_calls as _services
from .._host._bootstrap_command import BootstrapCommand, check_proc_bind, python_command
from .._runtime._future import Future, chained, failed, resolved, when_all
from .._geometry._onview import OnView
from ._proc_mesh import ProcMesh
from .._geometry._view import View


LOCAL_HOST = "local"
"""The host id of the controller's own host (other hosts are named by their worker)."""


class _Lifecycle:
    """What an owned HostMesh (with the slices and copies made from it) spawned, and whether
    it was shut down."""

    def __init__(self) -> None:
        self.shut = False
        self.meshes: list[ProcMesh] = []
        self.lock = threading.Lock()


class HostMesh(OnView):
    """Hosts (one per point of its extent), each with a host agent that spawns procs.

    `this_host()` is the local host (no dimensions); a cluster allocation gives a mesh with a
    `hosts` dimension. `spawn_procs(per_host={"gpus": 8})` adds one dimension per key.

    The mesh a job or `attach_to_workers` gives (and the client's `this_host()`) owns its
    hosts: its `stop()` and `shutdown()` end the procs spawned through it (or through its
    slices). A slice, or a mesh received from another actor, is a reference: it spawns procs
    but cannot stop or shut down the hosts (RuntimeError, as in Monarch).
    """

    def __init__(self, *, hosts: tuple[str, ...], full: View, view: View,
                 launch: BootstrapCommand | None = None, attached: Future[Any] | None = None,
                 owned: bool = True, life: _Lifecycle | None = None, name: str = "hosts",
                 mesh_id: str | None = None) -> None:
        self._hosts = hosts
        self._mesh_name = name
        self._mesh_id = mesh_id or f"{name}-{secrets.token_hex(3)}"
        """Its identity in the telemetry (`meshes`): slices and copies keep it."""
        self._full = full
        self._view = view
        self._launch = launch
        """The command its procs start with (`with_python_executable`); None: the zygote."""
        self._attached = attached
        """Settles once the hosts' workers took this job (None: they had already)."""
        self._owned = owned
        self._life = life or _Lifecycle()

    def spawn_procs(self, per_host: dict[str, int] | None = None, bootstrap: Any = None,
                    name: str | None = None, proc_bind: list[dict[str, str]] | None = None,
                    bootstrap_command: Any = None) -> ProcMesh:
        """Starts `prod(per_host.values())` procs on every host of this mesh; returns at once.

        The proc mesh's extent is this mesh's extent followed by `per_host`'s dimensions.

        Args:
            per_host: the procs of each host, e.g. `{"gpus": 8}`.
            bootstrap: called with no arguments (sync or async) in each new proc before any
                actor is spawned there.
            name: the proc mesh's name (in its id, logs and the console).
            proc_bind: one dict per proc of a host pinning it: `cpus` / `physcpubind` (CPU
                list, e.g. "0-3,8"), `cpunodebind` (the CPUs of NUMA nodes), `membind`
                (memory of NUMA nodes; runs the proc under `numactl`).
            bootstrap_command: a `BootstrapCommand` the procs start with (environment
                variables set or removed, a wrapper, another interpreter), or a function of
                each proc's `Point` (all its coordinates) returning one.
        """
        if self._life.shut:
            raise RuntimeError("HostMesh has already been shut down")
        if self._attached is not None:
            self._attached.get()  # the workers took the job (or this raises why not)
        per_host = dict(per_host or {})
        for label, size in per_host.items():
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"per_host[{label!r}] must be a positive int, got {size!r}")
            if label in self._view.extent.labels:
                raise ValueError(f"dimension {label!r} is already a dimension of the host mesh")
        per_proc = math.prod(per_host.values())
        binds = check_proc_bind(proc_bind, per_proc)
        hosts = [self._hosts[r] for r in self._view.ranks()]
        extent = self._view.extent
        labels, sizes = [*extent.labels, *per_host], [*extent.sizes, *per_host.values()]
        full = View.dense(labels, sizes)
        launches = self._launches(bootstrap_command, full)
        owner = _context.context().actor_instance  # its __supervise__ hears of dead procs
        runtime = _process.current()
        procs, table = _services.call(
            "spawn_procs", hosts, labels, sizes, name, bootstrap, owner.actor_id,
            runtime.address if runtime else "", launches, binds,
            self._launch.to_wire() if self._launch else None,
            (self._mesh_id, self._mesh_name, list(self._full.labels), list(self._full.sizes),
             self._view.to_wire())).get()  # the job bounds it
        mesh = ProcMesh(procs=procs, table=tuple(table), full=full, view=full, host_mesh=self)
        if owner._slot is not None:
            owner._slot.own(mesh)  # its descendants: stopped with it
        owner._adopt(mesh)
        with self._life.lock:  # the stopped ones go: a job may spawn meshes for days
            self._life.meshes = [m for m in self._life.meshes if not m._stopped]
            self._life.meshes.append(mesh)
        return mesh

    def _launches(self, command: Any, full: View) -> list[dict[str, Any] | None] | None:
        """Each rank's launch (None: forked from the zygote as it is)."""
        if command is None:
            return None if self._launch is None else [self._launch.to_wire()] * len(full)
        if isinstance(command, BootstrapCommand):
            return [command.to_wire()] * len(full)
        if not callable(command):
            raise TypeError("bootstrap_command must be a BootstrapCommand or a function of a "
                            f"Point returning one, got {type(command).__name__}")
        out: list[dict[str, Any] | None] = []
        for rank in range(len(full)):
            made = command(full.point(rank))
            if not isinstance(made, BootstrapCommand):
                raise TypeError(f"bootstrap_command({full.point(rank)}) returned "
                                f"{type(made).__name__}, not a BootstrapCommand")
            out.append(made.to_wire())
        return out

    @property
    def initialized(self) -> Future[bool]:
        """A future of True once the hosts are usable (attached workers answered); it fails
        with the attach's RuntimeError if they did not."""
        if self._attached is None:
            return resolved(True)
        return chained(self._attached, lambda _: True)

    @property
    def is_fake_in_process(self) -> bool:
        """False: every host of a HostMesh runs its procs as real OS processes."""
        return False

    @property
    def stream_logs(self) -> bool:
        """Whether procs spawned here stream their output to the client from the start: they
        do once `ProcMesh.logging_option(stream_to_client=True)` asks (False, as Monarch's)."""
        return False

    def _with(self, view: View) -> "HostMesh":
        return HostMesh(hosts=self._hosts, full=self._full, view=view, launch=self._launch,
                        attached=self._attached, owned=False, life=self._life,
                        name=self._mesh_name, mesh_id=self._mesh_id)

    def with_python_executable(self, python_executable: str) -> "HostMesh":
        """The same hosts, whose new procs run `python_executable` (a path on the hosts, or a
        wrapper script that ends in `exec python "$@"`); procs spawned from those procs'
        `this_host()` run it too. The interpreter must be able to import monarch."""
        if not isinstance(python_executable, str) or not python_executable:
            raise ValueError(f"python_executable must be a path, got {python_executable!r}")
        return HostMesh(hosts=self._hosts, full=self._full, view=self._view,
                        launch=python_command(python_executable), attached=self._attached,
                        owned=self._owned, life=self._life, name=self._mesh_name,
                        mesh_id=self._mesh_id)

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
        from .._workspace import _sync

        return _sync.sync_workspace(self, workspace if path is None else path, conda,
                                   auto_reload, both=workspace is not None and path is not None)

    def stop(self) -> Future[None]:
        """Stops the procs spawned through this mesh (and its slices); the hosts stay usable
        (a new HostMesh over them, or this one, spawns again). Settles once they exited."""
        if not self._owned:
            return failed(RuntimeError(
                "cannot stop `HostMesh` that is a reference instead of owned"))
        return self._stop_spawned()

    def shutdown(self) -> Future[None]:
        """Stops the procs spawned through this mesh and ends the workers of its hosts (as in
        Monarch, the hosts are unusable afterwards; `stop()` keeps them). The mesh cannot spawn
        afterwards. Also what leaving `async with host_mesh:` (or `with`) does."""
        if not self._owned:
            return failed(RuntimeError(
                "cannot shut down `HostMesh` that is a reference instead of owned"))
        with self._life.lock:
            if self._life.shut:
                return failed(RuntimeError("HostMesh has already been shut down"))
            self._life.shut = True
        stopped = self._stop_spawned()
        workers = [h for h in self._hosts if h != LOCAL_HOST]
        if not workers:
            return stopped
        return _after(stopped, lambda: _services.call("end_workers", workers))

    def _stop_spawned(self) -> Future[None]:
        with self._life.lock:
            meshes, self._life.meshes = self._life.meshes, []
        return when_all([m.stop() for m in meshes])

    async def __aenter__(self) -> "HostMesh":
        if self._life.shut:
            raise RuntimeError("HostMesh has already been shut down")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if not self._life.shut:  # nested `async with`: shut down once
            await self.shutdown()

    def __enter__(self) -> "HostMesh":
        if self._life.shut:
            raise RuntimeError("HostMesh has already been shut down")
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._life.shut:
            self.shutdown().get()

    def __reduce__(self) -> Any:  # the receiver holds a reference, not the hosts
        return _rebuild, (self._hosts, self._full.to_wire(), self._view.to_wire(),
                          self._launch, self._mesh_name, self._mesh_id)

    def __repr__(self) -> str:
        return f"HostMesh({self.extent})"


def _after(first: Future[Any], then: Callable[[], Future[Any]]) -> Future[None]:
    """`then()`'s future, started once `first` settled (fails as either fails)."""
    out: Future[None] = Future._pending()

    def next_step() -> None:
        if first.failed():
            try:
                first._resolve()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                out.set_exception(exc)
            return
        second = then()
        second.add_done_callback(lambda: _settle(second, out))

    first.add_done_callback(next_step)
    return out


def _settle(source: Future[Any], out: Future[None]) -> None:
    try:
        source._resolve()
    except BaseException as exc:  # noqa: BLE001 - handed to the caller
        out.set_exception(exc)
    else:
        out.set_result(None)


def _rebuild(hosts: tuple, full: tuple, view: tuple, launch: Any = None, name: str = "hosts",
             mesh_id: str | None = None) -> HostMesh:
    return HostMesh(hosts=tuple(hosts), full=View.from_wire(full), view=View.from_wire(view),
                    launch=launch, owned=False, name=name, mesh_id=mesh_id)


def local_host_mesh(host_id: str, launch: dict[str, Any] | None = None,
                    owned: bool = True) -> HostMesh:
    """The mesh of one host with no dimensions (`launch`: the command its procs start with)."""
    view = View.dense([], [])
    command = None
    if launch is not None:
        command = BootstrapCommand(launch["program"], launch["argv"][0], launch["argv"][1:],
                                   launch["env"], launch["inherit_env"])
    return HostMesh(hosts=(host_id,), full=view, view=view, launch=command, owned=owned,
                    name="local")
