"""The admin API client: how `monarch status`, `monarch top` and scripts reach a running job.

    from monarch.admin import connect
    client = connect()                     # this user's newest running job on this host
    client.topology()["meshes"]
    client.kill("trainers", "gpus=0:2")     # SIGKILL those ranks' processes
    for line in client.follow_logs("trainers", rank=1): print(line["text"])

Every call returns plain JSON-able data (dicts, lists, str). Failures raise `AdminError` (its
`status` is the HTTP status, None when the job could not be reached). Jobs are found through
`<run root>/<job id>/admin.json` (mode 0600), which holds the address and the per-run token.
Ended jobs are read from their histories (`open_history`, `job_rows`).
"""

from __future__ import annotations

from ._client._admin import (AdminClient, AdminError, AuthError, NoJobError, Stream, connect,
                             discover, host_port, wait_for_job)
from ._geometry._selection import SelectionError, parse_selection, select_ranks
from ._history._runs import History, job_rows, open_history

__all__ = [
    "AdminClient",
    "AdminError",
    "AuthError",
    "History",
    "NoJobError",
    "SelectionError",
    "Stream",
    "connect",
    "discover",
    "host_port",
    "job_rows",
    "open_history",
    "parse_selection",
    "select_ranks",
    "wait_for_job",
]
