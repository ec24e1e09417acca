"""The job's exports to existing dashboards, started with the job when configured.

OTLP/HTTP spans, logs and metrics when `OTEL_EXPORTER_OTLP_ENDPOINT` (or its
`_TRACES_`/`_LOGS_`/`_METRICS_` variants) is set; a Prometheus `/metrics` on
`127.0.0.1:$MONARCH_METRICS_PORT` when that is set (the admin API serves `/metrics` too, behind
its token). Both give the metric series the same names (`monarch_<name>`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

from .. import telemetry
from .._wire._switch import number

OTLP_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")


class Exporters:
    """The exporters running for one job; `close` stops them."""

    def __init__(self) -> None:
        self.otlp: telemetry.OtlpExporter | None = None
        self.metrics: telemetry.MetricsServer | None = None

    def close(self) -> None:
        """Sends what the OTLP exporter still holds, then stops everything."""
        if self.otlp is not None:
            self.otlp.stop()
            self.otlp = None
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None


def start_exporters(job: Any) -> Exporters:
    """Starts the exporters the environment asks for (read now, at job start)."""
    exporters = Exporters()
    if any(os.environ.get(name) for name in OTLP_VARIABLES):
        config = telemetry.OtlpConfig.from_env()
        config = dataclasses.replace(config, resource_attributes={
            **config.resource_attributes, "monarch.job.id": job.job_id})
        exporters.otlp = telemetry.OtlpExporter(job.store, config).start()
    port = metrics_port()
    if port is not None:
        try:
            exporters.metrics = telemetry.serve_metrics(job.store, "127.0.0.1", port)
        except OSError as exc:
            print(f"monarch: /metrics not served on port {port}: {exc}", file=sys.stderr)
    return exporters


def metrics_port() -> int | None:
    """MONARCH_METRICS_PORT (None: unset); read at job start.

    Raises:
        ValueError: not a port number (0 asks for a free one).
    """
    if not os.environ.get("MONARCH_METRICS_PORT", "").strip():
        return None
    port = int(number("MONARCH_METRICS_PORT", 0, integer=True))
    if port > 65535:
        raise ValueError(f"MONARCH_METRICS_PORT={port}: expected a port number (0-65535)")
    return port
