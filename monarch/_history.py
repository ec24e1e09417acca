"""A job's history: its telemetry as Parquet files that outlive it (post-mortem).

The controller writes `<run root>/history/<job id>/` as the job runs (see
`monarch._controller._history_writer`): ``job.json`` (who, when, how it ended) and one folder
per SQL table (`monarch.telemetry._tables`) of Parquet files, each a complete file written at
once (a SIGKILL loses at most the last second). The run directory of a job goes at its end;
this folder stays, bounded: at most `KEEP_JOBS` histories, none older than `KEEP_DAYS`.
`MONARCH_HISTORY=0` turns writing it off.

Reading needs no running job: `history_dir`, `job_rows` (every job, live and finished, one
listing for `monarch jobs`), `open_history` → `History.query(sql)`.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from ._rundir import HISTORY, run_root_path, start_time
from ._wire._switch import switch

JOB_FILE = "job.json"
KEEP_JOBS = 20
"""Histories kept (the newest); older ones are removed when a job starts."""
KEEP_DAYS = 7.0
"""Histories older than this are removed when a job starts."""


def history_root() -> Path:
    """`<run root>/history` (may not exist)."""
    return run_root_path() / HISTORY


def history_dir(job_id: str) -> Path:
    """Where the history of `job_id` is (or would be)."""
    return history_root() / job_id


def enabled() -> bool:
    """Whether jobs write their history (the switch MONARCH_HISTORY, default on); read when
    called."""
    return switch("MONARCH_HISTORY")


def read_info(path: Path) -> dict[str, Any] | None:
    """The `job.json` of a history folder, with ``state`` worked out: running (its controller
    is alive), finished (ended, status 0), failed (ended otherwise) or crashed (gone without
    ending: SIGKILL, power loss)."""
    try:
        info = json.loads((path / JOB_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    if info.get("ended") is not None:
        info["state"] = "finished" if not info.get("exit_code") else "failed"
    elif _alive(info):
        info["state"] = "running"
    else:
        info["state"] = "crashed"
    info["history"] = str(path)
    return info


def _alive(info: dict[str, Any]) -> bool:
    if info.get("hostname") not in (None, socket.gethostname()):
        return True  # another host's job: we cannot tell, so we do not call it crashed
    try:
        return start_time(int(info["pid"])) == str(info.get("pid_start"))
    except (KeyError, TypeError, ValueError):
        return False


def job_rows() -> list[dict[str, Any]]:
    """Every job this user has on this host, newest first: the live ones (admin discovery)
    and those with a history, one row each: job_id, state, pid, hostname, started, ended,
    duration_s, admin (address or None), history (folder or None)."""
    from .admin import discover

    rows: dict[str, dict[str, Any]] = {}
    root = history_root()
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        info = read_info(path)
        if info is not None and "job_id" in info:
            rows[info["job_id"]] = _row(info, None)
    for live in discover():
        row = rows.get(live.get("job_id", ""), {})
        rows[live["job_id"]] = dict(_row(live, live.get("address")), state="running",
                                    history=row.get("history"))
    return sorted(rows.values(), key=lambda r: r.get("started") or 0, reverse=True)


def _row(info: dict[str, Any], admin: str | None) -> dict[str, Any]:
    started, ended = info.get("started"), info.get("ended")
    end = ended if ended is not None else (info.get("last_write") or time.time())
    return {"job_id": info.get("job_id"), "state": info.get("state", "running"),
            "pid": info.get("pid"), "hostname": info.get("hostname"), "started": started,
            "ended": ended, "duration_s": round(end - started, 3) if started else None,
            "exit_code": info.get("exit_code"), "reason": info.get("reason") or "",
            "admin": admin,
            "history": info.get("history")}


def prune(keep: int = KEEP_JOBS, days: float = KEEP_DAYS, spare: str | None = None) -> None:
    """Removes the oldest histories beyond `keep`, and those older than `days` (not running
    ones, nor `spare`)."""
    root = history_root()
    if not root.is_dir():
        return
    infos = [(p, read_info(p)) for p in root.iterdir() if p.is_dir() and p.name != spare]
    ended = sorted(((p, i) for p, i in infos if i is None or i["state"] != "running"),
                   key=lambda pi: (pi[1] or {}).get("started") or 0, reverse=True)
    cutoff = time.time() - days * 86400
    for n, (path, info) in enumerate(ended):
        if n >= keep or info is None or (info.get("started") or 0) < cutoff:
            shutil.rmtree(path, ignore_errors=True)


class History:
    """The history of one job, read from its folder (the job may still run, or be gone)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        info = read_info(path)
        if info is None:
            raise FileNotFoundError(f"no job history in {path}")
        self.info = info

    @property
    def job_id(self) -> str:
        """The job's id."""
        return str(self.info.get("job_id"))

    def table_dir(self, table: str) -> str | None:
        """The folder of a table's Parquet files, or None when it has none."""
        folder = self.path / table
        return str(folder) + "/" if folder.is_dir() and any(folder.glob("*.parquet")) else None

    def query(self, sql: str) -> Any:
        """Runs SQL over the history (see `monarch.telemetry._sql.query`); a pyarrow Table."""
        from .telemetry._sql import query
        from .telemetry._tables import TABLES

        return query(sql, {name: (lambda n=name: self.table_dir(n)) for name in TABLES})


def open_history(job: str | None = None) -> History:
    """The history of job `job` (default: the newest with one).

    Raises:
        FileNotFoundError: there is none.
    """
    if job:
        return History(history_dir(job))
    root = history_root()
    infos = [i for i in (read_info(p) for p in root.iterdir()) if i] if root.is_dir() else []
    if not infos:
        raise FileNotFoundError(f"no job history in {root}")
    newest = max(infos, key=lambda i: i.get("started") or 0)
    return History(Path(newest["history"]))
