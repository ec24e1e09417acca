"""Allocations on record: what `monarch jobs` lists and `monarch kill --allocation` ends.

Every allocation a job creates gets a directory `<run root>/allocations/<id>/` (mode 0700)
holding `allocation.json` (kind, meshes, worker addresses and pids, Slurm job id, where it was
created), `job.pkl` (the running job, so any process can attach to it or kill it) and, for
local workers, their secret and logs. `job.kill()` removes it. Workers write `worker.json` in
their own run directories; reading those tells which controllers are attached to an
allocation right now — or that none is.
"""

from __future__ import annotations

import json
import os
import pickle
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from .._runtime._pids import pid_alive
from .._runtime._rundir import run_root, run_root_path

ALLOCATIONS = "allocations"
"""The run root's directory of allocation records (never swept as a dead job's)."""


def new_allocation(kind: str) -> Path:
    """A fresh, private allocation directory."""
    parent = run_root() / ALLOCATIONS
    parent.mkdir(mode=0o700, exist_ok=True)
    path = parent / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    path.mkdir(mode=0o700)
    return path


def write_record(path: Path, record: dict[str, Any], job: Any) -> None:
    """Saves `allocation.json` and `job.pkl` in an allocation directory (atomically)."""
    if not path.is_dir():
        return
    record = dict(record, id=path.name)
    _replace(path / "allocation.json", json.dumps(record, indent=1).encode())
    _replace(path / "job.pkl", pickle.dumps(job))


def remove(path: Path | None) -> None:
    """Forgets an allocation (and the allocations directory once empty)."""
    if path is None:
        return
    shutil.rmtree(path, ignore_errors=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass


def write_secret(path: Path) -> Path:
    """A new worker secret in `path` (mode 0600); returns the path."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


SLURM_QUERY_S = 5.0
"""How long `monarch jobs` waits for Slurm (one query for every allocation on record): an
unreachable controller made it wait 18 s per record, twice."""
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def slurm_state(job_id: str) -> str | None:
    """The Slurm job's state (RUNNING, PENDING...), None once it left the queue (or when
    Slurm does not answer)."""
    states = slurm_states([job_id])
    return None if states is None else states.get(job_id)


def slurm_states(job_ids: list[str], timeout: float = SLURM_QUERY_S) -> dict[str, str] | None:
    """The states of these Slurm jobs in one `squeue`, bounded by ``timeout``: job id ->
    state for those still in the queue; None when Slurm did not answer (unknown)."""
    if not job_ids:
        return {}
    try:
        out = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i %T"],
                             capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        # squeue refuses a list whose every id left its memory ("Invalid job id"): all gone
        return {} if "Invalid job id" in out.stderr else None
    states = {}
    for line in out.stdout.splitlines():
        job, _, state = line.strip().partition(" ")
        if job and state:
            states[job] = state
    return states


def read_records() -> list[dict[str, Any]]:
    """Every allocation on record, oldest first (`path` added)."""
    parent = run_root_path() / ALLOCATIONS
    records = []
    for path in sorted(parent.glob("*/allocation.json")) if parent.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        records.append(dict(record, path=str(path.parent)))
    return sorted(records, key=lambda r: r.get("created", 0))


def record_alive(record: dict[str, Any], states: dict[str, str] | None = None) -> bool:
    """Whether the allocation still has workers (local pids, or a queued Slurm job; its
    state from ``states`` when given)."""
    if record.get("slurm_job_id"):
        job = record["slurm_job_id"]
        state = states.get(job) if states is not None else slurm_state(job)
        return state not in (None, *ENDED)
    workers = record.get("workers", [])
    return any(pid_alive(w["pid"], w.get("start_time") or None) for w in workers if w.get("pid"))


def attached_controllers() -> dict[str, list[dict[str, Any]]]:
    """Worker address -> the controllers attached to it, from live workers' `worker.json`."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in run_root_path().glob("worker-*/worker.json"):
        try:
            status = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if pid_alive(int(status.get("pid", 0))):
            out[status["address"]] = status.get("controllers", [])
    return out


def allocation_rows() -> list[dict[str, Any]]:
    """One row per allocation on record: what `monarch jobs` shows.

    Keys: kind ("allocation"), id, type (ProcessJob, SlurmJob...), state (running / pending /
    dead), pid (None), client (job ids of the attached controllers, "" when none), hosts
    ("trainers=2 gen=1"), started (epoch seconds), detail (Slurm job id or worker addresses).
    """
    attached = attached_controllers()
    records = read_records()
    states = slurm_states([r["slurm_job_id"] for r in records if r.get("slurm_job_id")])
    rows = []
    for record in records:
        addresses = [a for mesh in record.get("addresses", {}).values() for a in mesh]
        clients = sorted({c["job"] for a in addresses for c in attached.get(a, [])})
        if record.get("slurm_job_id"):
            job = record["slurm_job_id"]
            slurm = None if states is None else states.get(job)
            # a job that left the queue: its record is stale (`monarch kill --allocation`)
            state = ("unknown" if states is None else "running" if slurm == "RUNNING"
                     else (slurm or "stale").lower())
            detail = f"slurm {job}" + (" (Slurm did not answer)" if states is None else "")
        else:
            state = "running" if record_alive(record) else "dead"
            detail = " ".join(addresses)
        rows.append({"kind": "allocation", "id": record["id"], "type": record.get("type", ""),
                     "state": state, "pid": None, "client": ",".join(clients),
                     "hosts": " ".join(f"{m}={n}" for m, n in record.get("meshes", {}).items()),
                     "started": record.get("created"), "detail": detail,
                     "cwd": record.get("cwd", ""), "path": record["path"]})
    return rows


def load_job(allocation: str) -> Any:
    """The running job of the allocation with this id (or a unique prefix of it)."""
    from ._trait import job_load

    parent = run_root_path() / ALLOCATIONS
    matches = [p for p in parent.glob(f"{allocation}*") if (p / "job.pkl").is_file()] \
        if parent.is_dir() else []
    exact = [p for p in matches if p.name == allocation]
    if len(exact or matches) != 1:
        found = "several allocations match" if matches else "no allocation"
        raise LookupError(f"{found} {allocation!r} in {parent} (`monarch jobs` lists them)")
    job = job_load(str((exact or matches)[0] / "job.pkl"))
    if job._running is None:  # saved while it was being applied: its allocation runs
        job._status = "running"
    return job
