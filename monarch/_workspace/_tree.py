"""A directory tree as content hashes: what decides which files a sync sends."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".hg", ".mypy_cache", ".pytest_cache"})
"""Directories a workspace sync never copies (bytecode, version control, tool caches)."""


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """One regular file of a tree: its content hash, size, permission bits and mtime."""

    digest: str
    size: int
    mode: int
    mtime_ns: int


def digest_file(path: Path) -> str:
    """The file's content hash (BLAKE2b, hex)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "blake2b").hexdigest()


def scan(root: Path) -> dict[str, FileEntry]:
    """Every regular file under `root` (symlinks followed), by path relative to it."""
    if not root.is_dir():
        raise NotADirectoryError(f"not a directory: {root}")
    out = {}
    for folder, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in names:
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(folder) / name
            try:
                stat = path.stat()
            except OSError:
                continue
            if not path.is_file():
                continue
            out[path.relative_to(root).as_posix()] = FileEntry(
                digest_file(path), stat.st_size, stat.st_mode & 0o777, stat.st_mtime_ns)
    return out
