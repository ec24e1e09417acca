"""The Actor base class users subclass."""

from __future__ import annotations

import logging
from typing import Any, Callable

# Builds what `Actor.options(...)` returns; registered by `monarch.service` (the public
# surface imports it), so the runtime never imports the service layer.
_options_factory: Callable[..., Any] | None = None


def set_options_factory(factory: Callable[..., Any]) -> None:
    """Registers the builder behind `Actor.options` (monarch.service does, on import)."""
    global _options_factory
    _options_factory = factory


class Actor:
    """Base class of actors: subclass it and decorate remotely callable methods with `@endpoint`.

    `__init__` runs in the actor's process before its first message. Optional hooks:
    `__supervise__(self, failure) -> bool` is called when a mesh this actor spawned fails (return
    True when handled, False to escalate to this actor's owner); `__cleanup__(self, exc)` runs
    when the actor stops (exc is the failure, or None).
    """

    @property
    def logger(self) -> logging.Logger:
        """A logger named after the actor's class; its records reach the controller."""
        return logging.getLogger(f"monarch.actor.{type(self).__qualname__}")

    def __supervise__(self, failure: Any) -> bool:
        return False

    @classmethod
    def options(cls, **options: Any) -> Any:
        """How to run this class as a service: `await Cls.options(procs=1,
        num_replicas=2).as_service(*args)` (see `monarch.service.ServiceOptions`)."""
        if _options_factory is None:
            raise RuntimeError("Actor.options needs monarch.service: import monarch.actor")
        return _options_factory(cls, **options)
