"""Recipients: where one cast goes, as one value (`ProcessRuntime.cast`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .._geometry._view import View


@dataclass(frozen=True, slots=True)
class Recipients:
    """The actors of mesh `mesh` ("@<procs>" for the procs' own system agents) at the ranks of
    `view` over proc mesh `procs`: `ranks` are their base ranks, `table` the addresses of the
    procs by base rank. `whole`: every actor of the mesh (one sequence number serves them all).
    An actor mesh keeps its own; a system call makes one."""

    mesh: str
    procs: str
    table: Sequence[str]
    view: View
    ranks: Sequence[int]
    whole: bool = False
    wire: tuple = field(init=False, compare=False)
    """`view` as the Call carries it (made once)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "wire", self.view.to_wire())

    @property
    def first_hop(self) -> str:
        """The address the call is sent to: the first rank's proc, the root of the cast tree."""
        return self.table[self.ranks[0]]


def procs_of(procs: str, table: Sequence[str], view: View,
             ranks: Sequence[int]) -> Recipients:
    """The system agents of the procs of `view` over proc mesh `procs`."""
    return Recipients("@" + procs, procs, table, view, ranks)
