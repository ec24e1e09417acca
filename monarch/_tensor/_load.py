"""The tensor engine's way in from a ProcMesh: loads its verbs (`_verbs`), then gives the
mesh's DeviceMesh. The top of the engine's import layers."""

from __future__ import annotations

from typing import Any

from . import _collectives, _dispatch  # noqa: F401 - fill the slots of `_verbs`
from ._mesh import DeviceMesh


def device_mesh_of(proc_mesh: Any) -> DeviceMesh:
    """The DeviceMesh of a ProcMesh, with the engine's verbs loaded."""
    return DeviceMesh.of(proc_mesh)
