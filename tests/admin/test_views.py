"""What the admin API shows: topology with counters, job health, logs, spans, feeds, transfers."""

from __future__ import annotations

import json
import threading
import time

import pytest
from waiting import wait_until

from monarch import telemetry
from monarch.admin import AdminError

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def echo(procs, echo_class):
    mesh = procs.spawn("echo", echo_class)
    mesh.ping.call(1).get(timeout=30)
    return mesh


def mesh_view(admin, name):
    return next((m for m in admin.topology()["meshes"] if m["name"] == name), None)


def test_topology_lists_hosts_procs_meshes_and_actors_with_counters(admin, echo, procs):
    view = wait_until(lambda: (m := mesh_view(admin, "echo"))
                      and [a["messages"] >= 1 for a in m["actors"]] == [True] * 4 and m)
    assert view["extent"] == {"labels": ["gpus"], "sizes": [4]}
    assert [a["rank"] for a in view["actors"]] == [0, 1, 2, 3]
    assert view["class_name"].endswith("Echo") and view["procs"] == procs._procs
    for rank, actor in enumerate(view["actors"]):
        assert actor["rank"] == rank and actor["point"] == {"gpus": rank}
        assert actor["state"] == "running" and actor["last_method"] == "ping"
        assert actor["latency_p50_ms"] > 0 and actor["queue_depth"] == 0
        assert actor["failure"] is None and "echo{'gpus': " in actor["label"]
    topology = admin.topology()
    (host,) = topology["hosts"]
    procs_by_name = {p["proc"]: p for p in host["procs"]}
    assert "controller" in procs_by_name
    for actor in view["actors"]:
        proc = procs_by_name[actor["proc"]]
        assert proc["pid"] > 0 and proc["state"] == "running"
        assert view["mesh"] in proc["meshes"] and proc["counters"]["messages"] >= 1
        assert proc["point"] == {"gpus": proc["rank"]}


def test_topology_since_the_last_poll_sends_what_changed(admin, echo):
    """A poller passes its last topology: the job sends the changes, the client rebuilds the
    same topology a whole request gets, and the parts that did not change are shared."""
    first = admin.topology()
    before = next(a["messages"] for a in mesh_view(admin, "echo")["actors"] if a["rank"] == 2)
    echo.slice(gpus=2).ping.call(1).get(timeout=30)

    def pinged():
        now = admin.topology(since=first)
        view = next(m for m in now["meshes"] if m["name"] == "echo")
        return view["actors"][2]["messages"] > before and now

    now = wait_until(pinged)
    assert now["version"] != first["version"]
    raw = admin._get("/v1/topology", since=now["version"])
    assert raw["since"] == now["version"]
    echo_raw = next(m for m in raw["meshes"] if m["mesh"] == echo_id(now))
    assert echo_raw.get("same") or "actors" not in echo_raw
    assert len(json.dumps(raw)) < len(json.dumps(now))

    def same_as_whole():
        since, whole = admin.topology(since=admin.topology()), admin.topology()
        strip = lambda t: {k: v for k, v in t.items() if k != "version"}
        return strip(since) == strip(whole)

    wait_until(same_as_whole)


def test_a_folded_mesh_sums_what_its_rows_would_show(admin, echo, job):
    """`rows=`: the meshes named come with every actor, the others folded, a summary by host
    of what their rows hold (what `monarch top` asks for a thousand actors)."""
    echo.ping.call(3).get(timeout=30)

    def both():  # a whole and a folded topology of the same counts (the job is quiet)
        whole = mesh_view(admin, "echo")
        if any(a["queue_depth"] or a["latency_p50_ms"] is None or a["last_method"] != "ping"
               for a in whole["actors"]):
            return None  # the call's telemetry is still on its way
        folded = next(m for m in admin.topology(rows=[])["meshes"] if m["name"] == "echo")
        again = mesh_view(admin, "echo")
        return whole == again and (whole, folded)

    whole, folded = wait_until(both)
    assert folded["actors"] == []  # every actor runs: none is notable
    (summary,) = folded["folded"].values()
    assert list(folded["folded"]) == ["local"]
    actors = whole["actors"]
    assert summary["actors"] == 4 and summary["states"] == {"running": 4}
    assert summary["messages"] == sum(a["messages"] for a in actors)
    assert summary["queue_depth"] == sum(a["queue_depth"] for a in actors)
    assert summary["last_method"] == "ping" and summary["stalled"] == 0
    assert 0 < summary["latency_p50_ms"] <= max(a["latency_p50_ms"] for a in actors)
    assert folded["rank_procs"] == [[a["rank"], a["proc"]] for a in actors]
    for key in ("mesh", "name", "class_name", "extent", "procs", "owner_id"):
        assert folded[key] == whole[key]
    for named in ([whole["mesh"]], ["echo"]):  # by id or by name: every actor
        shown = next(m for m in admin.topology(rows=named)["meshes"] if m["name"] == "echo")
        assert "folded" not in shown and len(shown["actors"]) == 4
    # changed-since works across folding: the same topology a whole request gets
    first = admin.topology(rows=[])
    echo.ping.call(4).get(timeout=30)
    again = wait_until(lambda: (t := admin.topology(since=first, rows=[])) and next(
        m for m in t["meshes"] if m["name"] == "echo")["folded"]["local"]["messages"]
        > summary["messages"] and t)
    assert next(m for m in again["meshes"] if m["name"] == "echo")["rank_procs"] == \
        folded["rank_procs"]
    with pytest.raises(TypeError, match="not the string"):
        admin.topology(rows="echo")
    with pytest.raises(ValueError, match="without a comma"):
        admin.topology(rows=["a,b"])


def echo_id(topo):
    return next(m["mesh"] for m in topo["meshes"] if m["name"] == "echo")


def test_job_info(admin, job, echo):
    info = admin.job()
    assert info["job_id"] == job.job_id and info["address"] == job.admin.address
    assert info["uptime_s"] > 0 and info["health"] in ("ok", "degraded")
    assert info["counts"]["actors"] >= 4 and info["counts"]["procs"] >= 4


def test_logs_filter_by_mesh_rank_and_text(admin, echo):
    echo.ping.call(2).get(timeout=30)
    lines = wait_until(lambda: admin.logs(mesh="echo", rank=2, text="echo 2 "))
    assert {(line["mesh"], line["rank"]) for line in lines} == {("echo", 2)}
    assert lines[-1]["text"] == "echo 2 from 2" and lines[-1]["stream"] == "stdout"
    assert lines[-1]["proc"] and lines[-1]["host"]
    warned = wait_until(lambda: admin.logs(mesh=echo._mesh_id, text="warned 2 from 3"))
    assert warned[-1]["level"] == 30 and warned[-1]["rank"] == 3
    echo.ping.call(4).get(timeout=30)  # something logged after those lines
    later = wait_until(lambda: admin.logs(since_hlc=lines[-1]["hlc"], limit=5),
                       "lines logged later")
    assert later and all(line["hlc"] > lines[-1]["hlc"] for line in later)


def test_spans_join_controller_and_actor_across_processes(admin, echo):
    echo.ping.call(3).get(timeout=30)

    def joined():
        spans = admin.spans(mesh="echo", limit=100)
        calls = {s["span_id"]: s for s in spans if s["name"] == "call echo.ping"}
        return [(calls[s["parent_span_id"]], s) for s in spans
                if s["name"] == "echo.ping" and s["parent_span_id"] in calls]

    call, invocation = wait_until(joined)[-1]
    assert call["source"] == "controller" and invocation["source"] != "controller"
    trace = admin.spans(trace_id=call["trace_id"])
    assert {s["span_id"] for s in trace} >= {call["span_id"], invocation["span_id"]}


def test_follow_logs_never_misses_late_lines(admin, job):
    with admin.follow_logs(mesh="late") as stream:
        old = telemetry.LogRecord(1, 1, "stdout", 20, "a line from long ago",
                                  {"mesh": "late", "rank": 0})
        job.store.add(telemetry.LogRecord(2, 2, "stdout", 20, "elsewhere", {"mesh": "other"}))
        job.store.add(old)
        line = next(stream)
    assert line["text"] == "a line from long ago" and line["hlc"] == 1


def test_follow_logs_replays_history_then_goes_on(admin, job):
    job.store.add(telemetry.LogRecord(telemetry.now(), time.time_ns(), "stdout", 20, "before",
                                      {"mesh": "hist", "rank": 1}))
    with admin.follow_logs(mesh="hist", rank=1, history=10) as stream:
        assert next(stream)["text"] == "before"
        job.store.add(telemetry.LogRecord(telemetry.now(), time.time_ns(), "stdout", 20,
                                          "after", {"mesh": "hist", "rank": 1}))
        assert next(stream)["text"] == "after"


def test_subscribe_and_close_from_another_thread(admin, job):
    stream = admin.subscribe(["failure"])
    job.store.add(telemetry.FailureRecord("subs", 3, "X", "h", 42, None, 9, "boom"))
    record = next(stream)
    assert record["kind"] == "failure" and record["mesh_name"] == "subs"
    assert record["signal"] == 9
    done = threading.Event()

    def drain():
        for _ in stream:
            pass
        done.set()

    threading.Thread(target=drain, daemon=True).start()
    stream.close()
    assert done.wait(10)
    with pytest.raises(AdminError, match="unknown record kinds"):
        admin.subscribe(["bogus"])


def test_transfers_with_history_for_a_sparkline(admin, job):
    now = time.time_ns()
    job.store.add(telemetry.TransferRecord(4_000_000, 0.01, "p-a", "p-b", "shm", now - 2 * 10**9,
                                           "weights"))
    job.store.add(telemetry.TransferRecord(1_000_000, 0.01, "p-a", "p-b", "shm", now, "weights"))
    out = admin.transfers(window=10.0)
    (link,) = [x for x in out["links"] if (x["src"], x["dst"]) == ("p-a", "p-b")]
    assert link["bytes"] == 5_000_000 and link["count"] == 2
    assert link["bytes_per_s"] == pytest.approx(500_000)
    assert len(link["history"]) == 60 and sum(link["history"]) == 5_000_000
    (mesh,) = [x for x in out["meshes"] if x["mesh"] == "weights"]
    assert mesh["bytes"] == 5_000_000 and out["total"]["bytes"] >= 5_000_000


def test_metrics_json_and_prometheus_text(admin, echo):
    wait_until(lambda: any(m["name"] == "messages_handled" and m["labels"].get("mesh") == "echo"
                           for m in admin.metrics()))
    text = admin.prometheus()
    assert 'monarch_messages_handled_total{mesh="echo",method="ping"}' in text
    procs = {a["proc"] for a in mesh_view(admin, "echo")["actors"]}
    # each proc ships its counters on its own schedule: wait until every one has
    wait_until(lambda: {m["source"] for m in admin.metrics(by_process=True)
                        if m["name"] == "messages_handled"} >= procs,
               "every echo proc's messages_handled, by process")
    assert admin.stats()["store"]["held"]["span"] > 0


def test_stats_count_what_each_route_costs_the_controller(admin, raw):
    before = admin.stats()["admin"]
    for _ in range(3):
        admin.topology()
    raw("GET", "/v1/no-such-route")
    after = admin.stats()["admin"]
    was = before["routes"].get("GET /v1/topology", {"requests": 0, "cpu_s": 0.0, "io_s": 0.0})
    now = after["routes"]["GET /v1/topology"]
    assert now["requests"] == was["requests"] + 3
    assert now["cpu_s"] > was["cpu_s"] and now["io_s"] > was["io_s"]  # the supervisor read
    assert after["routes"]["other"]["requests"] >= 1 and "GET /v1/no-such-route" not in after[
        "routes"]
    assert after["routes"]["GET /v1/stats"]["requests"] >= 1  # the first call, counted
    assert after["cpu_s"] > before["cpu_s"]


def test_one_actor_in_detail_equals_its_topology_row(admin, echo):
    """`/v1/actor` reads only the one mesh and the one process it needs (not the whole
    topology, as it did), and shows the actor as the topology does, with its flight recorder
    and status events."""
    echo.slice(gpus=1).ping.call(7).get(timeout=30)
    view = wait_until(lambda: (m := mesh_view(admin, "echo")) and m)
    for key in (view["mesh"], "echo"):
        detail = wait_until(lambda: (d := admin.actor(key, 1)) and d["recent"] and d)
        assert detail["mesh"] == "echo" and detail["mesh_id"] == view["mesh"]
        assert detail["class_name"] == view["class_name"] and detail["rank"] == 1
        row = next(a for a in mesh_view(admin, "echo")["actors"] if a["rank"] == 1)
        for field in ("proc", "state", "actor_id", "label", "point", "last_method", "failure",
                      "queued_methods", "stalled"):
            assert detail[field] == row[field], field
        assert detail["messages"] >= 2 and detail["latency_p50_ms"] > 0
        assert detail["recent"][0]["method"] == "ping" and detail["stall_s"] > 0
        assert isinstance(detail["events"], list)
    with pytest.raises(AdminError, match=r"no actor echo\[9\] in this job"):
        admin.actor("echo", 9)
    with pytest.raises(AdminError, match=r"no actor nowhere\[0\]"):
        admin.actor("nowhere", 0)


def test_listing_debug_sessions_spawns_nothing(admin):
    """The console lists sessions at every poll: the list is read, and no DebugController is
    spawned into the job for it (it was, on the first poll, before any actor paused)."""
    before = {m["name"] for m in admin.topology()["meshes"]}
    for _ in range(3):
        assert isinstance(admin.sessions(), list)
    assert {m["name"] for m in admin.topology()["meshes"]} == before


def test_the_admin_api_knows_a_mesh_once_spawn_returned(admin, procs, echo_class):
    """The spawner's word of a new mesh reaches the controller's own supervisor before any
    request made after `spawn()` returned (it went through the controller's own socket, and a
    `monarch stack NAME` at once could be told "no mesh")."""
    for i in range(5):
        mesh = procs.spawn(f"known_at_once_{i}", echo_class)
        topo = admin.topology(rows=[])
        assert f"known_at_once_{i}" in [m["name"] for m in topo["meshes"]]
        assert admin.stacks(f"known_at_once_{i}")["groups"]  # found: sampled, whatever state
        mesh.ping.call(i).get(timeout=30)
