"""The app's edges, with the in-memory client: a job that stops answering, actions that do
not apply to the selection, the attach loop, what the keys send."""

from __future__ import annotations

import io

import pytest
from drive import record_notifications, result_after, select, wait_for
from fakeclient import FakeClient
from monarch.console._attach import attach
from monarch.console.app import MonarchTop
from screen_text import screen_text

from monarch.admin import AdminError

pytestmark = pytest.mark.timeout(60)


class Flaky(FakeClient):
    """Answers until `down` is set, then fails like an unreachable job."""

    down = False

    def job(self):
        if self.down:
            raise AdminError("cannot reach the admin API at 127.0.0.1:1: ConnectionRefused")
        return super().job()


async def test_a_job_that_stops_answering_keeps_the_last_tree_and_says_why():
    client = Flaky()
    app = MonarchTop(client, refresh=0.1)
    async with app.run_test(size=(150, 40)) as pilot:
        await wait_for(pilot, lambda: len(app.mesh_tree.rows_shown) > 5)
        rows = list(app.mesh_tree.rows_shown)
        client.down = True
        await wait_for(pilot, lambda: "ERROR: job: AdminError" in screen_text(app))
        assert [r.key for r in app.mesh_tree.rows_shown] == [r.key for r in rows]
        client.down = False
        await wait_for(pilot, lambda: "ERROR" not in screen_text(app))


async def test_actions_that_do_not_fit_the_selection_warn_and_do_nothing():
    client = FakeClient()
    app = MonarchTop(client, refresh=0.1)
    shown = record_notifications(app)
    async with app.run_test(size=(150, 40), notifications=True) as pilot:
        await wait_for(pilot, lambda: len(app.mesh_tree.rows_shown) > 5)
        await pilot.press("g")  # the job row
        for key in ("k", "s", "b", "p"):
            await pilot.press(key)
        await pilot.press("colon", *"gpus=0", "enter", "escape")  # a slice of the job row
        await pilot.press("a")  # no paused actor
        await select(pilot, "trainers")
        await pilot.press("b")  # a whole mesh: which rank?
        warnings = ("select a mesh, proc mesh or actor first",
                    "select a mesh (or proc mesh) row to slice it", "no paused actor here",
                    "select one actor")
        await wait_for(pilot, lambda: all(any(w in m for m in shown) for w in warnings),
                       what=f"the warnings {warnings}")
        assert client.calls == [] and app.screen is app.screen_stack[0]


async def test_e_jumps_to_the_failed_actor_of_a_folded_mesh_and_names_its_cause():
    client = FakeClient()
    app = MonarchTop(client, refresh=0.1)
    shown = record_notifications(app)
    async with app.run_test(size=(150, 40), notifications=True) as pilot:
        await wait_for(pilot, lambda: len(app.mesh_tree.rows_shown) > 5)
        await select(pilot, "trainers")
        await pilot.press("left")  # fold the mesh: its failed actor is hidden
        await wait_for(pilot, lambda: "trainers[3]" not in
                       [r.label for r in app.mesh_tree.rows_shown], what="trainers folded")
        await pilot.press("g", "e")
        await wait_for(pilot, lambda: app.mesh_tree.selected is not None
                       and app.mesh_tree.selected.label == "trainers[3]",
                       what="the cursor on trainers[3]")
        assert app.expanded["mesh:local:m1"] is True
        await wait_for(pilot, lambda: any("trainers[3]: Killed(sig=9)" in m for m in shown),
                       what="the root cause named")
        assert "Killed(sig=9)" in screen_text(app)  # the detail pane shows it too


async def test_keys_send_the_selection_to_the_client():
    client = FakeClient()
    app = MonarchTop(client, refresh=0.1)
    async with app.run_test(size=(150, 40)) as pilot:
        await select(pilot, "generators[1]")
        start = len(app.results)
        await pilot.press("k", "y")
        await result_after(pilot, start, "kill")
        await pilot.press("s", "y")
        await result_after(pilot, start, "stop")
        await pilot.press("b")
        await result_after(pilot, start, "break_next")
        await pilot.press("C")
        await result_after(pilot, start, "continue_all")
        await select(pilot, "procs p1")
        await pilot.press("colon", *"gpus=(0,2)", "enter", "k", "y")
        await wait_for(pilot, lambda: len([c for c in client.calls if c[0] == "kill"]) == 2)
        assert client.calls[:4] == [("kill", ("m2", "gpus=1")), ("stop", ("m2", "gpus=1")),
                                    ("break_next", ("m2", 1)), ("continue_all", ())]
        assert client.calls[4] == ("kill", ("p1", "gpus=(0,2)"))


def test_attach_drives_a_session_until_it_ends_or_detaches():
    client = FakeClient()
    session = {"id": 3, "actor_name": "trainers", "rank": 1, "function": "train", "lineno": 9}
    out = io.StringIO()
    assert attach(client, session, io.StringIO("p x\nc\n"), out)
    assert ("send", (3, "p x")) in client.calls and "session trainers[1] ended" in out.getvalue()
    out = io.StringIO()
    assert not attach(client, dict(session, id=4), io.StringIO("detach\n"), out)
    assert "trainers[1] stays paused" in out.getvalue()
    assert not attach(client, dict(session, id=5), io.StringIO(""), io.StringIO())


async def test_the_console_says_its_job_ended_and_opens_its_history(tmp_path, monkeypatch):
    """The screen froze on `health ok` under an error banner when its job ended: it says the
    job ended (first, where no long line pushes it off), refuses actions, and `H` opens the
    job's history read-only, where no actor of the ended job shows running."""
    from demojob import DemoJob
    from monarch.console._confirm import ConfirmScreen

    monkeypatch.setenv("MONARCH_HISTORY", "1")
    job = DemoJob(tmp_path, "--run-for", "8")
    monkeypatch.setenv("MONARCH_RUN_DIR", str(job.run_dir))  # where the app finds the history
    try:
        job.wait_ready()
        app = MonarchTop(job.client, refresh=0.3)
        shown = record_notifications(app)
        async with app.run_test(size=(150, 40), notifications=True) as pilot:
            await wait_for(pilot, lambda: "ENDED (finished)" in screen_text(app), 90,
                           "the job's end to show")
            assert "press H for its history" in screen_text(app).splitlines()[0] + \
                screen_text(app)
            await select(pilot, "trainers")
            await pilot.press("k")  # an ended job's console kills nothing, asks nothing
            await wait_for(pilot, lambda: any("read-only" in m for m in shown))
            assert not isinstance(app.screen, ConfirmScreen)
            await pilot.press("H")
            await wait_for(pilot, lambda: "read-only: the history of an ended job"
                           in screen_text(app), 60, "the history view")
            actors = wait_for(pilot, lambda: [
                a for m in (app.snapshot.topology or {}).get("meshes", [])
                for a in m["actors"] if m["name"] == "trainers"], 30, "the history's actors")
            assert {a["state"] for a in await actors} <= {"stopped", "failed"}
            trainers = next(m for m in app.snapshot.topology["meshes"]
                            if m["name"] == "trainers")
            assert trainers["extent"]["labels"] and trainers["extent"]["sizes"]
    finally:
        job.stop()
