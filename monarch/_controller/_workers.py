"""Client lifetime and multi-host workers: shutdown_context, worker loops, attach."""

from __future__ import annotations

from typing import Any

from . import _start as _jobstart  # noqa: F401 - a controller starts on first use
from .._runtime._future import Future


def shutdown_context(host_timeout: float | None = None) -> Future[None]:
    """Shuts this controller's job down: stops its procs, its zygote and its sockets.

    Also runs at interpreter exit. The script itself keeps running; a later use of monarch
    starts a new job.
    """
    from ._job import current_job

    job = current_job()
    done: Future[None] = Future._pending()
    if job is not None:
        job.shutdown(timeout=host_timeout if host_timeout is not None else 5.0)
    done.set_result(None)
    return done


TRUST_ALL = "trust_all_connections"
"""`ca=` value (Monarch's) that turns authentication of workers and controllers off."""

_TRUST_ALL_SECRET = b"monarch: trust all connections"
"""The worker secret both sides use under `ca="trust_all_connections"`: public on purpose."""


def _worker_secret(ca: Any, private_key: Any) -> bytes | None:
    """The worker secret `ca`/`private_key` ask for: None (MONARCH_WORKER_SECRET[_FILE]), or
    the public one of `trust_all_connections`. This runtime authenticates with a shared
    secret (ZAP PLAIN on loopback, CURVE across hosts), not TLS certificates: any other `ca`,
    and any `private_key`, is refused rather than ignored."""
    if private_key is not None:
        raise ValueError("private_key is not supported: workers and controllers prove a shared "
                         "worker secret (MONARCH_WORKER_SECRET), not TLS keys")
    if ca is None:
        return None
    if ca == TRUST_ALL:
        return _TRUST_ALL_SECRET
    raise ValueError(f"ca={ca!r} is not supported: workers and controllers prove a shared "
                     "worker secret (MONARCH_WORKER_SECRET), not TLS certificates; pass "
                     f"ca={TRUST_ALL!r} (on both sides) to trust every connection")


def run_worker_loop_forever(*, address: str, ca: Any = None, private_key: Any = None) -> None:
    """Runs a worker (host agent) at `address` until the process is killed.

    `address`: `tcp://HOST:PORT` (port 0: any), `tcp://HOST:fdN` (serve on the listening
    socket inherited as file descriptor N) or `ipc:///path` (this host only). Controllers
    must prove the worker secret (MONARCH_WORKER_SECRET), or both sides pass
    `ca="trust_all_connections"`.
    """
    from .._host import worker

    worker.serve(address, forever=True, secret=_worker_secret(ca, private_key))


def run_worker_loop_until_shutdown(*, address: str, ca: Any = None,
                                   private_key: Any = None) -> None:
    """Runs a worker at `address` until the controller that attached to it shuts it down."""
    from .._host import worker

    worker.serve(address, forever=False, secret=_worker_secret(ca, private_key))


def start_worker_loop_forever(*, address: str, ca: Any = None,
                              private_key: Any = None) -> Future[None]:
    """Starts a worker at `address` on a background thread; the future settles if it ends."""
    from .._host import worker

    return worker.serve_in_background(address, secret=_worker_secret(ca, private_key))


def attach_to_workers(*, workers: Any, ca: Any = None, private_key: Any = None,
                      name: str | None = None) -> Any:
    """A HostMesh (`hosts` dimension) over running workers (addresses, or futures of
    addresses). Returns at once; `initialized` and `spawn_procs` wait for the workers to take
    this job (a RuntimeError naming the workers that did not, after the
    `mesh_attach_config_timeout` knob). `ca`: see `run_worker_loop_forever`."""
    from . import _remote

    return _remote.attach_to_workers(list(workers), name,
                                     secret=_worker_secret(ca, private_key), lazy=True)


def attach(addr: str) -> Any:
    """Attaches this client to a running worker at `addr`; returns its HostMesh."""
    return attach_to_workers(workers=[addr])
