"""Driving the console in Pilot tests: waiting on conditions, moving the cursor with keys."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from waiting import wait_until_async


async def wait_for(pilot: Pilot[Any], predicate: Any, timeout: float = 30.0,
                   what: str = "") -> Any:
    """Lets the app run until `predicate()` is truthy (checked every 50 ms)."""
    return await wait_until_async(predicate, what, timeout, pause=pilot.pause)


async def select(pilot: Pilot[Any], label: str, timeout: float = 30.0) -> Any:
    """Presses `g` then `j` until the tree's selected row is `label` (as a person would)."""
    app = pilot.app
    await wait_for(pilot, lambda: any(r.label == label for r in app.mesh_tree.rows_shown), timeout,
                   f"row {label}")
    await pilot.press("g")
    for _ in range(len(app.mesh_tree.rows_shown) + 1):
        if app.mesh_tree.selected is not None and app.mesh_tree.selected.label == label:
            return app.mesh_tree.selected
        await pilot.press("j")
    labels = [r.label for r in app.mesh_tree.rows_shown]
    raise AssertionError(f"{label} not reached with j: {labels}")


async def result_after(pilot: Pilot[Any], start: int, name: str, timeout: float = 60.0) -> Any:
    """The result of the first `name` action recorded after `app.results[:start]`."""
    app = pilot.app

    def found() -> Any:
        return next(([r] for n, r in app.results[start:] if n == name), None)

    return (await wait_for(pilot, found, timeout, f"{name} to finish"))[0]


def record_notifications(app: Any) -> list[str]:
    """Every notification `app` shows from now on, as text, oldest first (a slow machine may
    expire one from the screen before a test looks)."""
    shown: list[str] = []
    notify = app.notify

    def recording(message: Any, *args: Any, **kwargs: Any) -> Any:
        shown.append(str(message))
        return notify(message, *args, **kwargs)

    app.notify = recording
    return shown
