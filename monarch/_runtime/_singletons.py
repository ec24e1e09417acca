"""Named, job-wide singleton actors."""

from __future__ import annotations

from typing import Any, TypeVar

from . import _controller_calls as _services
from ._future import Future

T = TypeVar("T")


def get_or_spawn_controller(name: str, Class: type[T], *args: Any, **kwargs: Any) -> Future[Any]:
    """The job's one actor named `name`, spawned in the controller process on first request.

    Every process (controller or actor) asking for the same name gets the same actor mesh;
    later requests ignore `Class` and the arguments.
    """
    return _services.call("get_or_spawn", name, Class, args, kwargs)
