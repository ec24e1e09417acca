"""When the console's job ends: how it ended, and its history to open instead (I/O: the run
directory, the controller's pid; the pure model stays in `_model`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def job_ended(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """How a job whose admin API stopped answering ended: its history's state (finished,
    failed, crashed), exit code and reason; or, without a history, `ended` when its controller
    (on this host) is gone. None while the controller runs (or on another host)."""
    import os
    import socket

    from monarch.admin import open_history

    try:
        info = open_history(str(job.get("job_id"))).info
    except (FileNotFoundError, OSError):
        info = None
    if info is not None and info.get("state") != "running":
        return {"state": info["state"], "exit_code": info.get("exit_code"),
                "reason": info.get("reason") or ""}
    pid = job.get("pid")
    if job.get("hostname") not in (None, socket.gethostname()) or not isinstance(pid, int):
        return None
    try:
        os.kill(pid, 0)
        return None
    except ProcessLookupError:
        return {"state": "ended", "exit_code": None, "reason": ""}
    except PermissionError:
        return None


def history_client(job_id: str) -> Any:
    """A read-only client over the history of `job_id` (FileNotFoundError: none kept)."""
    from monarch._history._client import HistoryClient
    from monarch.admin import open_history

    return HistoryClient(open_history(job_id))
