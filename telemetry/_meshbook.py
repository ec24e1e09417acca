"""What the controller records of the job's shape, and dumps a user stores for SQL.

`MeshBook` keeps a `MeshEvent` for each mesh the job spawned (host, proc and actor meshes,
with their parents and the region of the parent they cover) and the py-spy dumps stored with
`QueryEngineClient.store_pyspy_dump`; Monarch's `meshes`, `actors` and `pyspy_*` tables
(`telemetry._monarch`) are made from them. Both are bounded by count. Thread-safe.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from typing import Any, ClassVar

MAX_MESHES = 100_000
"""Mesh records kept (a job that spawns meshes for days keeps the newest)."""
MAX_PYSPY_DUMPS = 256
"""py-spy dumps kept (each may be a few hundred KiB of JSON)."""


@dataclasses.dataclass(frozen=True, slots=True)
class MeshEvent:
    """A mesh of the job came to be (recorded by the controller, which sees every spawn).

    Attributes:
        time_ns: when it was spawned.
        mesh: its id (``<name>-<suffix>``).
        kind: ``host``, ``proc`` or ``actor``.
        name: the name it was given.
        class_name: the actor class (actor meshes), else "".
        labels, sizes: its extent.
        parent: the mesh it was spawned on (a proc mesh's host mesh, an actor mesh's proc
            mesh), or "".
        parent_view: the region of the parent it covers: (labels, offset, sizes, strides) in
            the parent's ranks, or None.
        actors: actor meshes: (rank, proc, label) of each actor; proc meshes: (rank, proc);
            host meshes: (rank, host).
    """

    time_ns: int
    mesh: str
    kind: str
    name: str
    class_name: str
    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    parent: str = ""
    parent_view: tuple[tuple[str, ...], int, tuple[int, ...], tuple[int, ...]] | None = None
    actors: tuple[tuple[Any, ...], ...] = ()

    KIND: ClassVar[str] = "mesh"


class MeshBook:
    """The meshes the job spawned (oldest first) and the py-spy dumps stored."""

    def __init__(self, max_meshes: int = MAX_MESHES, max_dumps: int = MAX_PYSPY_DUMPS) -> None:
        self._lock = threading.Lock()
        self._meshes: dict[str, MeshEvent] = {}
        self._max_meshes = max_meshes
        self._dumps: deque[tuple[int, str, str, str]] = deque(maxlen=max_dumps)

    def add_mesh(self, event: MeshEvent) -> None:
        """Records a mesh (the first word of it counts); past the bound the oldest go."""
        with self._lock:
            if event.mesh in self._meshes:
                return
            self._meshes[event.mesh] = event
            if len(self._meshes) > self._max_meshes:
                del self._meshes[next(iter(self._meshes))]

    def meshes(self) -> list[MeshEvent]:
        """The meshes recorded, oldest first."""
        with self._lock:
            return list(self._meshes.values())

    def add_pyspy_dump(self, dump_id: str, proc_ref: str, dump_json: str,
                       time_ns: int | None = None) -> None:
        """Keeps a py-spy dump: its JSON as py-spy (or Monarch's `{"Ok": ...}`) writes it."""
        with self._lock:
            self._dumps.append((time.time_ns() if time_ns is None else time_ns, dump_id,
                                proc_ref, dump_json))

    def pyspy_dumps(self) -> list[tuple[int, str, str, str]]:
        """(time_ns, dump id, proc ref, JSON) of the dumps kept, oldest first."""
        with self._lock:
            return list(self._dumps)
