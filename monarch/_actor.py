"""The Actor base class users subclass."""

from __future__ import annotations

import logging
from typing import Any


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
