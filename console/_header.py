"""The header: job, controller, uptime, health, counts, paused actors, refresh; then the
selection's breadcrumb or the newest error."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from ._format import fmt_duration
from ._styles import state_style


def top_line(top: dict[str, Any]) -> Text:
    """The headline figures: start to first proc ready, spawn p50, undelivered messages,
    failures by cause, stalled handlers (the ones that are not zero stand out)."""
    out = Text()
    if top.get("first_proc_ready_s") is not None:
        out.append(f" • ready {top['first_proc_ready_s']:.2f}s", style="dim")
    if top.get("actor_spawn_p50_ms") is not None:
        out.append(f" spawn p50 {top['actor_spawn_p50_ms']:.0f}ms", style="dim")
    if top.get("messages_undelivered"):
        out.append(f" • {top['messages_undelivered']} undelivered", style="yellow")
    user, infra = top.get("failures_user") or 0, top.get("failures_infrastructure") or 0
    if user or infra:
        out.append(f" • failures {user} user {infra} infra", style="bold red")
    if top.get("stalled_handlers"):
        out.append(f" • ◷ {top['stalled_handlers']} stalled", style="bold #ffaf00")
    return out


class JobHeader(Static):
    """Two lines of job status."""

    def show(self, job: dict[str, Any] | None, *, paused: int, refresh_s: float, fps: float,
             crumb: str, error: str | None, ended: dict[str, Any] | None = None) -> None:
        """Replaces both lines. A job that `ended` says so first, where a long line cannot
        push it off the screen."""
        job = job or {}
        if ended is not None:
            how = ended["state"] + (f", exit {ended['exit_code']}" if ended.get("exit_code")
                                    else "") + (f": {ended['reason']}" if ended.get("reason")
                                                else "")
            self.update(Text.assemble(
                (f" JOB {job.get('job_id', '?')} ENDED ({how}) ", "bold white on red"),
                "  press H for its history, q to quit\n",
                (f"last seen: up {fmt_duration(job.get('uptime_s'))}, health "
                 f"{job.get('health', '?')}; {crumb}", "dim")))
            return
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
        line.append_text(top_line(job.get("top") or {}))
        line.append(f" • ⟳ {refresh_s:g}s {fps:4.1f} fps", style="dim")
        state = job.get("state", "running")
        if state != "running":
            banner = Text(f" {state.upper()} — read-only: the history of an ended job ",
                          style="bold white on red" if state in ("crashed", "failed")
                          else "bold black on #ffaf00")
            second = banner + Text(" " + crumb, style="dim")
        else:
            second = (Text(f"ERROR: {error}", style="bold red") if error
                      else Text(crumb, style="dim"))
        self.update(Text("\n").join([line, second]))
