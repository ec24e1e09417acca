"""How services show: the admin topology's `services`, `monarch status` lines, console notes.

Pure functions over metric points and topology dicts (no processes)."""

from __future__ import annotations

from monarch.cli._status import service_lines
from monarch.console._model import service_note
from monarch.telemetry._services import annotate, services
from monarch.telemetry import MetricPoint


def point(name: str, value: float, replica: int, generation: int, mesh: str,
          router: str = "gen_service-1[0]") -> MetricPoint:
    labels = {"service": "gen", "router": router, "replica": str(replica),
              "generation": str(generation), "mesh": mesh}
    return MetricPoint(name, "gauge", labels, value, 0, "controller")


POINTS = [
    point("service_replica_state", 2, 0, 0, "gen_r0-a"),  # failed, then replaced
    point("service_replica_state", 1, 0, 1, "gen_r0_g1-c"),
    point("service_replica_outstanding", 3, 0, 1, "gen_r0_g1-c"),
    point("service_routed", 7, 0, 1, "gen_r0_g1-c"),
    point("service_replica_state", 1, 1, 0, "gen_r1-b"),
    point("service_replica_state", 3, 0, 0, "other_r0-z", router="other_service-2[0]"),
    MetricPoint("service_retried", "counter", {"service": "gen", "router": "gen_service-1[0]"},
                2, 0, "controller"),
]


def test_services_group_replicas_by_router_newest_generation_current():
    found = services(POINTS)
    assert [s["router"] for s in found] == ["gen_service-1[0]", "other_service-2[0]"]
    gen = found[0]
    assert [(r["replica"], r["generation"], r["state"]) for r in gen["replicas"]] == \
        [(0, 1, "healthy"), (1, 0, "healthy")]
    assert [(r["mesh"], r["state"]) for r in gen["replaced"]] == [("gen_r0-a", "failed")]
    assert (gen["healthy"], gen["load"], gen["retried"], gen["state"]) == (2, 3, 2, "running")
    assert found[1]["state"] == "stopped"


def test_meshes_are_annotated_and_shown():
    meshes = [{"mesh": "gen_r0_g1-c", "name": "gen_r0_g1"}, {"mesh": "gen_r0-a", "name": "gen_r0"},
              {"mesh": "trainer-x", "name": "trainer"}]
    found = services(POINTS)
    annotate(meshes, found)
    assert meshes[0]["service"]["current"] and meshes[0]["service"]["outstanding"] == 3
    assert not meshes[1]["service"]["current"]
    assert "service" not in meshes[2]
    assert service_note(meshes[0]["service"]) == "replica 0 healthy, load 3"
    assert service_note(meshes[1]["service"]) == "replica 0 replaced"
    lines = service_lines(found[:1], meshes)
    assert lines[0].startswith("service gen  2/2 healthy  load 3  retried 2")
    assert "replica 0 gen_r0_g1  healthy  load 3  routed 7  (replaces gen_r0: failed)" in lines[1]
