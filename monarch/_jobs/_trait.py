"""A job: a specification of host meshes, and the allocation that brings it to life.

`apply()` creates the allocation once; `state()` attaches this controller to it and returns its
HostMeshes by name. `state(cached_path)` first looks at the job saved there by an earlier run
(`.monarch/job_state.pkl`): when that allocation is alive and `can_run` this spec, the
controller attaches to its workers (one round trip per worker) instead of allocating; a dead
or different one is killed and replaced, and the new one is saved there.

Subclasses implement `_create`, `_state`, `can_run` and `_kill` (and never set `_status`:
`apply()` and `state()` manage it, and the pickled cache relies on that).
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import tempfile
import uuid
from abc import ABC, abstractmethod
from typing import Any, Literal, NamedTuple, Self, Sequence

from .._controller import _start as _jobstart  # noqa: F401 - its hosts start the controller
from ._telemetry import MeshAdminConfig, QueryEngineClient, TelemetryConfig, admin_address

logger = logging.getLogger("monarch.job")

DEFAULT_JOB_PATH: str = ".monarch/job_state.pkl"
"""Where `state()` caches the running job, relative to the working directory."""

MONARCH_BATCH_JOB_ENV = "MONARCH_BATCH_JOB"
"""Set (to "1") on a client started by `apply(client_script=...)` inside its allocation."""


def in_batch_job() -> bool:
    """True in a client that a job's batch mode started inside its own allocation."""
    return os.environ.get(MONARCH_BATCH_JOB_ENV) == "1"


class JobState:
    """The HostMesh of each mesh a job asked for, as attributes (`state.trainers`).

    With `enable_telemetry`/`enable_admin` on the job, also: `query_engine_client` (SQL over
    Monarch's telemetry tables), `telemetry_url` and `admin_url` (the job's admin API);
    `query_engine` is None (as in Monarch's sidecar mode) and `dashboard_url` None (there is no
    web dashboard: `monarch top` is the console).
    """

    def __init__(self, hosts: dict[str, Any], query_engine: Any = None,
                 query_engine_client: Any = None, telemetry_url: str | None = None,
                 dashboard_url: str | None = None, admin_url: str | None = None) -> None:
        self._hosts = hosts
        self.query_engine = query_engine
        self.query_engine_client = query_engine_client
        self.telemetry_url = telemetry_url
        self.dashboard_url = dashboard_url
        self.admin_url = admin_url

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._hosts[name]
        except KeyError:
            available = ", ".join(sorted(self._hosts))
            raise AttributeError(f"'{name}' is not a valid host mesh name. Available names: "
                                 f"{available}") from None

    def __repr__(self) -> str:
        return f"JobState(hosts={self._hosts})"


class CachedRunning(NamedTuple):
    """The status of a spec that runs on an allocation an earlier run saved."""

    job: "JobTrait"


class JobTrait(ABC):
    """A job specification and, once applied, its allocation.

    `apply()` brings the allocation into existence (a no-op when it already runs);
    `state()` returns the host meshes; `kill()` ends the allocation; `dump()`/`dumps()` save
    the job (with its allocation's identity) and `job_load()`/`job_loads()` read it back.
    """

    _cache_stale = False
    """Set by `_state()` when the allocation changed (a host replaced): `state()` saves it."""
    _telemetry: TelemetryConfig | None = None
    _mesh_admin: MeshAdminConfig | None = None
    _telemetry_address: str | None = None
    """The admin API that served this job's telemetry (`telemetry_query_client`)."""

    def __init__(self) -> None:
        self._status: Literal["running", "not_running"] | CachedRunning = "not_running"
        self._apply_id: str | None = None

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def _running(self) -> "JobTrait | None":
        status = self._status
        if status == "running":
            return self
        if isinstance(status, CachedRunning):
            return status.job
        return None

    @property
    def active(self) -> bool:
        """True once applied (or attached to a cached allocation), until `kill()`."""
        return self._running is not None

    @property
    def apply_id(self) -> str | None:
        """A UUID of the current allocation (kept by the cache), None before `apply()`."""
        running = self._running
        return running._apply_id if running is not None else None

    def apply(self, client_script: str | None = None) -> None:
        """Creates the allocation as specified; a no-op when it already runs.

        Args:
            client_script: run this script as the client inside the allocation (batch mode);
                it finds the allocation through `.monarch/job_state.pkl`.
        """
        if self._running is None:
            self._create(client_script)
            self._apply_id = str(uuid.uuid4())
            self._status = "running"

    def state(self, cached_path: str | None = DEFAULT_JOB_PATH) -> JobState:
        """Attaches to the allocation (applying or reusing one) and returns its host meshes.

        Args:
            cached_path: where an earlier run saved its job. If the job there is alive and
                `can_run` this spec, its allocation is reused; otherwise it is killed, this
                job is applied, and saved there. None: no cache.
        """
        running = self._running
        if running is not None:
            return self._connect(running, cached_path)
        cached = self._load_cached(cached_path)
        if cached is not None:
            self._status = CachedRunning(cached)
            try:
                return self._connect(cached, cached_path)
            except Exception as exc:  # noqa: BLE001 - an allocation that does not answer
                logger.warning("the cached job at %s does not answer (%s); replacing it",
                               cached_path, exc)
                self._status = "not_running"
                _kill_quietly(cached)
                _remove_cache(cached_path)
        self.apply()
        try:
            state = self._connect(self, None)
        except BaseException:
            _kill_quietly(self)  # an allocation nobody can reach or find again is not kept
            self._status = "not_running"
            raise
        if cached_path is not None:
            self.dump(cached_path)
        return state

    def _connect(self, running: "JobTrait", cached_path: str | None) -> JobState:
        state = running._state()
        if cached_path is not None and running._cache_stale:
            running._cache_stale = False  # e.g. a dead host was replaced: save the new one
            running.dump(cached_path)
        return JobState(dict(state._hosts), **self._observability())

    # -- telemetry (Monarch's API over this controller's store and admin API) ---------------
    def enable_telemetry(self, config: TelemetryConfig | None = None, *,
                         mesh_admin_config: MeshAdminConfig | None = None,
                         **kwargs: Any) -> Self:
        """From the next `state()` on, the state carries `query_engine_client` (SQL over
        Monarch's telemetry tables: `actors`, `meshes`, `messages`, `sent_messages`,
        `metric_sums`, `spans`, `pyspy_*`...), `telemetry_url` and `admin_url`.

        Args:
            config: a `TelemetryConfig`; or its fields as keyword arguments.
            mesh_admin_config: where the admin API is expected (`enable_admin`).

        Returns:
            ``self``, for chaining.
        """
        self._telemetry = _config("enable_telemetry", TelemetryConfig, config, kwargs)
        if mesh_admin_config is not None or self._mesh_admin is None:
            self.enable_admin(mesh_admin_config)
        return self

    def enable_admin(self, config: MeshAdminConfig | None = None, **kwargs: Any) -> Self:
        """From the next `state()` on, the state carries `admin_url`: the job's admin API
        (the one `monarch top` and the CLI use).

        Args:
            config: a `MeshAdminConfig`; or its fields as keyword arguments.
        """
        self._mesh_admin = _config("enable_admin", MeshAdminConfig, config, kwargs)
        return self

    def telemetry_query_client(self) -> QueryEngineClient:
        """A query client of the telemetry of this job, which must be applied, healthy and have
        telemetry enabled (checked without connecting its host meshes).

        Raises:
            RuntimeError: it is not active, not healthy, has no telemetry, or its telemetry
                cannot be reached.
        """
        running = self._running
        if running is None:
            raise RuntimeError("the saved job is not active")
        try:
            healthy = running._is_running()
        except Exception as exc:  # noqa: BLE001 - reported with what the check said
            raise RuntimeError(f"could not verify the active job's health: {exc}") from exc
        if not healthy:
            raise RuntimeError("the active job is no longer running or healthy")
        telemetry = self._telemetry or running._telemetry
        if telemetry is None:
            raise RuntimeError("the active job has no distributed telemetry configured; call "
                               "job.enable_telemetry() and apply it again")
        try:
            return self._query_client(running, telemetry)
        except Exception as exc:  # noqa: BLE001 - reported with why
            raise RuntimeError(f"could not connect to distributed telemetry: {exc}") from exc

    def _query_client(self, running: "JobTrait", telemetry: TelemetryConfig) -> QueryEngineClient:
        if running._apply_id is None:
            raise ValueError("the job has no apply id (apply() it again)")
        address = self._telemetry_address or running._telemetry_address
        if address is None:
            address = admin_address(self._mesh_admin)
        return QueryEngineClient(address, retention_secs=telemetry.retention_secs)

    def _observability(self) -> dict[str, Any]:
        """What `enable_telemetry`/`enable_admin` add to the state."""
        if self._telemetry is None and self._mesh_admin is None:
            return {}
        address = admin_address(self._mesh_admin)
        url = f"http://{address}"
        if self._telemetry is None:
            return {"admin_url": url}
        self._telemetry_address = address
        running = self._running
        if running is not None and running is not self:
            running._telemetry_address = address
        client = QueryEngineClient(address, retention_secs=self._telemetry.retention_secs)
        return {"admin_url": url, "telemetry_url": url, "query_engine_client": client}

    def _load_cached(self, cached_path: str | None) -> "JobTrait | None":
        if cached_path is None:
            return None
        try:
            job = job_load(cached_path)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - an unreadable cache is replaced
            logger.warning("could not read the cached job at %s: %s", cached_path, exc)
            _remove_cache(cached_path)
            return None
        running = job._running
        if running is None:
            return None
        try:
            usable = running.can_run(self)
        except Exception as exc:  # noqa: BLE001 - a cache we cannot check is replaced
            logger.warning("could not check the cached job at %s: %s", cached_path, exc)
            usable = False
        if not usable:
            logger.info("the cached job at %s cannot run this spec (or is gone): replacing it",
                        cached_path)
            _kill_quietly(running)
            _remove_cache(cached_path)
            return None
        return job

    def kill(self) -> None:
        """Ends the allocation (its workers and every proc on them). A controller attached
        to it stops its procs there first: the loss of those hosts is no failure."""
        running = self._running
        if running is not None:
            _detach(running.worker_addresses())
            running._kill()
        self._status = "not_running"

    def worker_addresses(self) -> list[str]:
        """The addresses of the allocation's host workers (empty when it has none)."""
        return []

    # -- saving ----------------------------------------------------------------------------
    def dump(self, filename: str) -> None:
        """Saves the job to `filename` (a symlink is followed; directories are created)."""
        path = os.path.realpath(filename) if os.path.islink(filename) else filename
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(self, f)
        os.replace(tmp, path)

    def dumps(self) -> bytes:
        """The job as bytes (`job_loads` reads them back)."""
        return pickle.dumps(self)

    # -- what a scheduler implements -------------------------------------------------------
    @abstractmethod
    def _create(self, client_script: str | None) -> None:
        """Creates the allocation (called by `apply()`; must not set `_status`)."""

    @abstractmethod
    def _state(self) -> JobState:
        """Attaches to the allocation's workers; their host meshes by name."""

    @abstractmethod
    def can_run(self, spec: "JobTrait") -> bool:
        """True if this (running) job's allocation can serve `spec` instead of a new one."""

    @abstractmethod
    def _kill(self) -> None:
        """Ends the allocation."""

    def _is_running(self) -> bool:
        """Whether the allocation is alive (without attaching to it)."""
        return self.can_run(self)


def _config(method: str, cls: type, config: Any, fields: dict[str, Any]) -> Any:
    """`config` (an instance of `cls`), or one made of `fields`: not both, nothing else."""
    if config is not None and fields:
        raise TypeError(f"{method}: give a {cls.__name__} or its fields, not both "
                        f"(got {sorted(fields)})")
    if config is None:
        return cls(**fields)
    if not isinstance(config, cls):
        raise TypeError(f"{method} expects a {cls.__name__}, got {config!r}")
    return config


def _detach(addresses: list[str]) -> None:
    """If this process is a controller attached to these workers, detaches from them."""
    from .._runtime import _controller_calls as _services

    detach = _services.local_service("detach_workers")
    if detach is None or not addresses:
        return
    try:
        detach(addresses).get(timeout=60)
    except Exception as exc:  # noqa: BLE001 - the kill goes on; its loss may be reported
        logger.warning("could not detach from the workers before the kill: %s", exc)


def _kill_quietly(job: JobTrait) -> None:
    try:
        job._kill()
    except Exception as exc:  # noqa: BLE001 - teardown of a stale allocation is best effort
        logger.warning("could not kill the allocation %r: %s", job, exc)


def _remove_cache(cached_path: str | None) -> None:
    if cached_path is None:
        return
    path = os.path.realpath(cached_path) if os.path.islink(cached_path) else cached_path
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def job_loads(data: bytes) -> JobTrait:
    """A job from `JobTrait.dumps()` bytes (pickle: load only what you trust)."""
    job = pickle.loads(data)
    if not isinstance(job, JobTrait):
        raise TypeError(f"not a job: {type(job).__name__}")
    return job


def job_load(filename: str = DEFAULT_JOB_PATH) -> JobTrait:
    """A job saved by `JobTrait.dump()` (pickle: load only what you trust)."""
    with open(filename, "rb") as f:
        return job_loads(f.read())


class LocalJob(JobTrait):
    """Every mesh is this host (`this_host()`): the stand-in that lets the same script run
    locally or on a cluster by changing only its job.

    `apply(client_script=...)` runs the script as a detached client (logs in
    `.monarch/logs/job_*/`), which finds its job through `.monarch/job_state.pkl`.
    """

    def __init__(self, hosts: Sequence[str] = ("hosts",)) -> None:
        """
        Args:
            hosts: the names of the host meshes (each one is this host).
        """
        super().__init__()
        self._host_names = tuple(hosts)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_dir: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _proc=None)

    def _is_running(self) -> bool:
        return True

    def _kill(self) -> None:
        pass

    def can_run(self, spec: JobTrait) -> bool:
        """Never: a local job costs nothing to make, so the spec itself is used."""
        return False

    def _state(self) -> JobState:
        from .._runtime._context import context

        here = context().actor_instance.proc.host_mesh  # this_host()
        return JobState({name: here for name in self._host_names})

    def _create(self, client_script: str | None) -> None:
        if client_script is None:
            return
        BatchJob(self).dump(DEFAULT_JOB_PATH)
        os.makedirs(".monarch/logs", exist_ok=True)
        self._log_dir = tempfile.mkdtemp(prefix="job_", dir=".monarch/logs")
        env = dict(os.environ, **{MONARCH_BATCH_JOB_ENV: "1"})
        with open(os.path.join(self._log_dir, "stdout.log"), "w") as out, \
                open(os.path.join(self._log_dir, "stderr.log"), "w") as err:
            self._proc = subprocess.Popen([sys.executable, client_script], env=env, stdout=out,
                                          stderr=err, start_new_session=True)
        logger.info("started client %s (pid %d), logs in %s", client_script, self._proc.pid,
                    self._log_dir)

    @property
    def process(self) -> "subprocess.Popen[bytes]":
        """The client started by `apply(client_script=...)`."""
        if self._proc is None:
            raise ValueError("no local batch job")
        return self._proc


class BatchJob(JobTrait):
    """The job a batch-mode client finds in its cache: inside the allocation
    (MONARCH_BATCH_JOB=1) it runs any spec, on the allocation it wraps."""

    def __init__(self, job: JobTrait) -> None:
        super().__init__()
        self._job = job
        self._apply_id = job.apply_id or str(uuid.uuid4())
        self._status = "running"

    def can_run(self, spec: JobTrait) -> bool:
        return in_batch_job()

    def _is_running(self) -> bool:
        return self._job._is_running()

    def _state(self) -> JobState:
        return self._job._state()

    def _create(self, client_script: str | None) -> None:
        self._job._create(client_script)

    def _kill(self) -> None:
        self._job._kill()
