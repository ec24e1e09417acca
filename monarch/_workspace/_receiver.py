"""The host side of a workspace sync: an actor, one per host, that writes the trees.

Trees live in `$MONARCH_WORKSPACE_DIR/<name>` (the host worker sets the variable for its
procs: a directory of its own). Each tree's manifest, `$MONARCH_WORKSPACE_DIR/.manifests/
<name>.json`, records the hash, size and mtime of every file the syncs wrote; a file whose size
or mtime changed since (edited on the host) is no longer trusted and is sent again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

from .. import _rdma
from .._actors._actor import Actor
from .._actors._endpoint import endpoint
from ._tree import digest_file

READ_TIMEOUT_S = 600.0
"""How long the reads of one batch of files may take."""


def workspace_root() -> Path:
    """This host's workspace directory (created)."""
    root = os.environ.get("MONARCH_WORKSPACE_DIR")
    if not root:
        raise RuntimeError("MONARCH_WORKSPACE_DIR is not set in this proc: it was not started "
                           "by a monarch host agent")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def check_name(name: str) -> str:
    """A tree name: one path component."""
    if not name or "/" in name or name in (".", "..") or name.startswith("."):
        raise ValueError(f"bad workspace name {name!r}")
    return name


def check_relpath(rel: str) -> str:
    """A file path inside a tree: relative, without `..`."""
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
        raise ValueError(f"bad workspace path {rel!r}")
    return rel


class WorkspaceReceiver(Actor):
    """Answers what a host has (`manifest`) and writes what it lacks (`apply`)."""

    @endpoint
    def manifest(self, names: list[str]) -> dict[str, Any]:
        """{"root": this host's workspace directory, "trees": {name: {relpath: digest}}} for
        the files that are still as the last sync wrote them."""
        root = workspace_root()
        return {"root": str(root),
                "trees": {name: {rel: entry[0] for rel, entry in _trusted(root, name).items()}
                          for name in map(check_name, names)}}

    @endpoint
    def apply(self, name: str, files: list[tuple[str, str, int, int, int, Any]],
              deletes: list[str]) -> dict[str, Any]:
        """Reads each `(relpath, digest, size, mode, mtime_ns, handle)` from the data plane
        into the tree `name` and deletes `deletes`; what it wrote."""
        root = workspace_root()
        tree = root / check_name(name)
        manifest = _trusted(root, name)
        data = {rel: bytearray(size) for rel, _, size, _, _, _ in files}
        reads = [_rdma.read_into(handle, memoryview(data[rel]), READ_TIMEOUT_S)
                 for rel, _, size, _, _, handle in files if size]
        for read in reads:
            read.get(timeout=READ_TIMEOUT_S + 10)
        changed = []
        for rel, digest, size, mode, mtime_ns, _ in files:
            path = tree / check_relpath(rel)
            _write(path, data.pop(rel), mode, mtime_ns)
            if digest_file(path) != digest:
                raise RuntimeError(f"{rel}: the bytes read do not match the hash sent")
            manifest[rel] = [digest, size, path.stat().st_mtime_ns]
            changed.append(str(path))
        for rel in deletes:
            path = tree / check_relpath(rel)
            path.unlink(missing_ok=True)
            _drop_bytecode(path)
            manifest.pop(rel, None)
            changed.append(str(path))
        _prune_empty(tree)
        _save(root, name, manifest)
        return {"dir": str(tree), "files": len(files), "bytes": sum(f[2] for f in files),
                "deleted": len(deletes), "changed": changed}


def _manifest_path(root: Path, name: str) -> Path:
    return root / ".manifests" / f"{name}.json"


def _trusted(root: Path, name: str) -> dict[str, list[Any]]:
    """The manifest's entries whose files are still there, with the size and mtime written."""
    try:
        entries = json.loads(_manifest_path(root, name).read_text())
    except (OSError, ValueError):
        return {}
    tree, out = root / name, {}
    for rel, (digest, size, mtime_ns) in entries.items():
        try:
            stat = (tree / rel).stat()
        except OSError:
            continue
        if stat.st_size == size and stat.st_mtime_ns == mtime_ns:
            out[rel] = [digest, size, mtime_ns]
    return out


def _save(root: Path, name: str, manifest: dict[str, list[Any]]) -> None:
    path = _manifest_path(root, name)
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(manifest))
    os.replace(tmp, path)


def _write(path: Path, data: bytearray, mode: int, mtime_ns: int) -> None:
    """Writes a file atomically, with its mode and mtime; stale bytecode of it goes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode or 0o644)
    os.utime(tmp, ns=(mtime_ns, mtime_ns))
    os.replace(tmp, path)
    _drop_bytecode(path)


def _drop_bytecode(path: Path) -> None:
    """Removes `__pycache__/<stem>.*.pyc` beside a source file: a rewrite with the same size
    and mtime second must not be served from old bytecode."""
    if path.suffix != ".py":
        return
    for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        pyc.unlink(missing_ok=True)


def _prune_empty(tree: Path) -> None:
    for folder, dirs, names in os.walk(tree, topdown=False):
        if folder != str(tree) and not os.listdir(folder):
            os.rmdir(folder)
