"""`HostMesh.sync_workspace`, the controller's side.

A sync spawns one proc per host running a `WorkspaceReceiver`, asks each for the hashes of what
it holds, and sends every host only the files whose content differs: this process registers
those files' bytes as data-plane buffers (`monarch._rdma`: cross-memory copy on one machine, a
flow-controlled TCP stream across hosts) and each receiver reads them — the control messages
carry only names, hashes and buffer handles. Files are sent in batches of at most
`BATCH_BYTES`. Then every live proc of the job on those hosts puts the trees on `sys.path`
(and, with `auto_reload`, reloads the modules whose files changed).
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import threading
from pathlib import Path
from typing import Any, Callable

from .._runtime import _context, _controller_calls as _services
from .. import _rdma
from .._runtime._future import Future
from .._runtime._agent_calls import system_call
from .._runtime._recipients import procs_of
from .._geometry._view import View
from ._receiver import WorkspaceReceiver, check_name
from ._tree import FileEntry, scan

BATCH_BYTES = 256 << 20
"""The most file bytes held registered at once during a sync."""
SYNC_MESH = "workspace_sync"
"""The name of the receivers' proc and actor meshes (their transfers carry it)."""


@dataclasses.dataclass(frozen=True)
class HostSync:
    """What one sync did to one tree on one host."""

    host: str
    """The host's id in the job (a worker's address, or "local")."""
    name: str
    """The tree's name."""
    directory: str
    """Where the tree is on that host."""
    files: int
    """Files sent (new or changed content)."""
    bytes: int
    """Bytes sent."""
    deleted: int
    """Files deleted (gone locally)."""


@dataclasses.dataclass(frozen=True)
class WorkspaceSyncStats:
    """The result of `HostMesh.sync_workspace`."""

    hosts: tuple[HostSync, ...]
    reloaded: tuple[str, ...]
    """Modules reloaded in some proc (with `auto_reload`)."""

    @property
    def files_sent(self) -> int:
        """Files sent, summed over hosts."""
        return sum(h.files for h in self.hosts)

    @property
    def bytes_sent(self) -> int:
        """Bytes sent, summed over hosts."""
        return sum(h.bytes for h in self.hosts)


def resolve_dirs(workspace: Any) -> dict[Path, str]:
    """Local directory -> tree name, from a path or a `Workspace`-like object (`dirs`)."""
    if workspace is None:
        raise ValueError("sync_workspace needs a directory (path=...) or a Workspace")
    dirs = getattr(workspace, "dirs", workspace)
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    if isinstance(dirs, dict):
        pairs = [(Path(src), str(dst) or Path(src).name) for src, dst in dirs.items()]
    else:
        pairs = [(Path(src), Path(src).name) for src in dirs]
    out: dict[Path, str] = {}
    for src, name in pairs:
        if not src.is_dir():
            raise NotADirectoryError(f"not a directory: {src}")
        out[src.resolve()] = check_name(name)
    if len(set(out.values())) != len(out):
        raise ValueError(f"two directories would land in the same place: {sorted(out.values())}")
    return out


def sync_workspace(host_mesh: Any, workspace: Any, conda: bool, auto_reload: bool,
                   both: bool = False) -> Future[WorkspaceSyncStats]:
    """See `HostMesh.sync_workspace`."""
    if both:
        raise ValueError("pass the directory as workspace or as path=, not both")
    if conda:
        raise ValueError("conda=True is not supported: an environment is not synced, only "
                         "directories (install packages on the hosts, or sync their sources)")
    dirs = resolve_dirs(workspace)
    return _in_thread(lambda: _sync(host_mesh, dirs, auto_reload))


def _in_thread(fn: Callable[[], Any]) -> Future[Any]:
    done: Future[Any] = Future._pending()
    ctx = contextvars.copy_context()

    def main() -> None:
        try:
            done.set_result(ctx.run(fn))
        except BaseException as exc:  # noqa: BLE001 - delivered through the future
            done.set_exception(exc)

    threading.Thread(target=main, name="monarch-sync-workspace", daemon=True).start()
    return done


def _sync(host_mesh: Any, dirs: dict[Path, str], auto_reload: bool) -> WorkspaceSyncStats:
    local = {name: (path, scan(path)) for path, name in dirs.items()}
    host_ids = [host_mesh._hosts[r] for r in host_mesh._view.ranks()]
    procs = host_mesh.spawn_procs(name=SYNC_MESH)
    try:
        receivers = procs.spawn(SYNC_MESH, WorkspaceReceiver)
        held = receivers.manifest.call(list(local)).get(timeout=300)
        points = [dict(point) for point, _ in held.items()]
        plans = [_plan(local, info["trees"]) for _, info in held.items()]
        done = _send(receivers, points, local, plans)
    finally:
        procs.stop().get(timeout=60)
    results = [HostSync(host_ids[i], name, r["dir"], r["files"], r["bytes"], r["deleted"])
               for i, by_name in enumerate(done) for name, r in by_name.items()]
    changed = {host_ids[i]: [p for r in by_name.values() for p in r["changed"]]
               for i, by_name in enumerate(done)}
    trees = {host_ids[i]: [r["dir"] for r in by_name.values()] for i, by_name in enumerate(done)}
    reloaded = _update_procs(trees, changed, auto_reload)
    return WorkspaceSyncStats(tuple(results), tuple(sorted(reloaded)))


def _plan(local: dict[str, tuple[Path, dict[str, FileEntry]]],
          held: dict[str, dict[str, str]]) -> dict[str, tuple[list[str], list[str]]]:
    """For one host: tree name -> (relpaths to send, relpaths to delete)."""
    plan = {}
    for name, (_, files) in local.items():
        there = held.get(name, {})
        send = sorted(rel for rel, entry in files.items() if there.get(rel) != entry.digest)
        plan[name] = (send, sorted(set(there) - set(files)))
    return plan


def _send(receivers: Any, points: list[dict[str, int]],
          local: dict[str, tuple[Path, dict[str, FileEntry]]],
          plans: list[dict[str, tuple[list[str], list[str]]]]) -> list[dict[str, dict[str, Any]]]:
    """Sends every host its files, batch by batch; each host's result per tree."""
    needed = sorted({(name, rel) for plan in plans for name, (send, _) in plan.items()
                     for rel in send})
    batches = _batches(needed, local)
    done: list[dict[str, dict[str, Any]]] = [{} for _ in points]
    for number, batch in enumerate(batches):
        last = number == len(batches) - 1
        handles = _register(batch, local)
        try:
            calls = []
            for i, point in enumerate(points):
                for name, (send, deletes) in plans[i].items():
                    files = [(rel, *_meta(local[name][1][rel]), handles.get((name, rel)))
                             for rel in send if (name, rel) in handles]
                    if files or last:
                        target = receivers.slice(**point) if point else receivers
                        calls.append((i, name, target.apply.call_one(
                            name, files, deletes if last else [])))
            for i, name, call in calls:
                _merge(done[i], name, call.get(timeout=900))
        finally:
            for handle in handles.values():
                if handle is not None:
                    _rdma.drop(handle)
    return done


def _meta(entry: FileEntry) -> tuple[str, int, int, int]:
    return entry.digest, entry.size, entry.mode, entry.mtime_ns


def _batches(needed: list[tuple[str, str]],
             local: dict[str, tuple[Path, dict[str, FileEntry]]]) -> list[list[tuple[str, str]]]:
    batches: list[list[tuple[str, str]]] = [[]]
    size = 0
    for key in needed:
        entry = local[key[0]][1][key[1]]
        if batches[-1] and size + entry.size > BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(key)
        size += entry.size
    return batches


def _register(batch: list[tuple[str, str]],
              local: dict[str, tuple[Path, dict[str, FileEntry]]]) -> dict[tuple[str, str], Any]:
    """Reads a batch of files and registers each as a data-plane buffer (None when empty)."""
    name = _context.context().actor_instance.name
    handles: dict[tuple[str, str], Any] = {}
    for tree, rel in batch:
        data = (local[tree][0] / rel).read_bytes()
        handles[(tree, rel)] = _rdma.register(memoryview(data), name) if data else None
    return handles


def _merge(into: dict[str, dict[str, Any]], name: str, result: dict[str, Any]) -> None:
    had = into.get(name)
    if had is None:
        into[name] = dict(result)
        return
    for key in ("files", "bytes", "deleted"):
        had[key] += result[key]
    had["changed"] = had["changed"] + result["changed"]


def _update_procs(trees: dict[str, list[str]], changed: dict[str, list[str]],
                  auto_reload: bool) -> set[str]:
    """Tells every live proc of the job on these hosts about the trees; modules reloaded."""
    live = _services.call("live_procs", list(trees)).get(timeout=60)
    futures = [_tell(procs, rank, address, labels, sizes,
                     {"dirs": trees[host], "changed": changed[host], "reload": auto_reload})
               for host, procs, rank, address, labels, sizes in live]
    reloaded: set[str] = set()
    for future in futures:
        reloaded.update(future.get(timeout=120) or ())
    return reloaded


def _tell(procs: str, rank: int, address: str, labels: list[str], sizes: list[int],
          body: dict[str, Any]) -> Future[Any]:
    """Calls the system method `workspace` of one proc."""
    full = View.dense(labels, sizes)
    view = full.slice(**dict(full.point(rank)))
    table = [""] * len(full.ranks())
    table[rank] = address
    return system_call(procs_of(procs, tuple(table), view, [rank]), "workspace", body,
                       combine=lambda values: values[0])
