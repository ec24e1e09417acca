"""Services: replicas of an actor behind one handle, as torchforge has them for RL.

    generators = await Generator.options(procs=1, num_replicas=2).as_service(model_cfg)
    text = await generators.generate.route(prompt)              # one replica, least loaded
    text = await generators.generate.route(prompt, session=7)   # sticky: same replica for 7
    await generators.update_weights.fanout(version)             # every replica, their answers
    await generators.shutdown()

`as_service` spawns `num_replicas` replicas, each a proc mesh of `procs` procs with one actor
of the class on each, and a router actor (in the calling process) that owns them. `route`
sends a call to the healthy replica with the fewest calls outstanding (`call_one` is the same);
a `session=` key keeps a caller on one replica while it is healthy. A replica that fails (its
process dies) leaves the routing at once, the routed calls it had in flight are sent once more
to a healthy replica (mark an endpoint `@no_retry` to get the SupervisionError instead), and a
replacement is spawned and joins when it has run `__init__`. With `procs > 1`, a replica's
answer is the ValueMesh of its actors' answers.

Every method returns a monarch `Future` (use `await` or `.get()`). A service handle is plain
data: pass it to other actors, which route through the same router. Replica state and load are
visible in `monarch status`, the admin topology and `monarch top`.
"""

from __future__ import annotations

from typing import Any, Generic, Hashable, TypeVar

from ._actors import _actor
from ._runtime import _context
from ._controller import _start as _jobstart  # noqa: F401 - _jobstart: a job starts on use
from ._actors._endpoint import EndpointProperty, endpoint_table
from ._runtime._future import Future, chained
from ._rl._router import ServiceRouter, ServiceSpec, ServiceUnavailableError

A = TypeVar("A", bound=_actor.Actor)

DEFAULT_WAIT_S = 60.0
"""How long a routed call waits for a healthy replica when none is (replacements starting)."""


def no_retry(endpoint: Any) -> Any:
    """Marks an endpoint whose routed calls are not retried when their replica fails.

    Put it above `@endpoint`: such a call raises the replica's SupervisionError instead of
    being sent again (for endpoints that must not run twice).
    """
    if not isinstance(endpoint, EndpointProperty):
        raise TypeError("@no_retry goes above @endpoint (it marks an endpoint)")
    endpoint._service_retry = False  # type: ignore[attr-defined]
    return endpoint


class ServiceOptions(Generic[A]):
    """What `Actor.options(...)` returns: how to run the class as a service."""

    def __init__(self, cls: type[A], *, procs: int = 1, num_replicas: int = 1,
                 name: str | None = None, wait_s: float = DEFAULT_WAIT_S) -> None:
        """
        Args:
            cls: the actor class.
            procs: processes per replica (one actor on each).
            num_replicas: replicas to keep running.
            name: the service's name (its meshes are `<name>_r<i>`); default the class name.
            wait_s: how long a call waits for a healthy replica while none is.
        """
        for label, value in (("procs", procs), ("num_replicas", num_replicas)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{label} must be a positive int, got {value!r}")
        if not wait_s > 0:
            raise ValueError(f"wait_s must be positive, got {wait_s!r}")
        self.cls = cls
        self.procs = procs
        self.num_replicas = num_replicas
        self.name = name or cls.__name__
        self.wait_s = float(wait_s)

    def as_service(self, *args: Any, **kwargs: Any) -> Future["Service[A]"]:
        """Spawns the replicas (`cls(*args, **kwargs)` on each proc) and their router.

        Returns:
            A future of the `Service`, settled once every replica has run `__init__`; it fails
            (and nothing stays running) if a replica cannot start.
        """
        endpoints, _ = endpoint_table(self.cls)
        spec = ServiceSpec(
            cls=self.cls, args=args, kwargs=kwargs, name=self.name, procs=self.procs,
            num_replicas=self.num_replicas,
            no_retry=frozenset(n for n, e in endpoints.items()
                               if getattr(e, "_service_retry", True) is False),
            host=_here().host_mesh, wait_s=self.wait_s)
        router = _here().spawn(f"{self.name}_service", ServiceRouter, spec)
        service: Service[A] = Service(router, self.name, frozenset(endpoints))
        return Future._from_coro(_started(router, service))


async def _started(router: Any, service: "Service[A]") -> "Service[A]":
    try:
        await router.start.call_one()
    except BaseException:
        await router.stop()
        raise
    return service


class Service(Generic[A]):
    """A handle on a running service: its endpoints are attributes with `route`, `call_one`
    and `fanout`."""

    def __init__(self, router: Any, name: str, endpoints: frozenset[str]) -> None:
        self._router = router
        self._name = name
        self._endpoints = endpoints

    @property
    def name(self) -> str:
        """The service's name."""
        return self._name

    def __getattr__(self, name: str) -> "ServiceEndpoint":
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._endpoints:
            raise AttributeError(f"service {self._name!r} has no endpoint {name!r}")
        return ServiceEndpoint(self._router, name)

    def replicas(self) -> Future[list[dict[str, Any]]]:
        """A future of each replica's state: replica, generation, name, mesh, state
        (starting / healthy / failed / stopped), outstanding, routed, reason."""
        return self._router.status.call_one()

    def shutdown(self) -> Future[None]:
        """Stops every replica and the router; later calls raise ServiceUnavailableError."""
        return Future._from_coro(_shutdown(self._router))

    def __repr__(self) -> str:
        return f"Service({self._name!r})"


async def _shutdown(router: Any) -> None:
    await router.shutdown.call_one()
    await router.stop()


class ServiceEndpoint:
    """An endpoint of a service: `route`/`call_one` (one replica) and `fanout` (all)."""

    def __init__(self, router: Any, method: str) -> None:
        self._router = router
        self._method = method

    def route(self, *args: Any, session: Hashable | None = None, **kwargs: Any) -> Future[Any]:
        """Calls one replica: the least loaded healthy one, or the one `session` stuck to.

        Raises (through the future) the endpoint's ActorError, ServiceUnavailableError when no
        replica can take it, or SupervisionError when its replica failed twice (or once, for
        a `@no_retry` endpoint).
        """
        return _unwrap(self._router.route.call_one(self._method, args, kwargs, session))

    call_one = route

    def fanout(self, *args: Any, **kwargs: Any) -> Future[list[Any]]:
        """Calls every healthy replica; a future of their answers, in replica order."""
        return _unwrap(self._router.fanout.call_one(self._method, args, kwargs))

    def __repr__(self) -> str:
        return f"<ServiceEndpoint {self._router._name}.{self._method}>"


def _unwrap(reply: Future[tuple[str, Any]]) -> Future[Any]:
    """The router answers ("ok", value) or ("error", exception): a future of the value (or
    of that exception), unpickled by its first consumer."""
    return chained(reply, _value)


def _value(answer: tuple[str, Any]) -> Any:
    kind, value = answer
    if kind != "ok":
        raise value
    return value


def _here() -> Any:
    """The ProcMesh of the calling process (where the router runs)."""
    return _context.context().actor_instance.proc


_actor.set_options_factory(ServiceOptions)

__all__ = ["Service", "ServiceEndpoint", "ServiceOptions", "ServiceUnavailableError",
           "no_retry"]
