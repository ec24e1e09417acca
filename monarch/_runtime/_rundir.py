"""The per-user run directory: where each running job keeps its private files.

`<root>/<job id>/` holds a job's sockets and its admin discovery file (`admin.json`); it goes
at the job's end. `<root>/history/` holds job histories, which stay (see `monarch._history._runs`).
The root is `$MONARCH_RUN_DIR` or `/tmp/monarch-<uid>`, mode 0700, owned by the user.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._pids import pid_alive, start_time

DISCOVERY = "admin.json"
"""The name of a job's admin discovery file inside its run directory."""


def run_root_path() -> Path:
    """The run root's path (read from the environment now); it may not exist."""
    base = os.environ.get("MONARCH_RUN_DIR") or f"/tmp/monarch-{os.getuid()}"
    return Path(base)


def run_root() -> Path:
    """The per-user directory (mode 0700) holding each running job's directory; created."""
    root = run_root_path()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if root.stat().st_uid != os.getuid():
        raise PermissionError(f"{root} belongs to another user")
    os.chmod(root, 0o700)
    return root


OWNER = "controller.pid"
"""Inside a job's run directory: `<pid> <process start time>` of its controller."""

HISTORY = "history"
"""The run root's folder of job histories (`monarch._history._runs`): not a job's run directory."""

KEPT = frozenset({"allocations", HISTORY})
"""Directories of the run root that are not a job's: allocation records (`monarch.job`) and
job histories outlive their creators."""

STALE_WITHOUT_OWNER_S = 600.0
"""A run directory without an owner file this old is debris of a job that never got going."""


def claim(run_dir: Path) -> None:
    """Records this process as the owner of `run_dir` (so later jobs can tell it is alive)."""
    # Atomically: a sweep of another process must never read a half-written owner file.
    tmp = run_dir / f".{OWNER}.{os.getpid()}"
    tmp.write_text(f"{os.getpid()} {start_time(os.getpid())}")
    os.replace(tmp, run_dir / OWNER)


def release(run_dir: Path) -> None:
    """Removes this process's run directory, its owner file last: cut short (SIGKILL), what
    is left still names a dead owner, and the next sweep removes it."""
    import shutil

    for _ in range(20):  # a thread of the process may still write a file there as it ends
        try:
            entries = [entry for entry in run_dir.iterdir() if entry.name != OWNER]
        except FileNotFoundError:
            return
        except OSError:
            entries = []
        for entry in entries:
            try:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
            except OSError:
                pass
        try:
            (run_dir / OWNER).unlink(missing_ok=True)
            run_dir.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            continue  # written to meanwhile: another pass


def sweep_dead(root: Path) -> list[Path]:
    """Removes the run directories of controllers that are gone (SIGKILLed, crashed)."""
    import shutil
    import time

    removed = []
    for run_dir in root.iterdir():
        if not run_dir.is_dir() or run_dir.is_symlink() or run_dir.name in KEPT:
            continue
        try:
            owner = (run_dir / OWNER).read_text().split()
            alive = len(owner) == 2 and pid_alive(int(owner[0]), owner[1])
        except FileNotFoundError:  # not claimed yet, or its owner is removing it (`release`)
            try:
                alive = time.time() - run_dir.stat().st_mtime < STALE_WITHOUT_OWNER_S
            except FileNotFoundError:
                continue  # removed meanwhile
        except (OSError, ValueError):
            continue
        if not alive:
            shutil.rmtree(run_dir, ignore_errors=True)
            removed.append(run_dir)
    return removed


IPC_PATH_MAX = 100
"""Unix socket paths longer than this do not fit (sun_path is 108 bytes with the NUL)."""


def ipc_endpoint(run_dir: Path, name: str) -> str:
    """The ipc endpoint of `name` in a job: a socket file in its run directory, or, when that
    path would be too long for a unix socket, an abstract socket named after the job (peers
    still prove the job secret)."""
    path = f"{run_dir}/{name}.sock"
    if len(path) <= IPC_PATH_MAX:
        return f"ipc://{path}"
    return f"ipc://@monarch-{run_dir.name}-{name}"
