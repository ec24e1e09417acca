"""Monarch's telemetry API on a job: `enable_telemetry(TelemetryConfig(...))`, `enable_admin()`,
and what `state()` then gives (`query_engine_client`, `telemetry_url`, `admin_url`).

In torchmonarch these start a telemetry sidecar, a Rust mesh-admin agent and a dashboard. Here
the job's controller already keeps every span, log, metric and message in its store and serves
them on its admin API (docs/ADMIN.md); so `state()` hands out a `QueryEngineClient` that asks
that API for SQL over Monarch's tables (`telemetry._monarch`: `actors`, `meshes`,
`messages`, `sent_messages`, `metric_sums`, `spans`, `pyspy_*`, ...) made from our store, and
the admin API's URL. A Monarch script written against its telemetry docs runs unchanged.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

DASHBOARD_WARNING = ("TelemetryConfig(include_dashboard=True): pymonarch has no web dashboard; "
                     "`monarch top` is its console (state.dashboard_url stays None)")
SNAPSHOT_WARNING = ("TelemetryConfig(snapshot_interval_secs=...): pymonarch makes no periodic "
                    "snapshot tables; its topology tables (actors, meshes) are made at each query")


@dataclasses.dataclass
class TelemetryConfig:
    """What `JobTrait.enable_telemetry` asks for (torchmonarch's fields).

    Args:
        retention_secs: queries see the messages, sent messages and spans of the last that many
            seconds (0: all the store holds).
        include_dashboard: Monarch's web dashboard; pymonarch has none (`monarch top` is the
            console): True is accepted with a warning.
        dashboard_port: the dashboard's preferred port (checked; no dashboard runs).
        snapshot_interval_secs: Monarch's periodic topology snapshots; ours are made at each
            query, so another value than the default is accepted with a warning.
    """

    retention_secs: int = 3600
    include_dashboard: bool = False
    dashboard_port: int = 8265
    snapshot_interval_secs: float = 30.0

    def __post_init__(self) -> None:
        _number("retention_secs", self.retention_secs, integer=True)
        if not isinstance(self.include_dashboard, bool):
            raise TypeError(f"TelemetryConfig: include_dashboard must be a bool, got "
                            f"{self.include_dashboard!r}")
        _number("dashboard_port", self.dashboard_port, integer=True)
        if self.dashboard_port > 65535:
            raise ValueError(f"TelemetryConfig: dashboard_port must be 0-65535, got "
                             f"{self.dashboard_port}")
        _number("snapshot_interval_secs", self.snapshot_interval_secs)
        if self.include_dashboard:
            warnings.warn(DASHBOARD_WARNING, UserWarning, stacklevel=3)
        if self.snapshot_interval_secs != 30.0:
            warnings.warn(SNAPSHOT_WARNING, UserWarning, stacklevel=3)


@dataclasses.dataclass
class MeshAdminConfig:
    """What `JobTrait.enable_admin` asks for (torchmonarch's field).

    Args:
        admin_addr: where the admin API should listen (`host:port`; port 0 or a wildcard host
            matches any). The job's admin API starts with its controller
            (`MONARCH_ADMIN_ADDR` chooses where): `state()` refuses an address it does not
            listen on, rather than pretend. None: wherever it listens.
    """

    admin_addr: str | None = None

    def __post_init__(self) -> None:
        if self.admin_addr is not None and (not isinstance(self.admin_addr, str)
                                            or not self.admin_addr.strip()):
            raise ValueError(f"MeshAdminConfig: admin_addr must be 'host:port' or None, got "
                             f"{self.admin_addr!r}")


def _number(name: str, value: Any, integer: bool = False) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise TypeError(f"TelemetryConfig: {name} must be {'an int' if integer else 'a number'}"
                        f", got {value!r}")
    if value < 0:
        raise ValueError(f"TelemetryConfig: {name} must be >= 0, got {value!r}")


class QueryEngineClient:
    """SQL over a job's telemetry with Monarch's tables (torchmonarch's client), through the
    admin API of the controller that runs the job.

    Args:
        address: the admin API's `host:port`.
        token: its token (default: found in the run directory, as `monarch.admin.connect`).
        retention_secs: queries see the messages and spans of the last that many seconds
            (0: all).
        timeout: seconds a query may take (a `query` may give its own).
    """

    def __init__(self, address: str, token: str | None = None, retention_secs: float = 0,
                 timeout: float = 120.0) -> None:
        from .._client._admin import connect

        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"QueryEngineClient: timeout must be a number > 0, got {timeout!r}")
        self._admin = connect(address, token)
        self.retention_secs = retention_secs
        self.timeout = float(timeout)

    @property
    def url(self) -> str:
        """The admin API's base URL."""
        return f"http://{self._admin.address}"

    def query(self, sql: str, timeout: float | None = None) -> dict[str, Any]:
        """Runs one SQL statement (DataFusion) over Monarch's tables: ``{"rows": [dict]}``.

        Raises:
            monarch.admin.AdminError: the engine refused it (its message says why), or it took
                longer than ``timeout`` seconds (default: the client's).
        """
        table = self._admin.query(sql, schema="monarch", retention_s=self.retention_secs,
                                  timeout=self.timeout if timeout is None else timeout)
        return {"rows": table.to_pylist()}

    def store_pyspy_dump(self, dump_id: str, proc_ref: str,
                         pyspy_result_json: str) -> dict[str, Any]:
        """Keeps a py-spy dump (`{"Ok": {pid, stack_traces, ...}}` JSON) for the `pyspy_*`
        tables; ``{"status": "ok", ...}``. A dump that does not read is an AdminError."""
        return self._admin.store_pyspy_dump(dump_id, proc_ref, pyspy_result_json)

    def __repr__(self) -> str:
        return f"QueryEngineClient({self.url!r})"


def admin_address(config: MeshAdminConfig | None) -> str:
    """The `host:port` of this controller's admin API, checked against `config.admin_addr`.

    Raises:
        RuntimeError: the admin API is off (MONARCH_ADMIN=0) or could not start.
        ValueError: it listens elsewhere than `admin_addr`.
    """
    from .._controller._job import current_job

    job = current_job()
    if job is None:
        raise RuntimeError("no controller runs in this process: call job.state() in the script "
                           "that runs the job (its controller serves the telemetry)")
    server = getattr(job, "admin", None)
    if server is None:
        raise RuntimeError("this job's admin API is off (MONARCH_ADMIN=0) or could not start: "
                           "telemetry and the admin URL need it")
    address = server.address
    wanted = config.admin_addr if config is not None else None
    if wanted is not None and not _matches(wanted, address):
        raise ValueError(f"MeshAdminConfig(admin_addr={wanted!r}): this job's admin API "
                         f"listens on {address} (MONARCH_ADMIN_ADDR chooses where, before the "
                         "job starts)")
    return address


def _matches(wanted: str, address: str) -> bool:
    from .._controller._admin import parse_addr

    want_host, want_port = parse_addr(wanted)
    host, port = parse_addr(address)
    any_host = want_host in ("::", "0.0.0.0", "*", "")
    return (want_port in (0, port)) and (any_host or want_host == host)
