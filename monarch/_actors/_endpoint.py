"""Endpoints: the `@endpoint` decorators on actor classes, and the adverbs on meshes.

On an actor class, `@endpoint` marks a method as remotely callable (an `EndpointProperty`). On
an actor mesh, the same attribute is an `ActorEndpoint` with the adverbs `call`, `call_one`,
`choose`, `stream` and `broadcast`, each sending one message through the cast tree.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Coroutine, Generic, Iterator, ParamSpec, TypeVar

from .._runtime._future import Future
from . import _adverbs
from ._adverbs import Adverb

P = ParamSpec("P")
R = TypeVar("R")
A = TypeVar("A")


class EndpointProperty(Generic[P, R]):
    """What `@endpoint` puts on an actor class; calling it on `self` calls the method."""

    def __init__(self, fn: Callable[..., Any], *, propagate: Any = None,
                 explicit_response_port: bool = False, instrument: bool = True,
                 concurrent: bool = False) -> None:
        self._fn = fn
        self._propagate = propagate
        self._explicit_response_port = explicit_response_port
        self._instrument = instrument
        self._concurrent = concurrent
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return self._fn.__get__(instance, owner)

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name


def endpoint(method: Any = None, *, propagate: Any = None, explicit_response_port: bool = False,
             instrument: bool = True) -> Any:
    """Marks an actor method as an endpoint callable from other processes.

    Use as `@endpoint` or `@endpoint(explicit_response_port=True)`; with an explicit response
    port the method takes a `Port` as its first argument and answers through it.
    """
    def wrap(fn: Callable[..., Any]) -> EndpointProperty[Any, Any]:
        return EndpointProperty(fn, propagate=propagate, instrument=instrument,
                                explicit_response_port=explicit_response_port)

    return wrap(method) if method is not None else wrap


def concurrent_endpoint(method: Any = None, *, propagate: Any = None,
                        explicit_response_port: bool = False, instrument: bool = True) -> Any:
    """Like `endpoint`, for async methods whose handler runs as its own task.

    The actor takes its next message while such a handler awaits; handlers start in arrival
    order but may finish in any order. As in Monarch, the endpoint answers through a response
    port of its own (its `_explicit_response_port` is True): the method's result, or its
    `Exception` (an ActorError at the caller). With `explicit_response_port=True` the method
    takes the port and answers itself, and an exception it lets out fails the actor. Stopping
    the actor cancels its running handlers before `__cleanup__` runs.

    Raises:
        ValueError: on a sync method, or on top of `@endpoint` (pass its options here).
    """
    def wrap(fn: Callable[..., Any]) -> EndpointProperty[Any, Any]:
        if isinstance(fn, EndpointProperty):
            raise ValueError("concurrent_endpoint does not wrap @endpoint; pass endpoint options "
                             "to @concurrent_endpoint")
        if not inspect.iscoroutinefunction(fn):
            raise ValueError("concurrent_endpoint can only wrap async endpoints")
        return EndpointProperty(_answering(fn, explicit_response_port), propagate=propagate,
                                instrument=instrument, explicit_response_port=True,
                                concurrent=True)

    return wrap(method) if method is not None else wrap


def _answering(fn: Callable[..., Any], explicit: bool) -> Callable[..., Any]:
    """A concurrent endpoint's handler: the method, answering through the response port."""
    if explicit:
        return fn

    @functools.wraps(fn)
    async def answer(actor: Any, port: Any, *args: Any, **kwargs: Any) -> None:
        try:
            result = await fn(actor, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the caller's ActorError
            port._exception_with_traceback(exc)
        else:
            port.send(result)

    return answer


class Endpoint(Generic[P, R]):
    """The adverbs of a remote method. Every adverb sends one message, however many actors."""

    def _send(self, args: tuple, kwargs: dict, adverb: Adverb, port: Any = None) -> Any:
        raise NotImplementedError

    def call(self, *args: P.args, **kwargs: P.kwargs) -> "Future[Any]":
        """Calls every actor; the future gives a ValueMesh, or the first remote exception."""
        return self._send(args, kwargs, _adverbs.CALL)

    def call_one(self, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Calls the single actor of a size-1 mesh (ValueError otherwise)."""
        return self._send(args, kwargs, _adverbs.CALL_ONE)

    def choose(self, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Calls one actor of the mesh, picked at random."""
        return self._send(args, kwargs, _adverbs.CHOOSE)

    def stream(self, *args: P.args, **kwargs: P.kwargs) -> Iterator[Future[R]]:
        """Calls every actor; yields a future per answer, in arrival order."""
        return iter(self._send(args, kwargs, _adverbs.STREAM))

    def broadcast(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Sends to every actor without waiting; an exception there fails that actor."""
        self._send(args, kwargs, _adverbs.BROADCAST)

    def _send_to_port(self, args: tuple, kwargs: dict, port: Any, selection: str) -> None:
        self._send(args, kwargs, _adverbs.TO_PORT[selection], port)


class ActorEndpoint(Endpoint[P, R]):
    """An endpoint of an actor mesh (or of a slice of it)."""

    def __init__(self, mesh: Any, name: str) -> None:
        self._mesh = mesh
        self._name = name

    def _send(self, args: tuple, kwargs: dict, adverb: Adverb, port: Any = None) -> Any:
        return self._mesh._send(self._name, args, kwargs, adverb, port)

    def __repr__(self) -> str:
        return f"<ActorEndpoint {self._mesh._mesh_name}.{self._name}>"


class NotAnEndpoint:
    """A method of an actor class that is not decorated; wrap it with `as_endpoint`."""

    def __init__(self, mesh: Any, name: str) -> None:
        self._mesh = mesh
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{self._name} is not an endpoint: decorate it with @endpoint, or call it through "
            f"as_endpoint(mesh.{self._name})")

    def __repr__(self) -> str:
        return f"<NotAnEndpoint {self._name}>"


def as_endpoint(not_an_endpoint: Any, *, propagate: Any = None,
                explicit_response_port: bool = False) -> Any:
    """Turns a method of an actor mesh that is not an endpoint into one.

    `as_endpoint(mesh.plain_method).call_one(x)` runs `plain_method` on the actor as if it had
    been decorated with `@endpoint`.
    """
    if not isinstance(not_an_endpoint, NotAnEndpoint):
        raise ValueError("as_endpoint takes a method of an actor mesh that is not an endpoint")
    return ActorEndpoint(not_an_endpoint._mesh, not_an_endpoint._name)


def send(endpoint: Endpoint[P, R], args: tuple, kwargs: dict, port: Any = None,
         selection: str = "all") -> None:
    """Sends a message to the endpoint's actors; each answer goes to `port` if one is given.

    `selection` is "all" (every actor of the mesh) or "choose" (one at random).
    """
    if selection not in ("all", "choose"):
        raise ValueError(f"selection must be 'all' or 'choose', not {selection!r}")
    if port is None:
        if selection == "choose":
            endpoint.choose(*args, **kwargs)
        else:
            endpoint.broadcast(*args, **kwargs)
        return
    endpoint._send_to_port(args, kwargs, port, selection)


class Accumulator(Generic[P, R, A]):
    """Folds the answers of every actor of an endpoint into one value.

    `Accumulator(ep, identity, combine).accumulate(*args)` calls `ep.stream(*args)` at once
    and returns a future of `combine(...combine(combine(identity, r0), r1)..., rN)` over the
    answers, folded left to right in the order the stream yields them. The fold runs once,
    when the future is first observed; the first error (an answer's or `combine`'s) ends it
    and is what the future raises.
    """

    def __init__(self, endpoint: Endpoint[P, R], identity: A,
                 combine: Callable[[A, R], A]) -> None:
        self._endpoint = endpoint
        self._identity = identity
        self._combine = combine

    def accumulate(self, *args: P.args, **kwargs: P.kwargs) -> Future[A]:
        """Calls every actor and folds the answers (see the class docstring)."""
        answers = self._endpoint.stream(*args, **kwargs)

        async def fold() -> A:
            acc = self._identity
            for answer in answers:
                acc = self._combine(acc, await answer)
            return acc

        return Future._from_coro(fold())


def returns_future(function: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Future[R]]:
    """Makes an async function return a monarch Future (usable with `.get()` or `await`)."""
    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Future[R]:
        return Future._from_coro(function(*args, **kwargs))

    return wrapper


def endpoint_table(cls: type) -> tuple[dict[str, EndpointProperty[Any, Any]], list[str]]:
    """The endpoints of an actor class, and its other public methods (for as_endpoint)."""
    endpoints: dict[str, EndpointProperty[Any, Any]] = {}
    methods: list[str] = []
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, EndpointProperty):
                endpoints[name] = value
            elif callable(value) and not name.startswith("_"):
                methods.append(name)
                endpoints.pop(name, None)
    return endpoints, [m for m in methods if m not in endpoints]


def check_sync_async(cls: type) -> bool:
    """True for an async actor, False for a sync one; ValueError (Monarch's texts) for a class
    whose endpoints or hooks do not agree on the kind.

    An actor is sync when it has at least one endpoint and every endpoint is a plain `def`;
    otherwise (async endpoints, or none at all) it is async. A sync actor's `__cleanup__`,
    `__supervise__` and `_handle_undeliverable_message` must be plain `def`s (its thread would
    have no loop to await them on); an async actor's `__cleanup__` must be `async def`.
    """
    endpoints, _ = endpoint_table(cls)
    sync = [n for n, e in endpoints.items() if not e.is_async]
    async_ = [n for n, e in endpoints.items() if e.is_async]
    why = "Synchronous endpoints cannot be mixed with async endpoints because they can cause " \
          "the asyncio loop to deadlock if they wait."
    if sync and async_:
        raise ValueError(f"{cls} mixes both async and sync endpoints.{why}sync: {sync} "
                         f"async: {async_}")
    cleanup = _override(cls, "__cleanup__")
    if sync and cleanup is not None and inspect.iscoroutinefunction(cleanup):
        raise ValueError(f"{cls} has sync endpoints, but an async __cleanup__. Make sure "
                         f"__cleanup__ is also synchronous.{why}sync: {sync}")
    if async_ and cleanup is not None and not inspect.iscoroutinefunction(cleanup):
        raise ValueError(f"{cls} has async endpoints, but a synchronous __cleanup__. Make sure "
                         f"__cleanup__ is also async.{why}async: {async_}")
    for hook in ("__supervise__", "_handle_undeliverable_message"):
        method = _override(cls, hook)
        if sync and method is not None and inspect.iscoroutinefunction(method):
            raise ValueError(f"{cls} has sync endpoints, but an async {hook}. Make sure {hook} "
                             f"is also synchronous. sync: {sync}")
    return not sync


def _override(cls: type, name: str) -> Any:
    """The class's own `name` method, None when only the Actor base class defines it."""
    from ._actor import Actor

    method = getattr(cls, name, None)
    return None if method is None or method is getattr(Actor, name, None) else method
