"""A job's history: its telemetry as Parquet files that outlive it (post-mortem).

The controller writes `<run root>/history/<job id>/` as the job runs (see
`monarch._controller._history_writer`): ``job.json`` (who, when, how it ended) and one folder
per SQL table (`monarch.telemetry._tables`) of Parquet files, each a complete file written at
once (a SIGKILL loses at most the last second). The run directory of a job goes at its end;
this folder stays, bounded by age and size (`prune`): a clean history goes after
`MONARCH_HISTORY_KEEP_DAYS` (7), a failed or crashed one after twice that, and the oldest go
(clean ones first) while all of them pass `MONARCH_HISTORIES_MB` (2048). A pruned job's id
is remembered (`PRUNED_FILE`), so asking for it says when and why it went.
`MONARCH_HISTORY=0` turns writing it off.

Reading needs no running job: `history_dir`, `job_rows` (every job, live and finished, one
listing for `monarch jobs`), `open_history` → `History.query(sql)`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from .._runtime._pids import pid_alive, this_host
from .._runtime._rundir import HISTORY, run_root_path
from .._wire._switch import number, switch

JOB_FILE = "job.json"
PRUNED_FILE = ".pruned.jsonl"
"""One line per pruned history (job_id, when, why), the newest `PRUNED_KEPT`."""
PRUNED_KEPT = 1000
KEEP_DAYS = 7.0
"""A clean history older than this many days goes when a job starts
(`MONARCH_HISTORY_KEEP_DAYS`); a failed or crashed one after twice as long."""
HISTORIES_MB = 2048.0
"""All histories together, in MB (`MONARCH_HISTORIES_MB`): past it the oldest go, the clean
ones before the failed and crashed ones."""


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
    """Whether the controller of an unended history runs (another host's: we cannot tell, so
    it is not called crashed)."""
    hostname, start = info.get("hostname"), info.get("pid_start")
    try:
        pid = int(info["pid"])
    except (KeyError, TypeError, ValueError):
        return not this_host(hostname)
    return pid_alive(pid, None if start is None else str(start), hostname=hostname)


def job_rows() -> list[dict[str, Any]]:
    """Every job this user has on this host, newest first: the live ones (admin discovery)
    and those with a history, one row each: job_id, state, pid, hostname, started, ended,
    duration_s, admin (address or None), history (folder or None)."""
    from .._client._admin import discover

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


def prune(days: float | None = None, total_mb: float | None = None,
          spare: str | None = None) -> list[str]:
    """Removes ended histories past their age (`KEEP_DAYS`, twice for failed and crashed
    ones) and, oldest first, clean ones before the others, while all pass ``total_mb``; never
    a running one, nor ``spare``. Returns the job ids removed (each noted in `PRUNED_FILE`).

    Raises:
        ValueError: a setting (`MONARCH_HISTORY_KEEP_DAYS`, `MONARCH_HISTORIES_MB`) that
            does not read.
    """
    if days is None or total_mb is None:
        days, total_mb = prune_limits()
    root = history_root()
    if not root.is_dir():
        return []
    ended = []
    for path in root.iterdir():
        info = read_info(path) if path.is_dir() and path.name != spare else None
        if info is not None and info["state"] != "running":
            ended.append((path, info, _ended_size(path, info)))
    now, gone = time.time(), []
    for path, info, _ in ended:
        limit = days if info["state"] == "finished" else 2 * days
        if (info.get("started") or 0) < now - limit * 86400:
            gone.append((path, info, f"older than {limit:g} days"))
    kept = [e for e in ended if e[0] not in {g[0] for g in gone}]
    total = sum(size for _, _, size in kept) + _size_of_live(root, spare)
    # clean ones first, oldest first within each
    for path, info, size in sorted(kept, key=lambda e: (e[1]["state"] != "finished",
                                                        e[1].get("started") or 0)):
        if total <= total_mb * 1e6:
            break
        gone.append((path, info, f"all histories passed {total_mb:g} MB"))
        total -= size
    for path, info, why in gone:
        shutil.rmtree(path, ignore_errors=True)
    _note_pruned(root, [(info.get("job_id") or path.name, why) for path, info, why in gone])
    return [info.get("job_id") or path.name for path, info, _ in gone]


def prune_limits() -> tuple[float, float]:
    """(`MONARCH_HISTORY_KEEP_DAYS`, `MONARCH_HISTORIES_MB`), read now.

    Raises:
        ValueError: one that does not read as a positive number.
    """
    return (number("MONARCH_HISTORY_KEEP_DAYS", KEEP_DAYS, above=True),
            number("MONARCH_HISTORIES_MB", HISTORIES_MB, above=True))


def _ended_size(path: Path, info: dict[str, Any]) -> int:
    """An ended history's bytes: as its writer noted them when the job ended (each job start
    walked every file of every history kept: 0.1 s of it with 155 histories), else (a crashed
    job's) counted."""
    noted = info.get("bytes")
    return noted if type(noted) is int and info.get("ended") is not None else history_bytes(path)


def history_bytes(path: Path) -> int:
    """The bytes of a history's folder, as pruning counts them (its writer notes this in
    `job.json` when the job ends)."""
    total = 0
    for f in path.rglob("*"):
        try:
            total += f.stat().st_size
        except OSError:
            pass
    return total


def _size_of_live(root: Path, spare: str | None) -> int:
    """The bytes of running jobs' histories (they count, they are never removed)."""
    return sum(history_bytes(p) for p in root.iterdir() if p.is_dir() and (
        p.name == spare or (read_info(p) or {}).get("state") == "running"))


def _note_pruned(root: Path, pruned: list[tuple[str, str]]) -> None:
    if not pruned:
        return
    path = root / PRUNED_FILE
    try:
        lines = path.read_text().splitlines() if path.exists() else []
        lines += [json.dumps({"job_id": job, "pruned": time.time(), "why": why})
                  for job, why in pruned]
        tmp = root / f"{PRUNED_FILE}.tmp"
        tmp.write_text("\n".join(lines[-PRUNED_KEPT:]) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass


def pruned(job_id: str) -> dict[str, Any] | None:
    """When and why the history of ``job_id`` was pruned (None: it was not, as far as the
    note of pruned histories remembers)."""
    try:
        lines = (history_root() / PRUNED_FILE).read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("job_id") == job_id:
            return dict(entry)
    return None


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
        from ..telemetry._sql import query
        from ..telemetry._arrow import TABLES

        return query(sql, {name: (lambda n=name: self.table_dir(n)) for name in TABLES})


def open_history(job: str | None = None) -> History:
    """The history of job `job` (default: the newest with one).

    Raises:
        FileNotFoundError: there is none.
    """
    if job:
        gone = pruned(job) if not history_dir(job).is_dir() else None
        if gone is not None:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(gone["pruned"]))
            raise FileNotFoundError(f"the history of job {job} was pruned on {when} "
                                    f"({gone['why']}; see MONARCH_HISTORY_KEEP_DAYS and "
                                    "MONARCH_HISTORIES_MB)")
        return History(history_dir(job))
    root = history_root()
    infos = [i for i in (read_info(p) for p in root.iterdir()) if i] if root.is_dir() else []
    if not infos:
        raise FileNotFoundError(f"no job history in {root}")
    newest = max(infos, key=lambda i: i.get("started") or 0)
    return History(Path(newest["history"]))
