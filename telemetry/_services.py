"""Services in the admin topology: replicas, their state and load, from the routers' metrics.

A service's router (`monarch._rl._router`) publishes per replica the gauges
`service_replica_state` (0 starting, 1 healthy, 2 failed, 3 stopped) and
`service_replica_outstanding`, and the counter `service_routed`, labelled (service, router,
replica, generation, mesh) — `router` is the router's actor id, so two services of one name
stay apart; `service_retried` per service. Pure functions over metric points (a live store's,
or a history's newest `metrics` snapshot: the admin topology and `monarch top --job ID` both).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._records import MetricPoint

STATE_NAMES = {0: "starting", 1: "healthy", 2: "failed", 3: "stopped"}
_FIELDS = {"service_replica_state": "state", "service_replica_outstanding": "outstanding",
           "service_routed": "routed"}
METRICS = frozenset(_FIELDS) | {"service_retried"}
"""The metrics `services` reads (a history reads only these)."""


def services(points: Iterable[MetricPoint]) -> list[dict[str, Any]]:
    """Each service (by router): its name, state (running / stopped), current replicas and
    the ones replaced.

    A replica is {replica, generation, mesh, state, outstanding, routed}; `replicas` holds the
    newest generation of each replica slot, `replaced` the older ones (failed, then replaced).
    """
    entries: dict[tuple[str, str, str], dict[tuple[int, int, str], dict[str, Any]]] = {}
    retried: dict[tuple[str, str, str], int] = {}
    for p in points:  # every metric of the job (thousands at 1,024 actors): the name first
        field = _FIELDS.get(p.name)
        if field is None and p.name != "service_retried":
            continue
        service = (p.source, p.labels.get("router", ""), p.labels.get("service", ""))
        if field is None:
            retried[service] = int(p.value)
            continue
        if not p.labels.get("mesh"):
            continue
        key = (int(p.labels.get("replica", 0)), int(p.labels.get("generation", 0)),
               p.labels["mesh"])
        entry = entries.setdefault(service, {}).setdefault(
            key, {"replica": key[0], "generation": key[1], "mesh": key[2], "state": "starting",
                  "outstanding": 0, "routed": 0})
        entry[field] = STATE_NAMES.get(int(p.value), "?") if field == "state" else int(p.value)
    return [_service(source, router, name, found, retried.get((source, router, name), 0))
            for (source, router, name), found in sorted(entries.items())]


def _service(source: str, router: str, name: str, found: dict[tuple[int, int, str], dict[str, Any]],
             retried: int) -> dict[str, Any]:
    current: dict[int, dict[str, Any]] = {}
    replaced = []
    for key in sorted(found):  # by replica, then generation: the newest generation wins
        previous = current.get(key[0])
        if previous is not None:
            replaced.append(previous)
        current[key[0]] = found[key]
    replicas = [current[i] for i in sorted(current)]
    stopped = all(r["state"] == "stopped" for r in replicas)
    return {"name": name, "router": router, "router_proc": source, "replicas": replicas,
            "replaced": replaced, "state": "stopped" if stopped else "running",
            "healthy": sum(r["state"] == "healthy" for r in replicas),
            "load": sum(r["outstanding"] for r in replicas), "retried": retried}


def annotate(meshes: list[dict[str, Any]], found: list[dict[str, Any]]) -> None:
    """Adds `service` (name, replica, generation, state, outstanding, routed, current) to the
    topology's meshes that are service replicas."""
    by_mesh: dict[str, dict[str, Any]] = {}
    for service in found:
        for replica, current in [(r, True) for r in service["replicas"]] + \
                [(r, False) for r in service["replaced"]]:
            by_mesh[replica["mesh"]] = {"name": service["name"], "current": current,
                                        **{k: replica[k] for k in (
                                            "replica", "generation", "state", "outstanding",
                                            "routed")}}
    for mesh in meshes:
        info = by_mesh.get(mesh["mesh"])
        if info is not None:
            mesh["service"] = info
