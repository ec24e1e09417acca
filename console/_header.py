"""The header: job, controller, uptime, health, counts, paused actors, refresh; then the
selection's breadcrumb or the newest error."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from ._format import fmt_duration
from ._styles import state_style


class JobHeader(Static):
    """Two lines of job status."""

    def show(self, job: dict[str, Any] | None, *, paused: int, refresh_s: float, fps: float,
             crumb: str, error: str | None) -> None:
        """Replaces both lines."""
        job = job or {}
        health = str(job.get("health", "unknown"))
        counts = job.get("counts") or {}
        line = Text.assemble(
            ("monarch top", "bold"), " • ", (f"job {job.get('job_id', '?')}", "cyan"), " • ",
            f"{job.get('hostname', '?')}:{job.get('pid', '?')}", " • ",
            f"up {fmt_duration(job.get('uptime_s'))}", " • ",
            ("health ", ""), (health, state_style(health) or "bold red"), " • ",
            f"{counts.get('procs_live', counts.get('procs', 0))} procs "
            f"{counts.get('meshes', 0)} meshes {counts.get('actors', 0)} actors")
        failures = counts.get("failures")
        if failures:
            line.append(f" {failures} failure{'s' if failures > 1 else ''}", style="bold red")
        if paused:
            line.append(f" • ⏸ {paused} paused in pdb", style="bold magenta")
        line.append(f" • ⟳ {refresh_s:g}s {fps:4.1f} fps", style="dim")
        second = (Text(f"ERROR: {error}", style="bold red") if error
                  else Text(crumb, style="dim"))
        self.update(Text("\n").join([line, second]))
