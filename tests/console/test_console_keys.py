"""Every key of `monarch top`, driven with Pilot against a real running job (the demo
workload as a subprocess controller, reached through the admin API)."""

from __future__ import annotations

import io
import os

import pytest
from drive import result_after, select, wait_for
from monarch.console._confirm import ConfirmScreen
from monarch.console._diagnostics import DiagnosticsOverlay
from monarch.console._help import HelpScreen
from monarch.console._stack import StackOverlay
from monarch.console.app import MonarchTop
from screen_text import screen_text

pytestmark = pytest.mark.timeout(180)

SIZE = (170, 50)


def gone(pid: int) -> bool:
    """The process no longer exists (killed and reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def labels(app: MonarchTop) -> set[str]:
    return {r.label for r in app.mesh_tree.rows_shown}


def row_state(app: MonarchTop, label: str) -> str | None:
    return next((r.state for r in app.mesh_tree.rows_shown if r.label == label), None)


async def test_tree_moves_and_folds(demo_job):
    app = MonarchTop(demo_job.client, refresh=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: row_state(app, "trainers[3]") == "running")
        assert {"trainers[0]", "generators[1]", "rewards[0]", "inspector[0]"} <= {
            r.label for r in app.mesh_tree.rows_shown}
        await pilot.press("g")
        assert app.mesh_tree.selected.kind == "job"
        await pilot.press("j", "j")
        assert app.mesh_tree.cursor_row == 2
        await pilot.press("down", "up")
        assert app.mesh_tree.cursor_row == 2
        await pilot.press("G")
        assert app.mesh_tree.cursor_row == len(app.mesh_tree.rows_shown) - 1
        row = await select(pilot, "trainers")
        await pilot.press("enter")
        await wait_for(pilot, lambda: "trainers[0]" not in labels(app))
        assert app.mesh_tree.selected.label == "trainers" and not app.mesh_tree.selected.expanded
        await pilot.press("enter")
        await wait_for(pilot, lambda: "trainers[0]" in labels(app))
        await select(pilot, "trainers[1]")
        detail = app.detail_pane.description
        assert "trainers[1]" in app.detail_pane.border_title
        assert "Trainer" in str(detail.fields) and "pid" in str(detail.fields)
        assert "last method" in screen_text(app)
        assert row.kind == "mesh"
        # live counters: messages/s of a trainer becomes positive
        await wait_for(pilot, lambda: (app.mesh_tree.selected.rate or 0) > 0, what="a message rate")
        assert app.span_pane.row_count > 0
        header = screen_text(app)
        assert demo_job.info["job_id"] in header and "health ok" in header


async def test_logs_search_filter_follow_fold_and_focus(demo_job):
    app = MonarchTop(demo_job.client, refresh=0.3)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.log_pane
        await wait_for(pilot, lambda: any("loss" in line.text for line in pane.shown_lines))
        await wait_for(pilot, lambda: any(line.count > 1 for line in pane.shown_lines),
                       what="a folded line (syncing gradients on several ranks)")
        await pilot.press("slash")
        assert app.search_input.has_focus
        await pilot.press(*"loss", "enter")
        assert app.search == "loss" and not app.search_input.has_focus
        await wait_for(pilot, lambda: pane.shown_lines and all(
            "loss" in line.text for line in pane.shown_lines))
        await select(pilot, "trainers[1]")
        await pilot.press("m")
        await wait_for(pilot, lambda: pane.shown_lines and all(
            line.source == "trainers[1]" for line in pane.shown_lines))
        assert "mesh=trainers rank=1 /loss" in pane.border_title
        await pilot.press("escape")
        assert app.search == ""
        await pilot.press("m")
        await wait_for(pilot, lambda: any(line.source.startswith("generators")
                                          for line in pane.shown_lines))
        await pilot.press("u")
        assert not app.fold
        await wait_for(pilot, lambda: pane.shown_lines and all(
            line.count == 1 for line in pane.shown_lines))
        await pilot.press("u")
        assert app.fold
        await pilot.press("f")
        assert not pane.follow and "paused" in pane.border_title
        await pilot.press("f")
        assert pane.follow
        await pilot.press("l")
        assert pane.has_focus
        await pilot.press("tab")
        assert not pane.has_focus
        await pilot.press("j")
        assert app.mesh_tree.has_focus


async def test_slice_then_kill_sigkills_those_procs(fresh_job):
    app = MonarchTop(fresh_job.client, refresh=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, "trainers")
        await pilot.press("colon")
        assert app.command_input.has_focus
        await pilot.press(*"gpus=9", "enter")  # out of range: refused, input stays open
        assert app.slice is None and app.command_input.has_focus
        for typo in ("gpus", "gpus=0:2,gpus=1", "hosts=0", "gpus=("):  # never all ranks
            app.command_input.value = ""
            await pilot.press(*typo, "enter")
            assert app.slice is None and app.command_input.has_focus, typo
        app.command_input.value = ""
        await pilot.press(*"gpus=1:3", "enter")
        assert app.slice == ("mesh:local:" + app.mesh_tree.selected.ref, "gpus=1:3")
        assert {r.label for r in app.mesh_tree.rows_shown if r.marked} == {"trainers[1]",
                                                                       "trainers[2]"}
        target = app.target()
        pids = [pid for _, pid in target.procs]
        assert len(pids) == 2 and not any(gone(p) for p in pids)
        start = len(app.results)
        started: list[str] = []  # actions start synchronously in the key's handler
        run_action = app._run_action
        app._run_action = lambda name, call: (started.append(name), run_action(name, call))[1]
        await pilot.press("k")
        assert isinstance(app.screen, ConfirmScreen)
        assert "trainers ranks 1-2 (gpus=1:3)" in app.screen.question
        await pilot.press("n")  # declined: nothing happens
        assert not isinstance(app.screen, ConfirmScreen)
        assert started == [] and not any(gone(p) for p in pids)
        await pilot.press("k")
        await pilot.press("y")
        assert started == ["kill"]
        result = await result_after(pilot, start, "kill")
        assert sorted(k["pid"] for k in result["killed"]) == sorted(pids)
        await wait_for(pilot, lambda: all(gone(p) for p in pids), what="the killed procs to go")
        await wait_for(pilot, lambda: row_state(app, "trainers[1]") == "failed"
                       and row_state(app, "trainers[2]") == "failed")
        assert row_state(app, "trainers[0]") == "running"
        failed = next(r for r in app.mesh_tree.rows_shown if r.label == "trainers[2]")
        assert "Killed" in failed.note or "signal" in failed.note.lower()
        assert fresh_job.wait_until(lambda: "supervision: trainers[2] failed" in
                                    fresh_job.output(), what="the script's supervision")
        await select(pilot, "trainers[1]")
        assert app.detail_pane.description.failure
        text = screen_text(app)
        assert "root cause" in text and "failure report" in text


async def test_stop_stops_gracefully(fresh_job):
    app = MonarchTop(fresh_job.client, refresh=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, "rewards[1]")
        pid = app.target().procs[0][1]
        start = len(app.results)
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen) and "Stop rewards" in app.screen.question
        await pilot.press("y")
        result = await result_after(pilot, start, "stop")
        assert result["done"] and [s["pid"] for s in result["stopped"]] == [pid]
        await wait_for(pilot, lambda: gone(pid), what="the stopped proc to exit")
        await wait_for(pilot, lambda: row_state(app, "rewards[1]") == "stopped")
        assert row_state(app, "rewards[0]") == "running"


async def test_breakpoint_attach_evaluates_and_continues(demo_job):
    out = io.StringIO()
    stdin = io.StringIO("p secret * 1000\nsecret = 4242\nc\n")
    app = MonarchTop(demo_job.client, refresh=0.3, attach_io=(stdin, out))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: row_state(app, "inspector[0]") == "running")
        demo_job.touch("breakpoint")
        await wait_for(pilot, lambda: row_state(app, "inspector[0]") == "paused",
                       what="inspector[0] paused in pdb")
        row = await select(pilot, "inspector[0]")
        assert "pdb at inspect" in row.note
        session = app.session_for_selection()
        step = demo_job.client.read(session["id"], 0, 1.0)[0]
        assert "inspect()" in step and "(Pdb) " in step
        start = len(app.results)
        await pilot.press("a")
        assert await result_after(pilot, start, "attach") == "ended"
        text = out.getvalue()
        assert "attached to inspector[0]" in text and "(Pdb) " in text
        secret = int(text.split("(Pdb) ")[1].split()[0])
        assert secret % 7000 == 0 and secret > 0  # step * 7 * 1000, evaluated in the actor
        assert "session inspector[0] ended" in text
        await wait_for(pilot, lambda: row_state(app, "inspector[0]") == "running")
        assert demo_job.wait_until(lambda: demo_job.client.logs(
            text="inspector resumed: secret=4242"), what="the actor to go on")
        assert demo_job.client.sessions() == []


async def test_break_next_then_attach_detach_and_continue_all(demo_job):
    out = io.StringIO()
    app = MonarchTop(demo_job.client, refresh=0.3, attach_io=(io.StringIO("p step\n"), out))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: row_state(app, "inspector[0]") == "running")
        await select(pilot, "inspector[0]")
        start = len(app.results)
        await pilot.press("b")
        result = await result_after(pilot, start, "break_next")
        assert result["rank"] == 0
        await wait_for(pilot, lambda: row_state(app, "inspector[0]") == "paused",
                       what="a break at the next message")
        assert "pdb at peek" in next(r.note for r in app.mesh_tree.rows_shown
                                     if r.label == "inspector[0]")
        await pilot.press("a")  # `p step`, then end of input: detach, still paused
        assert await result_after(pilot, start, "attach") == "detached"
        assert "stays paused" in out.getvalue()
        assert len(demo_job.client.sessions()) == 1
        await pilot.press("C")
        assert await result_after(pilot, start, "continue_all") == 1
        await wait_for(pilot, lambda: row_state(app, "inspector[0]") == "running")
        assert demo_job.client.sessions() == []


async def test_py_spy_stack_and_diagnostics(demo_job):
    app = MonarchTop(demo_job.client, refresh=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, "trainers[0]")
        proc, pid = app.target().procs[0]
        await pilot.press("p")
        overlay = app.screen
        assert isinstance(overlay, StackOverlay) and overlay.proc == proc
        await wait_for(pilot, lambda: overlay.runs == 1, 90, "py-spy")
        assert overlay.error is None, overlay.error
        assert f"Process {pid}" in overlay.result and "Thread" in overlay.result
        await pilot.press("r")
        await wait_for(pilot, lambda: overlay.runs == 2, 90, "py-spy again")
        await pilot.press("escape")
        assert not isinstance(app.screen, StackOverlay)
        await pilot.press("d")
        diag = app.screen
        assert isinstance(diag, DiagnosticsOverlay)
        await wait_for(pilot, lambda: diag.runs == 1, 60, "diagnostics")
        report = diag.result
        assert report["ok"] and {c["status"] for c in report["checks"]} <= {"pass", "slow"}
        pinged = {c["proc"] for c in report["checks"]}
        assert proc in pinged and "controller" in pinged
        assert "PASS" in screen_text(app)
        await pilot.press("q")  # closes the overlay, not the app
        assert not isinstance(app.screen, DiagnosticsOverlay) and app.is_running


async def test_help_refresh_and_quit(demo_job):
    # the feed's timer never comes round during the test: a poll after `r` is the key's doing
    app = MonarchTop(demo_job.client, refresh=3600.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.feed.statistics().polls >= 1)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        assert "kill the selection" in text and "attach pdb" in text
        await pilot.press("x")  # any key closes it
        assert not isinstance(app.screen, HelpScreen)
        for _ in range(2):  # each press is one more poll
            polls = app.feed.statistics().polls
            await pilot.press("r")
            await wait_for(pilot, lambda n=polls: app.feed.statistics().polls > n, 30,
                           "a refresh")
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, 10, "the app to quit")
