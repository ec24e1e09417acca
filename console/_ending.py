"""When the console's job ends: how it ended, and its history to open instead (I/O: the run
directory, the controller's pid; the pure model stays in `_model`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def job_ended(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """How a job whose admin API stopped answering ended: its history's state (finished,
    failed, crashed), exit code and reason; or, without a history, `ended` when its controller
    (on this host) is gone. None while the controller runs (or on another host)."""
    from monarch._runtime._pids import pid_alive
    from monarch.admin import open_history

    try:
        info = open_history(str(job.get("job_id"))).info
    except (FileNotFoundError, OSError):
        info = None
    if info is not None and info.get("state") != "running":
        return {"state": info["state"], "exit_code": info.get("exit_code"),
                "reason": info.get("reason") or ""}
    pid = job.get("pid")
    if not isinstance(pid, int) or pid_alive(pid, hostname=job.get("hostname")):
        return None
    return {"state": "ended", "exit_code": None, "reason": ""}


def history_client(job_id: str) -> Any:
    """A read-only client over the history of `job_id` (FileNotFoundError: none kept)."""
    from monarch._history._client import HistoryClient
    from monarch.admin import open_history

    return HistoryClient(open_history(job_id))
