"""`:` command mode (k9s's): resource tables against a real job (the demo workload), filtered
by `/` (a regular expression, `!` inverts), enter jumping back to the node in the tree; `:save`
and ctrl+s write the screen to a file; what is neither a command nor a slice is refused and
the input stays open. The parsing, the tables and the filter are checked as pure functions."""

from __future__ import annotations

from pathlib import Path

import pytest
from drive import record_notifications, select, wait_for
from fakeclient import FakeClient
from monarch.console import _resources as resources
from monarch.console._command import CommandError, parse
from monarch.console._filter import TextFilter
from monarch.console._model import Snapshot
from monarch.console._resource_view import ResourceScreen
from monarch.console.app import MonarchTop
from screen_text import screen_text

pytestmark = pytest.mark.timeout(180)

SIZE = (160, 44)


def resource_screen(app: MonarchTop, kind: str) -> ResourceScreen | None:
    screen = app.screen
    return screen if isinstance(screen, ResourceScreen) and screen.kind == kind \
        and screen.shown is not None else None


def first_cells(screen: ResourceScreen) -> list[str]:
    return [item.cells[0] for item in screen.items]


async def command(pilot, text: str) -> None:
    await pilot.press("colon", *text, "enter")


def demo_cells(screen) -> list[str]:
    """The first cells of a resource view, the debugger's mesh left out."""
    return [c for c in first_cells(screen) if c != "debug_controller"]


async def test_resources_filter_and_jump_back_to_the_tree(demo_job, monkeypatch):
    monkeypatch.setenv("MONARCH_RUN_DIR", str(demo_job.run_dir))  # where :jobs looks, as the
    # console of a user whose jobs run there
    app = MonarchTop(demo_job.client, refresh=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, "trainers")
        await command(pilot, "meshes")
        screen = await wait_for(pilot, lambda: resource_screen(app, "meshes"), what=":meshes")
        # the console only watches: its polls spawn nothing (the debugger's mesh shows only
        # if an earlier test of the session opened a debug session)
        await wait_for(pilot, lambda: sorted(demo_cells(screen)) == [
            "generators", "inspector", "rewards", "trainers"],
            what=lambda: f"the demo's meshes: {first_cells(screen)}")
        assert "NAME" in screen_text(app) and "PROC MESH" in screen_text(app)
        total = len(screen.items)
        await wait_for(pilot, lambda: f":meshes · {total} of {total}" in screen_text(app))

        await pilot.press("slash", *"^(gen|rew)", "enter")  # a regular expression
        await wait_for(pilot, lambda: sorted(first_cells(screen)) == ["generators", "rewards"],
                       what="the filter")
        assert f":meshes · 2 of {total} · /^(gen|rew)" in screen_text(app)
        await pilot.press("slash", "home", "!", "enter")  # ! inverts it
        await wait_for(pilot, lambda: sorted(demo_cells(screen)) == ["inspector", "trainers"]
                       and len(screen.items) == total - 2, what="the inverted filter")
        await pilot.press("slash", *"inspector", "escape")  # esc clears the filter
        await wait_for(pilot, lambda: len(screen.items) == total, what="the filter cleared")

        await pilot.press("slash", *"^inspector$", "enter")
        await wait_for(pilot, lambda: first_cells(screen) == ["inspector"])
        await pilot.press("enter")  # back to the tree, on the mesh
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0]
                       and app.mesh_tree.selected is not None
                       and app.mesh_tree.selected.label == "inspector", what="the jump")

        await command(pilot, "actor")  # singular works too
        screen = await wait_for(pilot, lambda: resource_screen(app, "actors"), what=":actors")
        await wait_for(pilot, lambda: "trainers[2]" in first_cells(screen))
        await pilot.press("slash", *"trainers\\[2\\]", "enter", "enter")
        await wait_for(pilot, lambda: app.mesh_tree.selected is not None
                       and app.mesh_tree.selected.label == "trainers[2]",
                       what="the jump to trainers[2]")

        await command(pilot, "jobs")
        screen = await wait_for(pilot, lambda: resource_screen(app, "jobs"), what=":jobs")
        job_id = demo_job.info["job_id"]
        await wait_for(pilot, lambda: [i.cells[:2] for i in screen.items
                                       if i.cells[0] == job_id] == [(job_id, "this console")],
                       what="this job among the jobs")
        await command(pilot, "procs")  # one resource replaces another
        await wait_for(pilot, lambda: resource_screen(app, "procs"), what=":procs")
        assert len(app.screen_stack) == 2
        await command(pilot, "tree")
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0], what=":tree")


async def test_save_writes_the_screen_and_nonsense_is_refused(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = MonarchTop(FakeClient(), refresh=0.1)
    shown = record_notifications(app)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await select(pilot, "trainers[3]")
        await pilot.press("ctrl+s")
        saved = await wait_for(pilot, lambda: list(tmp_path.glob("monarch-top-job-1-*.txt")),
                               what="the screen saved")
        text = saved[0].read_text()
        assert "trainers[3]" in text and "Killed(sig=9)" in text
        await command(pilot, f"save {tmp_path / 'named.txt'}")
        await wait_for(pilot, lambda: (tmp_path / "named.txt").exists(), what=":save PATH")
        assert "trainers[3]" in (tmp_path / "named.txt").read_text()

        await command(pilot, "bogus")  # neither a command nor a slice: the input stays open
        await wait_for(pilot, lambda: any("unknown command 'bogus'" in m for m in shown))
        assert app.command_input.has_focus and app.command_input.value == "bogus"
        app.command_input.value = ""
        await pilot.press(*"meshes now", "enter")
        await wait_for(pilot, lambda: any(":meshes takes no argument" in m for m in shown))
        await pilot.press("escape")
        assert not app.command_input.has_focus


def test_parse_reads_commands_aliases_and_slices():
    assert parse("meshes") == ("meshes", "")
    assert parse(":svc") == ("services", "")
    assert parse("  Actors ") == ("actors", "")
    assert parse("slice gpus=0:2") == ("slice", "gpus=0:2")
    assert parse("gpus=0:2, hosts=1") == ("slice", "gpus=0:2, hosts=1")
    assert parse("") == ("slice", "") and parse("all") == ("slice", "all")
    assert parse("save /tmp/x.txt") == ("save", "/tmp/x.txt")
    assert parse("q") == ("quit", "")
    for bad in ("gpus", "meshs", "hello world"):
        with pytest.raises(CommandError, match="unknown command"):
            parse(bad)


def test_the_filter_is_a_regex_inverted_by_a_bang_and_literal_when_broken():
    assert TextFilter("loss|nan").matches("step 3 LOSS 1.2")
    assert not TextFilter("!loss").matches("step 3 loss 1.2")
    assert TextFilter("!loss").matches("syncing")
    assert TextFilter("gpus=(").matches("slice gpus=(0,1)")  # not a valid regex: literal
    assert TextFilter("").matches("anything") and TextFilter("!").matches("anything")


def test_every_resource_is_a_table_of_the_snapshot():
    client = FakeClient()
    snap = Snapshot(client.job(), client.topology(), [], client.spans(), client.transfers())
    meshes = resources.table("meshes", snap, {"actor:m1:1": 2.0})
    assert [i.cells[:6] for i in meshes.items] == [
        ("trainers", "Trainer", "{gpus: 4}", "4", "failed", "1"),
        ("generators", "Generator", "{gpus: 2}", "2", "running", "0")]
    assert meshes.items[0].cells[6] == "2.0" and meshes.items[0].ref == "m1"
    actors = resources.table("actors", snap)
    assert [i.cells[0] for i in actors.items] == [*(f"trainers[{r}]" for r in range(4)),
                                                  "generators[0]", "generators[1]"]
    assert actors.items[3].cells[1] == "failed" and actors.items[3].ref == "actor:m1:3"
    procs = resources.table("procs", snap)
    assert [i.cells[0] for i in procs.items][:3] == ["controller", "p1.0", "p1.1"]
    jobs = resources.table("jobs", snap, local=[{"job_id": "job-1", "pid": 1},
                                                {"job_id": "job-2", "pid": 2}])
    assert [i.cells[:2] for i in jobs.items] == [("job-1", "this console"), ("job-2", "")]
    allocations = resources.table("allocations", snap, local=[
        {"id": "process-1", "type": "ProcessJob", "state": "running", "hosts": "ft=2",
         "client": "job-1,job-9", "started": 1.7e9, "detail": "tcp://127.0.0.2:1"},
        {"id": "slurm-2", "type": "SlurmJob", "state": "pending", "hosts": "trainers=4",
         "client": "", "started": None, "detail": "slurm 17"}])
    assert [i.cells[:5] for i in allocations.items] == [
        ("process-1", "ProcessJob", "running", "ft=2", "this job"),
        ("slurm-2", "SlurmJob", "pending", "trainers=4", "none")]
    assert allocations.items[1].cells[5:] == ("", "slurm 17")
    assert resources.table("services", snap).items == ()
    topo = dict(client.topology(), weights=[{"key": "policy", "version": 3, "bytes": 4 << 20,
                                             "reads": 7}])
    weights = resources.table("weights", Snapshot(client.job(), topo))
    assert [i.cells for i in weights.items] == [("policy", "3", "4.0 MiB", "7")]
    topo = dict(client.topology(), tensor_engines=[
        {"mesh": "m2", "ops": 30, "batches": 4, "tensors": 7},
        {"mesh": "gone", "ops": 1, "batches": 1, "tensors": 0}])
    tensors = resources.table("tensors", Snapshot(client.job(), topo))
    assert [i.cells for i in tensors.items] == [
        ("generators", "{gpus: 2}", tensors.items[0].cells[2], "running", "30", "4", "7.5", "7"),
        ("gone", "", "", "gone", "1", "1", "1.0", "0")]
    assert (tensors.items[0].kind, tensors.items[0].ref) == ("mesh", "m2")
    assert tensors.items[1].kind == ""  # its workers' mesh is gone: no node to jump to
    assert resources.table("transfers", snap).columns[0] == "BY"
    with pytest.raises(ValueError, match="unknown resource 'pods'"):
        resources.table("pods", snap)


async def test_allocations_lists_a_real_process_job_and_drops_it_once_killed(demo_job, tmp_path,
                                                                             monkeypatch):
    """`:allocations`: a ProcessJob that a script made (its workers outlive it) is a row with
    its hosts and state, read on this machine off the UI thread; killed, the row goes."""
    import json
    import subprocess
    import sys

    from monarch.job import job_load
    from waiting import wait_gone

    monkeypatch.setenv("MONARCH_RUN_DIR", str(tmp_path / "runs"))  # the client's and ours
    client = Path(__file__).parent.parent / "job_client.py"
    out = subprocess.run([sys.executable, str(client), "process"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["meshes"]
    job = job_load(str(tmp_path / ".monarch" / "job_state.pkl"))
    pids = [s.pid for s in job._running.workers.values()]
    try:
        app = MonarchTop(demo_job.client, refresh=0.3)
        async with app.run_test(size=SIZE) as pilot:
            await command(pilot, "alloc")
            screen = await wait_for(pilot, lambda: resource_screen(app, "allocations"),
                                    what=":allocations")
            await wait_for(pilot, lambda: len(screen.items) == 1, 30, "the allocation's row")
            row = screen.items[0].cells
            assert row[1:4] == ("ProcessJob", "running", "trainers=2 gen=1"), row
            assert row[4] == "none"  # the script that made it has ended
            assert "ALLOCATION" in screen_text(app) and row[0] in screen_text(app)
            job.kill()
            wait_gone(*pids)
            await wait_for(pilot, lambda: not screen.items, 30, "the row gone once killed")
    finally:
        job.kill()
        wait_gone(*pids)
