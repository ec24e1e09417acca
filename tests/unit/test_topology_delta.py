"""Changed-since topologies: what a controller sends and how a client puts it back."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from monarch.telemetry import _topology_delta as delta


def actor(rank: int, messages: int = 0, state: str = "running") -> dict:
    return {"rank": rank, "proc": f"p{rank % 4}", "state": state, "messages": messages,
            "point": {"gpus": rank}, "running": [], "failure": None}


def mesh(mesh_id: str, n: int, messages: int = 0) -> dict:
    return {"mesh": mesh_id, "name": mesh_id, "class_name": "Echo",
            "extent": {"labels": ["gpus"], "sizes": [n]},
            "actors": [actor(r, messages) for r in range(n)]}


def topology(meshes: list[dict], messages: int = 0) -> dict:
    procs = [{"proc": f"p{i}", "pid": 100 + i, "counters": {"messages": messages}}
             for i in range(4)]
    return {"hosts": [{"id": "local", "hostname": "h", "procs": procs}], "meshes": meshes,
            "failures": [], "services": [], "stall_s": 10.0}


def served(versions: delta.Versions, topo: dict, since: dict | None) -> dict:
    """What a client gets back: the answer through JSON, put together with `since`."""
    answer = json.loads(json.dumps(versions.answer(copy.deepcopy(topo), since and
                                                   since["version"])))
    return delta.apply(answer, since) if "since" in answer else answer


def without_version(topo: dict) -> dict:
    return {k: v for k, v in topo.items() if k != "version"}


def test_an_unchanged_topology_travels_as_stubs_and_comes_back_whole():
    versions = delta.Versions()
    topo = topology([mesh("a", 64), mesh("b", 64)])
    first = served(versions, topo, None)
    answer = versions.answer(copy.deepcopy(topo), first["version"])
    assert answer["since"] == first["version"] and answer["version"] != first["version"]
    assert answer["meshes"] == [{"mesh": "a", "same": True}, {"mesh": "b", "same": True}]
    assert answer["hosts"] == [{"id": "local", "same": True}]
    assert len(json.dumps(answer)) < len(json.dumps(topo)) / 20
    again = delta.apply(json.loads(json.dumps(answer)), first)
    assert without_version(again) == topo
    assert again["meshes"][0] is first["meshes"][0]  # shared, not copied


def test_only_the_fields_that_changed_travel():
    versions = delta.Versions()
    topo = topology([mesh("a", 64), mesh("b", 64)])
    first = served(versions, topo, None)
    busy = copy.deepcopy(topo)
    busy["meshes"][1]["actors"][7]["messages"] = 5
    busy["meshes"][1]["actors"][9]["running"] = [{"method": "step", "running_s": 1.5}]
    busy["hosts"][0]["procs"][3]["counters"] = {"messages": 9}
    answer = versions.answer(copy.deepcopy(busy), first["version"])
    changed = answer["meshes"][1]["changed"]
    assert changed == [{"rank": 7, "messages": 5},
                       {"rank": 9, "running": [{"method": "step", "running_s": 1.5}]}]
    assert set(answer["meshes"][1]) == {"mesh", "changed"}  # its own keys did not change
    assert answer["hosts"][0]["changed"] == [{"proc": "p3", "counters": {"messages": 9}}]
    rebuilt = delta.apply(json.loads(json.dumps(answer)), first)
    assert without_version(rebuilt) == busy
    assert first["meshes"][1]["actors"][7]["messages"] == 0  # `since` itself is untouched
    assert rebuilt["meshes"][1]["actors"][0] is first["meshes"][1]["actors"][0]


def test_new_meshes_new_ranks_and_new_fields_come_whole():
    versions = delta.Versions()
    first = served(versions, topology([mesh("a", 4), mesh("b", 2)]), None)
    grown = topology([mesh("b", 3), mesh("c", 2)])  # a gone, b has a rank more, c new
    grown["meshes"][0]["actors"][0]["service"] = "router"
    answer = versions.answer(copy.deepcopy(grown), first["version"])
    assert answer["meshes"][0]["actors"] == grown["meshes"][0]["actors"]  # whole
    assert answer["meshes"][1] == grown["meshes"][1]
    assert without_version(delta.apply(answer, first)) == grown
    keys = topology([mesh("b", 3), mesh("c", 2)])
    keys["meshes"][1]["actors"][1]["service"] = "router"
    second = delta.apply(answer, first)
    answer = versions.answer(copy.deepcopy(keys), second["version"])
    assert answer["meshes"][1]["changed"] == [{**keys["meshes"][1]["actors"][1], "whole": True}]
    assert without_version(delta.apply(answer, second)) == keys


def test_a_mesh_sends_only_its_own_keys_that_changed():
    # a folded mesh (`AdminClient.topology(rows=...)`): its summary changes at every poll,
    # its 1,024 rank → proc pairs never
    versions = delta.Versions()
    folded = mesh("a", 2)
    folded["folded"] = {"h0": {"messages": 1}}
    folded["rank_procs"] = [[r, f"p{r % 4}"] for r in range(1024)]
    first = served(versions, topology([folded]), None)
    busier = copy.deepcopy(folded)
    busier["folded"]["h0"]["messages"] = 9
    answer = versions.answer(copy.deepcopy(topology([busier])), first["version"])
    assert answer["meshes"] == [{"mesh": "a", "folded": {"h0": {"messages": 9}}, "changed": []}]
    second = delta.apply(json.loads(json.dumps(answer)), first)
    assert without_version(second) == topology([busier])
    assert second["meshes"][0]["rank_procs"] is first["meshes"][0]["rank_procs"]
    shown = copy.deepcopy(busier)  # a key gone (here: the mesh unfolded): the mesh whole
    del shown["folded"], shown["rank_procs"]
    answer = versions.answer(copy.deepcopy(topology([shown])), second["version"])
    assert answer["meshes"] == [shown]
    assert without_version(delta.apply(answer, second)) == topology([shown])


def test_a_version_no_longer_kept_gets_the_whole_topology():
    versions = delta.Versions(keep=2)
    topo = topology([mesh("a", 4)])
    first = served(versions, topo, None)
    for _ in range(2):
        served(versions, topo, None)
    answer = versions.answer(copy.deepcopy(topo), first["version"])
    assert "since" not in answer and answer["meshes"] == topo["meshes"]
    assert "since" not in versions.answer(copy.deepcopy(topo), "elsewhere.1")
    stale = delta.Versions(keep_s=0.0)
    old = served(stale, topo, None)
    assert "since" not in stale.answer(copy.deepcopy(topo), old["version"])


def test_an_answer_that_does_not_fit_is_refused():
    versions = delta.Versions()
    topo = topology([mesh("a", 4)])
    first = served(versions, topo, None)
    second = served(versions, topo, None)
    answer = versions.answer(copy.deepcopy(topo), first["version"])
    with pytest.raises(delta.DeltaError, match="from version"):
        delta.apply(answer, second)
    changed = copy.deepcopy(first)
    changed["meshes"] = []
    with pytest.raises(delta.DeltaError, match="does not hold"):
        delta.apply(answer, changed)


counts = st.integers(0, 3)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(1, 6), counts), max_size=4),
       st.lists(st.tuples(st.sampled_from("abcd"), st.integers(1, 6), counts), max_size=4),
       counts, counts)
def test_any_two_topologies_round_trip(before, after, m1, m2):
    def build(spec, messages):
        seen, meshes = set(), []
        for mesh_id, n, calls in spec:
            if mesh_id not in seen:
                seen.add(mesh_id)
                meshes.append(mesh(mesh_id, n, calls))
                if calls % 2:  # a folded mesh's keys, in some meshes only
                    meshes[-1]["folded"] = {"h": {"messages": calls * messages}}
                if calls == 3:
                    meshes[-1]["service"] = {"name": "s", "outstanding": messages}
        return topology(meshes, messages)

    versions = delta.Versions()
    old, new = build(before, m1), build(after, m2)
    first = served(versions, old, None)
    assert without_version(served(versions, new, first)) == new
