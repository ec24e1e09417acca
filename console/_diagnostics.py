"""The diagnostics overlay: every proc answers a ping, with its latency (pass / slow / fail)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ._format import fmt_ms
from ._overlay import Overlay
from ._styles import state_style


class DiagnosticsOverlay(Overlay):
    """`d`: the admin API's `diagnose()`."""

    def __init__(self, fetch: Callable[[], dict[str, Any]]) -> None:
        super().__init__("diagnostics", fetch, render_diagnostics)


def render_diagnostics(report: dict[str, Any]) -> Group:
    """A verdict line, then one row per check."""
    ok = bool(report.get("ok"))
    checks = report.get("checks", [])
    counts = {s: sum(c.get("status") == s for c in checks) for s in ("pass", "slow", "fail")}
    verdict = Text.assemble(("PASS" if ok else "FAIL", "bold green" if ok else "bold red"),
                            f"  {counts['pass']} pass, {counts['slow']} slow, "
                            f"{counts['fail']} fail")
    table = Table("status", "check", "proc", "pid", "latency", "error", box=None,
                  header_style="bold", pad_edge=False)
    for check in checks:
        status = str(check.get("status"))
        table.add_row(Text(status, style=state_style(status)), str(check.get("check", "")),
                      str(check.get("proc", "")), str(check.get("pid", "")),
                      fmt_ms(check.get("latency_ms")), Text(check.get("error") or "", "red"))
    dead = report.get("dead") or []
    parts: list[Any] = [verdict, table]
    if dead:
        parts.append(Text(f"\n{len(dead)} proc(s) not live: " + ", ".join(
            f"{d.get('proc')} ({d.get('state')})" for d in dead), style="dim"))
    return Group(*parts)
