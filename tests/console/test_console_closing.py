"""A view the app draws each poll on must be there to draw on: a poll that came between a
view's key and its mount raised NoMatches (`#timeline-head`) and ended the console (seen once
in the 1,024-actor tmux test)."""

from __future__ import annotations

import pytest
from drive import wait_for
from fakeclient import FakeClient
from monarch.console.app import MonarchTop

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("view", ["TimelineScreen", "GridScreen", "ResourceScreen"])
async def test_a_poll_between_a_views_key_and_its_mount_is_not_drawn_on_it(view):
    """The app shows each poll on the view on top; one pushed a moment ago is not composed yet
    (the poll came between the key and the view's mount): `#timeline-head` did not exist."""
    from monarch.console import _grid_view, _resource_view, _timeline_view

    make = {"TimelineScreen": lambda: _timeline_view.TimelineScreen("m1"),
            "GridScreen": lambda: _grid_view.GridScreen("m1"),
            "ResourceScreen": lambda: _resource_view.ResourceScreen("meshes")}[view]
    app = MonarchTop(FakeClient(), refresh=0.1)
    async with app.run_test(size=(150, 42)) as pilot:
        await wait_for(pilot, lambda: app.feed.statistics().polls >= 2 and app.snapshot.job)
        app.push_screen(make())
        app.apply(app.snapshot)  # at once: before the loop has mounted the view
        await wait_for(pilot, lambda: app.screen.is_mounted, what="the view mounted")
        app.apply(app.snapshot)  # mounted now: drawn
        await pilot.press("escape")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "Screen", what="closed")
        assert app.is_running
