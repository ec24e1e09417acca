"""Colours of states and log streams (Rich styles), shared by the widgets."""

from __future__ import annotations

STATE_STYLES = {
    "running": "green",
    "failed": "bold red",
    "paused": "bold magenta",
    "stalled": "bold #ffaf00",
    "starting": "yellow",
    "stopping": "yellow",
    "stopped": "dim",
    "ok": "green",
    "degraded": "bold yellow",
    "pass": "green",
    "slow": "yellow",
    "fail": "bold red",
}

STATE_GLYPHS = {
    "running": "●",
    "failed": "✖",
    "paused": "⏸",
    "stalled": "◷",
    "starting": "◌",
    "stopping": "◍",
    "stopped": "○",
    "degraded": "◐",
}


def state_style(state: str | None) -> str:
    """The style a state is drawn in."""
    return STATE_STYLES.get(state or "", "")
