"""`rows=` items of the admin topology that name a mesh on some hosts (`<mesh id>@<host id>`)."""

from __future__ import annotations

from monarch._controller._admin_views import host_windows


def test_items_split_at_the_at_sign_that_ends_a_mesh_id() -> None:
    ids = {"trainers-1a2b", "a@b-3c4d"}  # a mesh's name (so its id) may hold an `@`
    rows = ["trainers-1a2b@hosts_3", "trainers-1a2b@hosts_6", "a@b-3c4d@h@x", "a@b-3c4d",
            "gone-9999@hosts_1", "trainers", "@hosts_2"]
    assert host_windows(rows, ids) == {"trainers-1a2b": frozenset({"hosts_3", "hosts_6"}),
                                       "a@b-3c4d": frozenset({"h@x"})}
    assert host_windows([], ids) == {}
