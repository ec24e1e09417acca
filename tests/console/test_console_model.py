"""The console's pure model: tree rows, targets, slices, rates, logs, keys (no terminal)."""

from __future__ import annotations

import pytest
from fakeclient import FakeClient, fold
from monarch.console import _keys as keys
from monarch.console import _logmodel as logs
from monarch.console import _model as m
from monarch.console._describe import describe
from monarch.console._resources import table
from monarch.console._format import fmt_bytes, fmt_duration, fmt_ms, fmt_rate, sparkline


def snapshot(**changes) -> m.Snapshot:
    client = FakeClient()
    for key, value in changes.items():
        setattr(client, key, value)
    return m.Snapshot(client.job(), client.topology(), client.sessions(), client.spans(),
                      client.transfers(), None, 1.0)


def rows_by_label(rows):
    return {r.label: r for r in rows}


def test_tree_rows_hosts_procs_meshes_actors():
    rows = m.build_rows(snapshot())
    assert [(r.depth, r.label) for r in rows] == [
        (0, "job job-1"), (1, "box"), (2, "controller"), (2, "procs p1"), (3, "trainers"),
        (4, "trainers[0]"), (4, "trainers[1]"), (4, "trainers[2]"), (4, "trainers[3]"),
        (2, "procs p2"), (3, "generators"), (4, "generators[0]"), (4, "generators[1]")]
    by = rows_by_label(rows)
    assert by["trainers[3]"].state == m.FAILED and by["trainers[3]"].note == "Killed(sig=9)"
    assert by["trainers"].state == m.DEGRADED and "1 failed" in by["trainers"].note
    assert by["trainers"].note.startswith("Trainer {gpus: 4}")
    assert by["job job-1"].state == m.DEGRADED and by["generators"].state == m.RUNNING
    assert by["trainers"].queue == 0 + 1 + 2 + 3 and by["trainers[2]"].p50_ms == 1.5
    assert by["trainers[0]"].note == "pid 1000"


def test_collapsing_hides_children_and_big_meshes_start_closed():
    rows = m.build_rows(snapshot(), {"mesh:local:m1": False, "procs:local:p2": False})
    labels = [r.label for r in rows]
    assert "trainers" in labels and "trainers[0]" not in labels
    assert "procs p2" in labels and "generators" not in labels
    assert not rows_by_label(rows)["trainers"].expanded
    assert m.default_expanded("mesh", 16) and not m.default_expanded("mesh", 17)
    assert m.default_expanded("procs", 100)


def test_failed_actors_are_found_with_the_rows_to_open_even_when_folded():
    folded = {"mesh:local:m1": False, "procs:local:p1": False}
    assert "trainers[3]" not in [r.label for r in m.build_rows(snapshot(), folded)]
    ((row, above),) = m.failed_actors(snapshot())
    assert row.label == "trainers[3]" and row.note == "Killed(sig=9)"
    assert above == ["job", "host:local", "procs:local:p1", "mesh:local:m1"]
    opened = dict(folded, **dict.fromkeys(above, True))
    assert "trainers[3]" in [r.label for r in m.build_rows(snapshot(), opened)]


def folded(rows=("m2",), sessions=()) -> m.Snapshot:
    """The fake job as a console gets it with only `rows`' actors asked (trainers folded)."""
    client = FakeClient()
    return m.Snapshot(client.job(), fold(client.topo, rows), list(sessions), [], None, None, 1.0)


def two_hosts(rows) -> m.Snapshot:
    """The fake job with trainers' procs 2 and 3 on a second host, as the console gets it
    asking `rows`."""
    client = FakeClient()
    (host,) = client.topo["hosts"]
    moved = [p for p in host["procs"] if p["proc"] in ("p1.2", "p1.3")]
    host["procs"] = [p for p in host["procs"] if p not in moved]
    client.topo["hosts"].append({"id": "h2", "hostname": "box2", "procs": moved})
    topo = client.topology() if rows is None else fold(client.topo, rows)
    return m.Snapshot(client.job(), topo, [], [], None, None, 1.0)


def test_a_mesh_open_on_one_host_asks_for_that_hosts_rows_only():
    """Issue 32: a mesh of a thousand ranks open on one host of 128 brings that host's
    rows, not the mesh's: the console asks `<mesh>@<host>` when the mesh is open on some of
    its hosts, the mesh when on all of them."""
    first = two_hosts(None)  # every actor, as before the first folded poll
    assert m.wanted_rows(first, {}) == {"m1", "m2"}  # small meshes open by default
    only_h2 = {"mesh:local:m1": False, "mesh:h2:m1": True}
    assert m.wanted_rows(first, only_h2) == {"m1@h2", "m2"}
    assert m.wanted_rows(first, {"mesh:local:m1": False, "mesh:h2:m1": False}) == {"m2"}
    snap = two_hosts(m.wanted_rows(first, only_h2))
    (trainers,) = [x for x in snap.topology["meshes"] if x["mesh"] == "m1"]
    assert trainers["open_hosts"] == ["h2"] and set(trainers["folded"]) == {"local", "h2"}
    assert m.wanted_rows(snap, only_h2) == {"m1@h2", "m2"}  # the same from a folded mesh
    labels = [r.label for r in m.build_rows(snap, only_h2)]
    assert labels.count("trainers") == 2  # a row on each host
    assert [x for x in labels if x.startswith("trainers[")] == ["trainers[2]", "trainers[3]"]
    both = {"mesh:local:m1": True, "mesh:h2:m1": True}
    assert m.wanted_rows(snap, both) == {"m1", "m2"}


def test_a_folded_mesh_row_shows_its_summary_and_its_failed_actor():
    closed = {"mesh:local:m1": False}
    whole = rows_by_label(m.build_rows(snapshot(), closed))["trainers"]
    snap = folded()
    row = rows_by_label(m.build_rows(snap, closed, rates={"mesh:local:m1": 7.0}))["trainers"]
    assert (row.state, row.queue, row.p50_ms, row.last_method, row.note) == (
        whole.state, whole.queue, whole.p50_ms, whole.last_method, whole.note)
    assert row.state == m.DEGRADED and row.expandable and not row.expanded
    assert row.rate == 7.0
    assert m.actor_counters(snap)["mesh:local:m1"] == 0 + 10 + 20 + 30
    # opened before the rows came: the actor it has (the failed one), until the next poll
    opened = [r.label for r in m.build_rows(snap, {"mesh:local:m1": True})]
    assert "trainers[3]" in opened and "trainers[0]" not in opened
    ((failed, above),) = m.failed_actors(snap)
    assert failed.label == "trainers[3]" and failed.note == "Killed(sig=9)"
    assert above == ["job", "host:local", "procs:local:p1", "mesh:local:m1"]


def test_a_folded_mesh_is_a_target_by_its_ranks_procs():
    snap = folded()
    row = rows_by_label(m.build_rows(snap))["trainers"]
    target = m.target_of(snap, row, "gpus=0:2")
    assert target.ranks == (0, 1) and target.procs == (("p1.0", 1000), ("p1.1", 1001))
    assert target == m.target_of(snapshot(), rows_by_label(m.build_rows(snapshot()))[
        "trainers"], "gpus=0:2")


def test_a_folded_mesh_counts_paused_and_failed_actors():
    session = {"id": 7, "actor_name": "trainers", "rank": 1, "actor_id": "m1[1]",
               "function": "train", "lineno": 3}
    snap = folded(sessions=[session])
    index = m.Index(snap)
    mesh = index.meshes["m1"]
    assert index.mesh_states(mesh) == {"running": 2, "paused": 1, "failed": 1}
    assert index.mesh_states(mesh, "local") == index.mesh_states(mesh)
    assert index.mesh_states(mesh, "elsewhere") == {}
    assert index.mesh_states(mesh) == m.Index(snapshot(session_list=[session])).mesh_states(
        m.Index(snapshot(session_list=[session])).meshes["m1"])
    assert m.mesh_size(mesh) == 4 and m.rank_procs(mesh)[2] == "p1.2"
    row = rows_by_label(m.build_rows(folded(sessions=[session])))["trainers"]
    assert row.state == m.DEGRADED  # failed and live ranks
    text = dict(describe(row, snap).fields)["actors"]
    assert text == "1 failed, 1 paused, 2 running"
    (item,) = [i for i in table("meshes", snap).items if i.ref == "m1"]
    assert item.cells[3:6] == ("4", m.FAILED, "1") and item.cells[7] == "6"


def test_a_folded_mesh_whose_name_holds_a_colon_counts_its_own_sessions():
    topo = FakeClient().topo
    for mesh in topo["meshes"]:  # ids `a:b` and `a`: one's actor keys start as the other's
        mesh["mesh"] = {"m1": "a:b", "m2": "a"}[mesh["mesh"]]
    session = {"id": 1, "actor_name": "trainers", "rank": 1, "actor_id": "a:b[1]"}
    snap = m.Snapshot(None, fold(topo, ()), [session])
    index = m.Index(snap)
    assert index.mesh_states(index.meshes["a:b"])[m.PAUSED] == 1
    assert m.PAUSED not in index.mesh_states(index.meshes["a"])


def test_the_rows_the_tree_shows_are_the_ones_asked():
    assert m.wanted_rows(snapshot(), {}) == {"m1", "m2"}  # small meshes open by default
    assert m.wanted_rows(snapshot(), {"mesh:local:m1": False}) == {"m2"}
    assert m.wanted_rows(folded(), {"mesh:local:m1": False}) == {"m2"}
    assert m.wanted_rows(folded(), {"mesh:local:m1": True}) == {"m1", "m2"}
    big = fold(FakeClient().topo, ())
    big["meshes"][0]["rank_procs"] = [[r, "p1.0"] for r in range(64)]  # 64 ranks: closed
    snap = m.Snapshot(None, big)
    assert m.wanted_rows(snap, {}) == {"m2"}
    assert m.wanted_rows(snap, {"mesh:local:m1": True}) == {"m1", "m2"}


def test_paused_sessions_show_on_their_actor():
    session = {"id": 7, "actor_name": "generators", "rank": 1, "actor_id": "m2[1]",
               "function": "generate", "lineno": 12}
    by = rows_by_label(m.build_rows(snapshot(session_list=[session])))
    assert by["generators[1]"].state == m.PAUSED
    assert by["generators[1]"].note == "pdb at generate:12"
    assert by["generators"].state == m.PAUSED
    # found by name and rank when the id is not an actor id
    index = m.Index(snapshot(session_list=[dict(session, actor_id="?")]))
    assert index.session_key(dict(session, actor_id="?")) == "actor:m2:1"


def test_rates_and_marks():
    rows = m.build_rows(snapshot(), rates={"actor:m1:0": 2.0, "actor:m1:1": 3.0},
                        marked={"actor:m1:1"})
    by = rows_by_label(rows)
    assert by["trainers"].rate == 5.0 and by["job job-1"].rate == 5.0
    assert by["trainers[1]"].marked and not by["trainers[0]"].marked


def test_rate_tracker():
    tracker = m.RateTracker(history=3)
    assert tracker.update(10.0, {"a": 100}) == {}
    assert tracker.update(12.0, {"a": 110}) == {"a": 5.0}
    tracker.update(13.0, {"a": 105})  # a counter that went back (restart): never negative
    assert tracker.rates["a"] == 0.0
    tracker.update(14.0, {"a": 115})
    tracker.update(15.0, {"a": 125})
    assert list(tracker.history["a"]) == [0.0, 10.0, 10.0]
    assert m.actor_counters(snapshot())["actor:m1:2"] == 20.0


@pytest.mark.parametrize("text,ranks", [
    ("", [0, 1, 2, 3, 4, 5, 6, 7]), ("*", list(range(8))), ("hosts=0", [0, 1, 2, 3]),
    ("hosts=0, gpus=0:4", [0, 1, 2, 3]), ("gpus=1", [1, 5]), ("hosts=1,gpus=(0,3)", [4, 7]),
    ("gpus=::2", [0, 2, 4, 6]), ("gpus=2:", [2, 3, 6, 7]), ("hosts=1, gpus=:2", [4, 5])])
def test_slices_select_ranks(text, ranks):
    assert m.select_ranks(text, ["hosts", "gpus"], [2, 4]) == ranks


@pytest.mark.parametrize("text,message", [
    ("gpu=0", "unknown dimension 'gpu'"), ("gpus=4", "out of range"), ("gpus", "label=value"),
    ("gpus=a", "not an index"), ("gpus=0:9", "gpus=0:9"), ("gpus=3:1", "selects no rank"),
    ("gpus=::0", "gpus=::0"), ("gpus=(1,9)", "out of range")])
def test_bad_slices_say_why(text, message):
    with pytest.raises(m.SliceError, match=message):
        m.select_ranks(text, ["hosts", "gpus"], [2, 4])


def test_targets_of_rows():
    snap = snapshot()
    by = rows_by_label(m.build_rows(snap))
    actor = m.target_of(snap, by["trainers[2]"])
    assert (actor.mesh, actor.selection, actor.ranks, actor.rank) == ("m1", "gpus=2", (2,), 2)
    assert actor.procs == (("p1.2", 1002),)
    assert actor.describe() == "trainers rank 2 (gpus=2)"  # one rank: singular
    mesh = m.target_of(snap, by["trainers"], "gpus=1:3")
    assert mesh.ranks == (1, 2) and mesh.rank is None and mesh.selection == "gpus=1:3"
    assert [pid for _, pid in mesh.procs] == [1001, 1002]
    assert mesh.describe() == "trainers ranks 1-2 (gpus=1:3)"
    assert m.target_of(snap, by["generators"], " all ").describe() == "generators ranks 0-1 (all)"
    procs = m.target_of(snap, by["procs p1"], "gpus=3")
    assert procs.kind == "procs" and procs.mesh == "p1" and procs.procs == (("p1.3", 1003),)
    for row in (by["job job-1"], by["box"], None):
        with pytest.raises(m.TargetError):
            m.target_of(snap, row)
    with pytest.raises(m.SliceError):
        m.target_of(snap, by["trainers"], "gpus=7")


def test_proc_mesh_extent_from_points():
    procs = [{"rank": r, "point": {"hosts": r // 2, "gpus": r % 2}} for r in range(4)]
    assert m.proc_mesh_extent(procs) == (["hosts", "gpus"], [2, 2])
    assert m.proc_mesh_extent([{"rank": 0}, {"rank": 1}]) == (["rank"], [2])
    assert m.point_selection({"hosts": 1, "gpus": 0}) == "hosts=1, gpus=0"


def log(hlc, text, mesh="trainers", rank=0, stream="stdout"):
    return {"hlc": hlc << 20, "time": hlc / 10, "stream": stream, "level": 20, "text": text,
            "mesh": mesh, "rank": rank, "proc": f"p.{rank}"}


def test_logs_fold_filter_and_order():
    buffer = logs.LogBuffer(limit=100)
    buffer.extend([log(1, "loss 1", rank=0), log(2, "syncing", rank=0), log(3, "syncing", rank=1)])
    buffer.extend([log(4, "syncing", rank=2), log(0, "first", mesh="gen", rank=0)])  # late
    assert [r["text"] for r in buffer.records][0] == "first" and buffer.version == 2
    lines = buffer.lines()
    assert [str(line) for line in lines] == [
        "[gen[0]] first", "[trainers[0]] loss 1",
        "[3 similar log lines] [trainers[0-2]] syncing"]
    assert [line.count for line in buffer.lines(fold=False)] == [1, 1, 1, 1, 1]
    assert [str(x) for x in buffer.lines(logs.LogFilter("LOSS"))] == ["[trainers[0]] loss 1"]
    assert [x.source for x in buffer.lines(logs.LogFilter(mesh="trainers", rank=1))] == [
        "trainers[1]"]
    assert buffer.lines(limit=1)[0].count == 3
    assert logs.LogFilter("x", "trainers", 2).describe() == "mesh=trainers rank=2 /x"
    assert logs.log_source([log(1, "a"), log(1, "a", mesh="gen", rank=3)]) == "2 meshes [ranks 0,3]"


def test_log_buffer_is_bounded():
    buffer = logs.LogBuffer(limit=10)
    buffer.extend(log(i, f"line {i}") for i in range(25))
    assert len(buffer.records) == 10 and buffer.records[0]["text"] == "line 15"
    assert buffer.received == 25


def test_filter_follows_the_selected_row():
    snap = snapshot()
    by = rows_by_label(m.build_rows(snap))
    assert logs.filter_for(by["trainers[2]"], snap, "x") == logs.LogFilter("x", "trainers", 2)
    assert logs.filter_for(by["generators"], snap) == logs.LogFilter("", "generators")
    assert logs.filter_for(by["box"], snap) == logs.LogFilter()


def test_keys_cover_the_issue_and_do_not_clash():
    actions = {k.action for k in keys.KEYS}
    assert {"kill", "stop", "attach", "break_next", "stack", "diagnose", "help", "quit",
            "search", "command", "grid", "save_screen", "focus_logs", "cursor_down",
            "cursor_up"} <= actions
    bound = [key for k in keys.KEYS for key in k.keys.split(",")]
    assert len(bound) == len(set(bound))
    in_grid = [key for k in keys.GRID_KEYS for key in k.keys.split(",")]
    assert len(in_grid) == len(set(in_grid))
    grid_actions = {k.action for k in keys.GRID_KEYS}
    assert {f"act('{a}')" for a in ("kill", "stop", "break_next", "attach", "stack",
                                     "stack_groups")} <= grid_actions  # every action key
    assert keys.key_for("kill").keys.split(",")[0] == "k"
    assert keys.display_key("slash") == "/" and keys.display_key("ctrl+k") == "^k"
    footer = [k.footer for k in keys.KEYS if k.footer]
    assert {"kill", "attach", "py-spy", "help", "quit"} <= set(footer)


def test_breadcrumb():
    rows = m.build_rows(snapshot())
    by = rows_by_label(rows)
    assert m.breadcrumb(rows, by["trainers[1]"]) == "job job-1 › box › procs p1 › trainers › " \
                                                      "trainers[1]"
    assert m.breadcrumb(rows, None) == "no selection"


def test_root_cause():
    assert m.root_cause({"reason": "a\nRuntimeError: boom"}) == "RuntimeError: boom"
    assert m.root_cause(None, "Traceback\n  x\nValueError: bad\n") == "ValueError: bad"
    assert m.root_cause(None) == "failed"


def test_descriptions():
    snap = snapshot()
    by = rows_by_label(m.build_rows(snap))
    failed = describe(by["trainers[3]"], snap)
    assert failed.failure == "Killed(sig=9)" and "signal 9" in failed.report
    assert ("pid", "1003") in failed.fields
    mesh = describe(by["trainers"], snap)
    assert mesh.table == (("rank", "root cause"), (("3", "Killed(sig=9)"),))
    assert ("actors", "1 failed, 3 running") in mesh.fields
    procs = describe(by["procs p1"], snap)
    assert procs.table[1][3][4] == "signal 9"
    job = describe(None, snap)
    assert ("health", "degraded") in job.fields and job.table[1] == (("trainers", "3",
                                                                      "Killed(sig=9)"),)
    assert describe(by["box"], snap).title == "host box"


def test_a_big_table_shows_its_first_rows_and_names_the_view_with_all():
    """A host or proc mesh of many procs: the pane renders `TABLE_SHOWN` rows and says where
    the rest are, instead of rendering a thousand rows at every refresh."""
    from rich.console import Console

    from monarch.console._describe import TABLE_SHOWN
    from monarch.console._detail import render

    snap = snapshot()
    host = snap.topology["hosts"][0]
    host["procs"] += [dict(host["procs"][1], proc=f"p9.{r}", procs="p9", rank=r, pid=9000 + r,
                           state="running", status=None) for r in range(40)]
    by = rows_by_label(m.build_rows(snap))
    big = describe(by["box"], snap)
    assert len(big.table[1]) == 47 and big.whole == ":procs"
    console = Console(width=120, record=True)
    console.print(render(big))
    text = console.export_text()
    assert f"… {47 - TABLE_SHOWN} more (all of them: :procs)" in text
    assert "p9.8 " in text and "p9.9 " not in text  # 7 procs first, then 9 of the 40
    small = describe(by["procs p1"], snap)
    console = Console(width=120, record=True)
    console.print(render(small))
    assert "more" not in console.export_text()


def test_formats():
    assert fmt_bytes(512) == "512 B" and fmt_bytes(3 << 20) == "3.0 MiB" and fmt_bytes(None) == "-"
    assert fmt_rate(2.25) == "2.2/s" and fmt_rate(250) == "250/s" and fmt_rate(None) == "-"
    assert fmt_ms(0.5) == "0.50ms" and fmt_ms(25) == "25ms" and fmt_ms(2500) == "2.5s"
    assert fmt_duration(65) == "1m05s" and fmt_duration(7300) == "2h01m"
    assert sparkline([0, 1, 2, 4]) == "▁▂▄█" and sparkline([0, 0]) == "▁▁"
    assert len(sparkline(range(100), 30)) == 30


def test_the_host_row_counts_procs_as_the_header_does() -> None:
    """The header said 7 procs where the host row said 8 (it counted the controller)."""
    from fakeclient import FakeClient, fold

    from monarch.console import _model as model

    client = FakeClient()
    snap = model.Snapshot(job=client.job(), topology=client.topology())
    (host,) = [r for r in model.build_rows(snap) if r.kind == "host"]
    procs = snap.job["counts"]["procs"] - 1  # the fake counts the controller in; the job not
    assert host.note == f"{procs} procs + controller"


def test_a_big_mesh_spread_over_many_hosts_starts_folded_on_each():
    """64 ranks, 4 per host over 16 hosts: folded by the mesh's size (64), not by the 4 a host
    holds (which showed 16 x 4 actor rows); a mesh of 16 ranks over 4 hosts stays open."""
    hosts, meshes = [], []
    for name, size, per_host in (("big", 64, 4), ("small", 16, 4)):
        meshes.append({"mesh": name, "name": name, "class_name": "W", "procs": "g",
                       "extent": {"labels": ["hosts", "gpus"],
                                  "sizes": [size // per_host, per_host]},
                       "actors": [{"rank": r, "proc": f"p{r}", "state": "running",
                                   "actor_id": f"{name}[{r}]", "point": {}, "running": []}
                                  for r in range(size)]})
    for h in range(16):
        hosts.append({"id": f"h{h}", "hostname": f"host{h}",
                      "procs": [{"proc": f"p{r}", "procs": "g", "rank": r, "pid": 10 + r,
                                 "state": "running", "meshes": ["big"]}
                                for r in range(4 * h, 4 * h + 4)]})
    topo = {"hosts": hosts, "meshes": meshes, "failures": [], "services": []}
    rows = m.build_rows(m.Snapshot({"job_id": "j"}, topo, [], [], None, None, 1.0))
    labels = [r.label for r in rows]
    assert labels.count("big") == 16 and not any(label.startswith("big[") for label in labels)
    assert labels.count("small") == 4 and sum(label.startswith("small[") for label in labels) == 16
    assert len(rows) == 1 + 16 * 3 + 4 + 16  # job, 16 x (host, procs, big), small on 4 hosts
