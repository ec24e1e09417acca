"""Who this process is inside a job: the seam between the runtime and the services beside it.

The runtime sets it once when the process joins a job (controller bootstrap or proc start);
the data plane and telemetry read it. It is the only process-wide value besides the context.
"""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path


@dataclasses.dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """This process's place in the job.

    Attributes:
        job_id: unique id of the job (the controller run).
        secret: per-job secret every peer proves; never logged.
        run_dir: per-job private directory (mode 0700) for ipc sockets and segments.
        name: this process's name in the job (`controller`, or the proc id).
        hostname: the host's name as shown to users.
        bind_host: the address tcp listeners bind to (loopback unless the job spans hosts).
    """

    job_id: str
    secret: bytes
    run_dir: Path
    name: str
    hostname: str = dataclasses.field(default_factory=socket.gethostname)
    bind_host: str = "127.0.0.1"


_current: ProcessIdentity | None = None


def current_process() -> ProcessIdentity:
    """Returns this process's identity; raises RuntimeError before it joined a job."""
    if _current is None:
        raise RuntimeError("this process has not joined a monarch job yet")
    return _current


def current_process_or_none() -> ProcessIdentity | None:
    """Returns this process's identity, or None before it joined a job."""
    return _current


def set_current_process(identity: ProcessIdentity | None) -> None:
    """Sets (or clears, with None) this process's identity. Called by the runtime and tests."""
    global _current
    _current = identity
