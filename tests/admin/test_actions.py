"""Admin actions on real processes: kill / stop a slice, py-spy, diagnose, break and debug."""

from __future__ import annotations

import os

import pytest
from waiting import pid_gone, wait_until

from monarch.actor import this_host
from monarch.admin import AdminError

pytestmark = pytest.mark.timeout(120)


def pids(admin, mesh_name):
    topology = admin.topology()
    by_proc = {p["proc"]: p["pid"] for h in topology["hosts"] for p in h["procs"]}
    (mesh,) = [m for m in topology["meshes"] if m["name"] == mesh_name]
    return {a["rank"]: by_proc[a["proc"]] for a in mesh["actors"]}, mesh


def test_kill_and_stop_exactly_the_selected_ranks(admin, fault_log, echo_class):
    pm = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    try:
        mesh = pm.spawn("victims", echo_class)
        mesh.ping.call(0).get(timeout=30)
        before, view = pids(admin, "victims")
        assert view["extent"] == {"labels": ["hosts", "gpus"], "sizes": [2, 2]}
        result = admin.kill("victims", "hosts=1, gpus=0")
        assert result["signal"] == "SIGKILL" and result["skipped"] == []
        assert [(k["rank"], k["pid"]) for k in result["killed"]] == [(2, before[2])]
        assert pid_gone(before[2])
        failure = fault_log.wait_for(lambda f: f.name == "victims" and f.rank == 2)
        assert failure.signal == 9
        for rank in (0, 1, 3):
            os.kill(before[rank], 0)
        assert list(mesh.slice(hosts=0).ping.call(5).get(timeout=30).values()) == [5, 5]
        _, view = pids(admin, "victims")
        states = {a["rank"]: a["state"] for a in view["actors"]}
        assert states == {0: "running", 1: "running", 2: "failed", 3: "running"}
        assert "Killed(sig=9)" in view["actors"][2]["failure"]
        again = admin.kill("victims", "hosts=1, gpus=0")
        assert again["killed"] == [] and again["skipped"][0]["state"] == "failed"
        stopped = admin.stop("victims", "hosts=0")
        assert stopped["done"] and [s["rank"] for s in stopped["stopped"]] == [0, 1]
        assert pid_gone(before[0]) and pid_gone(before[1])
        os.kill(before[3], 0)
        _, view = pids(admin, "victims")
        assert [a["state"] for a in view["actors"]] == ["stopped", "stopped", "failed",
                                                        "running"]
        # folded (as `monarch top` asks for a big mesh): the actors not simply running come
        # as rows, the failed one with its failure; the summary counts every state
        (folded,) = [m for m in admin.topology(rows=[])["meshes"] if m["name"] == "victims"]
        assert [(a["rank"], a["state"]) for a in folded["actors"]] == [
            (0, "stopped"), (1, "stopped"), (2, "failed")]
        assert folded["actors"] == view["actors"][:3]
        (summary,) = folded["folded"].values()
        assert summary["states"] == {"stopped": 2, "failed": 1, "running": 1}
        assert summary["actors"] == 4
        assert folded["rank_procs"] == [[a["rank"], a["proc"]] for a in view["actors"]]
    finally:
        pm.stop().get(timeout=30)


def test_kill_refusals(admin, procs, echo_class):
    procs.spawn("refusals", echo_class).ping.call(0).get(timeout=30)
    with pytest.raises(AdminError, match="no mesh 'ghost'") as info:
        admin.kill("ghost", "")
    assert info.value.status == 404
    with pytest.raises(AdminError, match="unknown dimension 'hosts'") as info:
        admin.kill("refusals", "hosts=0")
    assert info.value.status == 400
    with pytest.raises(AdminError, match="out of range"):
        admin.kill("refusals", "gpus=4")
    with pytest.raises(AdminError, match="unknown signal"):
        admin.kill("refusals", "gpus=0", sig="NOPE")


def test_stack_of_a_proc(admin, procs, echo_class):
    procs.spawn("stacked", echo_class).ping.call(0).get(timeout=30)
    before, view = pids(admin, "stacked")
    dump = admin.stack(view["actors"][1]["proc"])
    assert f"Process {before[1]}" in dump and "Thread" in dump
    with pytest.raises(AdminError, match="no proc 'nope'") as info:
        admin.stack("nope")
    assert info.value.status == 404


def test_diagnose_pings_every_live_proc(admin, procs):
    result = admin.diagnose()
    assert result["ok"]
    checked = {c["proc"] for c in result["checks"] if c["check"] == "ping"}
    topology = admin.topology()
    live = {p["proc"] for h in topology["hosts"] for p in h["procs"] if p["state"] == "running"}
    assert "controller" in live and live <= checked
    assert [c for c in result["checks"]
            if c["status"] not in ("pass", "slow") or c["latency_ms"] < 0] == []


def read_until(admin, session_id, marker, offset=0, timeout=30.0):
    """Reads the session's output from `offset` until `marker` shows; (text, next offset)."""
    read = {"text": "", "offset": offset}

    def seen() -> bool:
        chunk, read["offset"], closed = admin.read(session_id, read["offset"], 2.0)
        read["text"] += chunk
        assert not closed or marker in read["text"], read["text"]
        return marker in read["text"]

    wait_until(seen, lambda: f"{marker!r} in {read['text']!r}", timeout, interval=0)
    return read["text"], read["offset"]


def test_break_next_then_drive_the_session(admin, procs, echo_class):
    mesh = procs.spawn("breaker", echo_class)
    mesh.ping.call(0).get(timeout=30)
    assert admin.break_next("breaker", 1)["rank"] == 1
    pending = mesh.slice(gpus=1).ping.call_one(5)
    (session,) = wait_until(admin.sessions, "a debugger session")
    assert session["actor_name"] == "breaker" and session["rank"] == 1
    assert session["function"] == "ping"
    _, offset = read_until(admin, session["id"], "(Pdb) ")
    assert admin.send(session["id"], "p x * 3")
    _, offset = read_until(admin, session["id"], "15", offset)
    assert admin.cast("breaker", [1], "p x + 100") == [session["id"]]
    read_until(admin, session["id"], "105", offset)
    assert admin.continue_all() == 1
    assert pending.get(timeout=30) == 5
    assert admin.sessions() == []
    assert admin.send(session["id"], "p 1") is False
    with pytest.raises(AdminError, match="no actor breaker\\[9\\]"):
        admin.break_next("breaker", 9)


def test_a_read_of_the_supervisor_runs_on_the_loop_not_on_the_requests_thread(job):
    """`Actions.on_loop` waits without leading the loop: the read runs on the thread that
    leads it, and a request's thread does not take the job's traffic as its own work (it
    did, and that work counted as the request's cost)."""
    import threading

    actions = job.admin.api.actions
    asked = []

    def ask() -> None:
        for _ in range(20):
            asked.append((threading.get_ident(), actions.on_loop(threading.get_ident)))

    thread = threading.Thread(target=ask)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive() and len(asked) == 20
    assert all(mine != ran for mine, ran in asked), asked
