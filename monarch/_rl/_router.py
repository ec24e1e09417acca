"""The actor behind a service: owns the replica meshes, routes calls, replaces failed replicas.

One `ServiceRouter` (an async actor, spawned in the process that created the service) per
service. Every replica is a proc mesh of `procs` procs running one actor mesh of the user's
class; the router spawned them, so their failures come to its `__supervise__`.

Routing: a call goes to the healthy replica with the fewest calls outstanding (ties: the one
that has taken the fewest calls, so sequential calls alternate); a `session` sticks to the
replica it got first while that replica is healthy. A replica leaves the routing the moment its
failure is known (its proc died: `__supervise__`; or a call to it raised SupervisionError); the
calls it had in flight fail with SupervisionError and are sent once more to a healthy replica
(unless the endpoint is marked `no_retry`); a replacement mesh is spawned at once and joins the
routing when its actors have run `__init__`. Calls that find no healthy replica wait for one
(at most `wait_s`), never longer.

Invariant: every field is touched only on the router's loop thread (endpoints are concurrent
tasks on one loop, `__supervise__` runs there too), so nothing needs a lock.

Per-replica state and load are published as metrics of this process (`service_replica_state`,
`service_replica_outstanding`, `service_routed`, labelled service, router, replica, generation,
mesh; `service_retried`), which the admin topology, `monarch status` and `monarch top` show.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Hashable

from .._actors._actor import Actor
from .._runtime._context import context
from .._actors._endpoint import concurrent_endpoint
from .._runtime._errors import SupervisionError

STARTING, HEALTHY, FAILED, STOPPED = "starting", "healthy", "failed", "stopped"
STATE_CODES = {STARTING: 0, HEALTHY: 1, FAILED: 2, STOPPED: 3}
"""The value of the `service_replica_state` gauge for each state."""

MAX_START_FAILURES = 3
"""A replica whose replacement fails to start this many times in a row is left down."""


class ServiceUnavailableError(RuntimeError):
    """No replica of the service could take the call: all failed and none came back within the
    wait, or the service was shut down. Retry later, or check why the replicas fail
    (`monarch status` shows their failures)."""


@dataclasses.dataclass(frozen=True)
class ServiceSpec:
    """What a router needs to spawn replicas (built by `ServiceOptions.as_service`)."""

    cls: type
    args: tuple
    kwargs: dict
    name: str
    procs: int
    num_replicas: int
    no_retry: frozenset[str]
    host: Any
    wait_s: float


@dataclasses.dataclass
class Replica:
    """One replica: a proc mesh and the actor mesh on it (one generation of a replica slot)."""

    index: int
    generation: int
    name: str
    procs: Any = None
    actors: Any = None
    state: str = STARTING
    outstanding: int = 0
    routed: int = 0
    reason: str = ""

    @property
    def mesh_id(self) -> str:
        return self.actors._mesh_id if self.actors is not None else ""

    def info(self) -> dict[str, Any]:
        """The replica as a plain dict (what `Service.replicas()` returns)."""
        return {"replica": self.index, "generation": self.generation, "name": self.name,
                "mesh": self.mesh_id, "state": self.state, "outstanding": self.outstanding,
                "routed": self.routed, "reason": self.reason}


class ServiceRouter(Actor):
    """Routes calls to the replicas of one service (see the module docstring)."""

    def __init__(self, spec: ServiceSpec) -> None:
        self.spec = spec
        self.replicas: list[Replica] = []
        self.sessions: dict[Hashable, int] = {}
        self.start_failures = [0] * spec.num_replicas
        self.replacing: set[int] = set()
        self.tasks: set[asyncio.Task[None]] = set()  # replacements being started
        self.owned: dict[str, Replica] = {}  # actor and proc mesh ids of every generation
        self.closed = False
        self.started = False
        self._changed: asyncio.Event | None = None
        self._metrics = _Metrics(spec.name, context().actor_instance.actor_id)

    # -- endpoints ---------------------------------------------------------------------------
    @concurrent_endpoint
    async def start(self) -> list[dict[str, Any]]:
        """Spawns every replica; fails (and stops them all) if one cannot start."""
        self.replicas = [Replica(i, 0, self._mesh_name(i, 0)) for i in range(
            self.spec.num_replicas)]
        await asyncio.gather(*(self._start_replica(i, 0) for i in range(len(self.replicas))))
        broken = [r for r in self.replicas if r.state != HEALTHY]
        if broken:
            await self._stop_all()
            raise RuntimeError(f"service {self.spec.name}: replica {broken[0].index} did not "
                               f"start: {broken[0].reason}")
        self.started = True
        return [r.info() for r in self.replicas]

    @concurrent_endpoint
    async def route(self, method: str, args: tuple, kwargs: dict,
                    session: Hashable | None = None) -> tuple[str, Any]:
        """Calls `method` on one replica (retried once elsewhere if that replica fails)."""
        tries = 1 if method in self.spec.no_retry else 2
        for attempt in range(tries):
            try:
                replica = await self._acquire(session)
            except ServiceUnavailableError as exc:
                return "error", exc
            outcome = await self._invoke(replica, method, args, kwargs)
            if outcome[0] != "died":
                return outcome
            if attempt + 1 < tries:
                self._metrics.retried()
        return "error", outcome[1]

    @concurrent_endpoint
    async def fanout(self, method: str, args: tuple, kwargs: dict) -> tuple[str, Any]:
        """Calls `method` on every healthy replica; their answers in replica order (a replica
        that dies meanwhile leaves the routing and gives no answer)."""
        try:
            await self._acquire(None)
        except ServiceUnavailableError as exc:
            return "error", exc
        healthy = [r for r in self.replicas if r.state == HEALTHY]
        outcomes = await asyncio.gather(
            *(self._invoke(r, method, args, kwargs) for r in healthy))
        errors = [o for o in outcomes if o[0] == "error"]
        if errors:
            return errors[0]
        answers = [o[1] for o in outcomes if o[0] == "ok"]
        if not answers:
            return "error", ServiceUnavailableError(
                f"service {self.spec.name}: every replica failed during the fanout")
        return "ok", answers

    @concurrent_endpoint
    async def status(self) -> list[dict[str, Any]]:
        """Every replica slot's current replica, as dicts."""
        return [r.info() for r in self.replicas]

    @concurrent_endpoint
    async def shutdown(self) -> None:
        """Stops every replica; later calls raise ServiceUnavailableError."""
        self.closed = True
        self._notify()
        await asyncio.gather(*self.tasks, return_exceptions=True)  # replacements starting
        await self._stop_all()

    def __supervise__(self, failure: Any) -> bool:
        replica = self._replica_of(failure)
        if replica is None:
            return False  # not one of ours: escalate
        self._fail(replica, failure.report().strip().splitlines()[-1].strip())
        return True

    # -- routing -----------------------------------------------------------------------------
    async def _acquire(self, session: Hashable | None) -> Replica:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.spec.wait_s
        while True:
            if self.closed:
                raise ServiceUnavailableError(f"service {self.spec.name} was shut down")
            replica = self._choose(session)
            if replica is not None:
                return replica
            remaining = deadline - loop.time()
            if not self._coming_back() or remaining <= 0:
                raise ServiceUnavailableError(
                    f"service {self.spec.name}: no healthy replica"
                    + (f" within {self.spec.wait_s:g} s" if self._coming_back() else ""))
            try:
                await asyncio.wait_for(self._event().wait(), remaining)
            except asyncio.TimeoutError:
                pass

    def _choose(self, session: Hashable | None) -> Replica | None:
        healthy = [r for r in self.replicas if r.state == HEALTHY]
        if not healthy:
            return None
        if session is not None:
            index = self.sessions.get(session)
            if index is not None and self.replicas[index].state == HEALTHY:
                return self.replicas[index]
        chosen = min(healthy, key=lambda r: (r.outstanding, r.routed, r.index))
        if session is not None:
            self.sessions[session] = chosen.index
        return chosen

    def _coming_back(self) -> bool:
        return any(r.state == STARTING for r in self.replicas) or bool(self.replacing)

    async def _invoke(self, replica: Replica, method: str, args: tuple,
                      kwargs: dict) -> tuple[str, Any]:
        """("ok", value), ("error", exception raised by the endpoint) or ("died", error)."""
        endpoint = getattr(replica.actors, method)
        replica.outstanding += 1
        replica.routed += 1
        self._metrics.load(replica)
        try:
            if self.spec.procs == 1:
                value = await endpoint.call_one(*args, **kwargs)
            else:
                value = await endpoint.call(*args, **kwargs)
        except SupervisionError as exc:
            self._fail(replica, str(exc).strip().splitlines()[-1].strip())
            return "died", exc
        except Exception as exc:  # noqa: BLE001 - the endpoint's own error, for the caller
            return "error", exc
        finally:
            replica.outstanding -= 1
            self._metrics.load(replica)
        return "ok", value

    # -- replicas ----------------------------------------------------------------------------
    def _mesh_name(self, index: int, generation: int) -> str:
        return f"{self.spec.name}_r{index}" + (f"_g{generation}" if generation else "")

    async def _start_replica(self, index: int, generation: int) -> None:
        replica = Replica(index, generation, self._mesh_name(index, generation))
        self.replicas[index] = replica
        try:
            replica.procs = await asyncio.to_thread(
                self.spec.host.spawn_procs, {"procs": self.spec.procs})
            replica.actors = replica.procs.spawn(replica.name, self.spec.cls, *self.spec.args,
                                                 **self.spec.kwargs)
            self.owned[replica.mesh_id] = self.owned[replica.procs._procs] = replica
            self._metrics.state(replica)
            await replica.actors.initialized
        except Exception as exc:  # noqa: BLE001 - a replica that cannot start is a failure
            self._fail(replica, f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1]}"
                       if str(exc).strip() else type(exc).__name__)
            return
        if self.closed and replica.state == STARTING:  # shut down meanwhile: not wanted
            replica.state = STOPPED
            self._metrics.state(replica)
            await replica.procs.stop()
            return
        if replica.state == STARTING:
            replica.state = HEALTHY
            self.start_failures[index] = 0
            self._metrics.state(replica)
            self._notify()

    def _fail(self, replica: Replica, reason: str) -> None:
        """Takes a replica out of the routing (once) and starts its replacement."""
        if replica.state in (FAILED, STOPPED) or self.replicas[replica.index] is not replica:
            return
        started = replica.state == HEALTHY
        replica.state, replica.reason = FAILED, reason
        self._metrics.state(replica)
        self._notify()
        if replica.procs is not None:
            replica.procs.stop()  # its other procs, if any, still run
        if not started:
            self.start_failures[replica.index] += 1
        if self.closed or not self.started:
            return  # shut down, or still starting (`start` reports it)
        if self.start_failures[replica.index] < MAX_START_FAILURES:
            self._replace(replica)

    def _replace(self, replica: Replica) -> None:
        index = replica.index
        self.replacing.add(index)

        async def replace() -> None:
            try:
                await self._start_replica(index, replica.generation + 1)
            finally:
                self.replacing.discard(index)
                self._notify()

        task = asyncio.get_running_loop().create_task(replace())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _replica_of(self, failure: Any) -> Replica | None:
        """The replica (of any generation) whose actor or proc mesh failed."""
        return self.owned.get(failure.mesh) or self.owned.get(failure.mesh_name)

    async def _stop_all(self) -> None:
        stops = []
        for replica in self.replicas:
            if replica.procs is not None and replica.state != STOPPED:
                stops.append(replica.procs.stop())
            if replica.state != FAILED:
                replica.state = STOPPED
            self._metrics.state(replica)
        for stop in stops:
            try:
                await stop
            except Exception:  # noqa: BLE001 - a proc already gone is stopped
                pass

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        """Wakes every call waiting for a healthy replica."""
        if self._changed is not None:
            self._changed.set()
            self._changed = None


class _Metrics:
    """The service's per-replica gauges and counters in this process's telemetry."""

    def __init__(self, service: str, router: str) -> None:
        self.service = service
        self.router = router  # the router's actor id: tells apart services of one name
        self._table: Any = None

    def _metrics(self) -> Any:
        if self._table is None:
            from ..telemetry import process_recorder
            from ..telemetry._metrics import MetricSpec  # the spec type is not public

            table = process_recorder().metrics
            labels = ("service", "router", "replica", "generation", "mesh")
            table.declare(MetricSpec("service_replica_state", "gauge", labels,
                                     "Service replica state: 0 starting, 1 healthy, 2 failed, "
                                     "3 stopped"))
            table.declare(MetricSpec("service_replica_outstanding", "gauge", labels,
                                     "Calls in flight on a service replica"))
            table.declare(MetricSpec("service_routed", "counter", labels,
                                     "Calls sent to a service replica"))
            table.declare(MetricSpec("service_retried", "counter", ("service", "router"),
                                     "Routed calls retried after their replica failed"))
            self._table = table
        return self._table

    def state(self, replica: Replica) -> None:
        key = (self.service, self.router, replica.index, replica.generation, replica.mesh_id)
        table = self._metrics()
        table.set(("service_replica_state", *key), STATE_CODES[replica.state])
        table.set(("service_replica_outstanding", *key), replica.outstanding)
        table.set(("service_routed", *key), replica.routed)

    def load(self, replica: Replica) -> None:
        key = (self.service, self.router, replica.index, replica.generation, replica.mesh_id)
        table = self._metrics()
        table.set(("service_replica_outstanding", *key), replica.outstanding)
        table.set(("service_routed", *key), replica.routed)

    def retried(self) -> None:
        self._metrics().inc(("service_retried", self.service, self.router))
