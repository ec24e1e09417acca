"""Monarch's telemetry API on a job (`enable_telemetry(TelemetryConfig())`, `enable_admin`,
`state.query_engine_client.query(sql)`): Monarch's tables, answered over our store through the
job's admin API, with real procs, real sockets and real DataFusion."""

from __future__ import annotations

import json
import warnings

import pytest
from waiting import wait_until

import monarch.actor
from monarch.actor import Actor, endpoint, span, this_host
from monarch.admin import AdminError, connect
from monarch.job import JobState, JobTrait, MeshAdminConfig, TelemetryConfig

pytestmark = pytest.mark.timeout(180)


class Pinger(Actor):
    @endpoint
    def ping(self, x: int = 0) -> int:
        return x

    @endpoint
    def traced(self, name: str) -> None:
        with span(name):
            pass

    @endpoint
    def fail(self) -> None:
        raise RuntimeError("pinger gave up")


class ThisHostJob(JobTrait):
    """A job whose only host is the controller's (`this_host()`), as Monarch's tests' mock."""

    def __init__(self, healthy: bool = True) -> None:
        super().__init__()
        self._healthy = healthy

    def _create(self, client_script: str | None) -> None:
        pass

    def _state(self) -> JobState:
        return JobState({"hosts": this_host()})

    def can_run(self, spec: JobTrait) -> bool:
        return self._healthy

    def _kill(self) -> None:
        pass


def rows(state: JobState, sql: str, at_least: int = 1) -> list[dict]:
    """The rows of `sql` once there are `at_least` of them (telemetry arrives within ~0.5 s)."""
    return wait_until(lambda: (lambda r: r if len(r) >= at_least else None)(
        state.query_engine_client.query(sql)["rows"]), f"{at_least} rows of {sql}")


def test_config_is_checked_and_what_has_no_counterpart_says_so() -> None:
    with pytest.raises(TypeError, match="retention_secs must be an int"):
        TelemetryConfig(retention_secs="1h")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dashboard_port must be 0-65535"):
        TelemetryConfig(dashboard_port=70000)
    with pytest.raises(ValueError, match="snapshot_interval_secs must be >= 0"):
        TelemetryConfig(snapshot_interval_secs=-1)
    with pytest.warns(UserWarning, match="no web dashboard"):
        TelemetryConfig(include_dashboard=True)
    with pytest.warns(UserWarning, match="no periodic snapshot tables"):
        TelemetryConfig(snapshot_interval_secs=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TelemetryConfig()  # the defaults warn of nothing
    with pytest.raises(TypeError, match="not both"):
        ThisHostJob().enable_telemetry(TelemetryConfig(), retention_secs=1)
    with pytest.raises(TypeError, match="expects a TelemetryConfig"):
        ThisHostJob().enable_telemetry({"retention_secs": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="admin_addr must be"):
        MeshAdminConfig(admin_addr="")
    job = ThisHostJob()
    assert job.enable_telemetry(retention_secs=5) is job
    assert job._telemetry == TelemetryConfig(retention_secs=5)


def test_state_without_telemetry_has_no_urls() -> None:
    state = ThisHostJob().state(cached_path=None)
    assert (state.query_engine, state.query_engine_client, state.telemetry_url,
            state.admin_url, state.dashboard_url) == (None, None, None, None, None)


def test_admin_url_is_the_admin_api_and_a_wrong_address_is_refused() -> None:
    state = ThisHostJob().enable_admin().state(cached_path=None)
    assert state.admin_url is not None and state.query_engine_client is None
    assert connect(state.admin_url.removeprefix("http://")).job()["state"] == "running"
    with pytest.raises(ValueError, match="listens on"):
        ThisHostJob().enable_admin(admin_addr="127.0.0.1:1").state(cached_path=None)


def test_query_client_needs_an_applied_healthy_job_with_telemetry() -> None:
    with pytest.raises(RuntimeError, match="not active"):
        ThisHostJob().enable_telemetry().telemetry_query_client()
    job = ThisHostJob()
    job.apply()
    with pytest.raises(RuntimeError, match="no distributed telemetry configured"):
        job.telemetry_query_client()
    sick = ThisHostJob(healthy=False).enable_telemetry()
    sick.apply()
    with pytest.raises(RuntimeError, match="no longer running or healthy"):
        sick.telemetry_query_client()
    job = ThisHostJob().enable_telemetry()
    job.apply()
    assert job.telemetry_query_client().query("SELECT 1 AS one")["rows"] == [{"one": 1}]


def test_monarch_tables_over_our_store() -> None:
    state = ThisHostJob().enable_telemetry(TelemetryConfig(retention_secs=0)).state(
        cached_path=None)
    procs = state.hosts.spawn_procs(per_host={"workers": 2}, name="tm_procs")
    pingers = procs.spawn("tm_pingers", Pinger)
    for i in range(3):
        pingers.ping.call(i).get()
    pingers.slice(workers=1).ping.call_one(7).get()

    (mesh,) = rows(state, "SELECT * FROM meshes WHERE given_name = 'tm_pingers'")
    assert mesh["class"] == "Python<Pinger>" and mesh["full_name"].startswith("tm_pingers-")
    assert json.loads(mesh["shape_json"]) == {"inner": {"labels": ["workers"], "sizes": [2]}}
    (proc_mesh,) = rows(state, f"SELECT * FROM meshes WHERE id = {mesh['parent_mesh_id']}")
    assert (proc_mesh["class"], proc_mesh["given_name"]) == ("Proc", "tm_procs")
    assert json.loads(mesh["parent_view_json"])["slice"] == {
        "offset": 0, "sizes": [2], "strides": [1]}

    actors = rows(state, "SELECT a.* FROM actors a JOIN meshes m ON a.mesh_id = m.id "
                         "WHERE m.given_name = 'tm_pingers' ORDER BY a.rank", 2)
    assert [a["rank"] for a in actors] == [0, 1]
    assert "tm_pingers{'workers': 1/2}" in actors[1]["display_name"]
    (root,) = rows(state, "SELECT id FROM actors WHERE display_name = '<root>'")

    handled = rows(state, "SELECT msg.* FROM messages msg JOIN actors a ON msg.to_actor_id = "
                          "a.id JOIN meshes m ON a.mesh_id = m.id WHERE m.given_name = "
                          "'tm_pingers' AND msg.endpoint = 'ping'", 7)
    assert len(handled) == 7 and {m["from_actor_id"] for m in handled} == {root["id"]}
    ids = ", ".join(str(m["id"]) for m in handled)
    events = rows(state, f"SELECT status, COUNT(*) AS n FROM message_status_events WHERE "
                         f"message_id IN ({ids}) GROUP BY status ORDER BY status", 3)
    assert {e["status"]: e["n"] for e in events} == {"queued": 7, "active": 7, "complete": 7}

    sent = rows(state, f"SELECT * FROM sent_messages WHERE actor_mesh_id = {mesh['id']} "
                       "ORDER BY timestamp_us", 4)
    assert [json.loads(s["view_json"])["labels"] for s in sent] == [["workers"]] * 3 + [[]]
    assert {s["sender_actor_id"] for s in sent} == {root["id"]}

    pingers.traced.call("tm-user-span").get()
    (user_span, _) = rows(state, "SELECT fields_json FROM spans WHERE name = "
                                 "'python_user_span' AND fields_json LIKE '%tm-user-span%'", 2)
    assert json.loads(user_span["fields_json"])["name"] == "tm-user-span"

    hook = monarch.actor.unhandled_fault_hook  # the session's fault log: put back after
    monarch.actor.unhandled_fault_hook = lambda failure: None
    try:
        pingers.slice(workers=0).fail.broadcast()
        first = actors[0]["id"]
        steps = rows(state, f"SELECT new_status, reason FROM actor_status_events WHERE "
                            f"actor_id = {first} ORDER BY timestamp_us", 5)
    finally:
        monarch.actor.unhandled_fault_hook = hook
    assert [s["new_status"] for s in steps][:5] == [
        "Created", "Initializing", "Idle", "Stopping", "Failed"]
    assert "pinger gave up" in steps[4]["reason"]
    # the same steps in our own table (docs/QUERY.md), under our names
    ours = connect(state.admin_url.removeprefix("http://")).query(
        "SELECT event FROM actor_status_events WHERE mesh = 'tm_pingers' AND rank = 0 "
        "ORDER BY time_ns").column("event").to_pylist()
    assert ours[:5] == ["created", "initializing", "running", "stopping", "failed"]


def test_pyspy_dumps_are_checked_and_queryable() -> None:
    state = ThisHostJob().enable_telemetry().state(cached_path=None)
    client = state.query_engine_client
    with pytest.raises(AdminError, match="must be JSON"):
        client.store_pyspy_dump("bad", "proc[0]", "not json")
    with pytest.raises(AdminError, match="dump failed"):
        client.store_pyspy_dump("err", "proc[0]", json.dumps({"Err": "permission denied"}))
    dump = {"Ok": {"pid": 42, "binary": "python3", "capture_mode": "python_only",
                   "warnings": [], "stack_traces": [{
                       "pid": 42, "thread_id": 7, "thread_name": "MainThread",
                       "os_thread_id": 70, "active": True, "owns_gil": True,
                       "frames": [{"name": "inner", "filename": "a.py", "module": "a",
                                   "short_filename": "a.py", "line": 3, "is_entry": False,
                                   "locals": [{"name": "x", "addr": 1, "arg": True,
                                               "repr": "1"}]},
                                  {"name": "main", "filename": "a.py", "module": "a",
                                   "short_filename": "a.py", "line": 9, "is_entry": True}]}]}}
    assert client.store_pyspy_dump("tm-dump", "proc[3]", json.dumps(dump))["status"] == "ok"
    frames = client.query("SELECT name, line FROM pyspy_frames WHERE dump_id = 'tm-dump' "
                          "ORDER BY frame_depth")["rows"]
    assert frames == [{"name": "inner", "line": 3}, {"name": "main", "line": 9}]
    (local,) = client.query("SELECT name, repr FROM pyspy_local_variables WHERE dump_id = "
                            "'tm-dump'")["rows"]
    assert local == {"name": "x", "repr": "1"}
    with pytest.raises(AdminError, match="schema must be"):
        connect(state.admin_url.removeprefix("http://")).query("SELECT 1", schema="hive")
