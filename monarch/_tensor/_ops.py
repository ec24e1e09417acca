"""The tensor engine's protocol: the ops the controller casts to workers, and their failures.

A batch is `(view, ops)`: `view` is the wire form of the mesh the ops run on (`View.to_wire()`),
`ops` a list of tuples whose first item is the kind and whose second is the op's sequence number
(for error reports) and third its stream name. Remote tensors travel as `Ref(id)`; every id is
unique in its engine and names one tensor in each worker of the mesh.

    (OP, seq, stream, name, args, kwargs, outs, mutated)     aten op `name` ("aten.add.Tensor")
    (CALL, seq, stream, function, args, kwargs, outs, mutated)   a `monarch.remote` function
    (CONST, seq, stream, tensor, out)                        a value shipped from the controller
    (DELETE, 0, stream, refs)                                refs the controller dropped
    (RANK, seq, stream, out, dims)                           this worker's coordinate along dims
    (REDUCE, seq, stream, src, out, dims, reduction, scatter, inplace, spec)
    (MOVE, seq, stream, src, out, src_view, dst_view, spec)  to_mesh (cast to the whole engine)
    (BORROW, seq, stream, step, borrow_id, src, out)         a step of a stream borrow

`outs` lists the refs of the tensor leaves of the result in flattening order; `mutated` the refs
an op writes in place (poisoned with its failure). `spec` is `(shape, dtype, device)`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

OP, CALL, CONST, DELETE, RANK, REDUCE, MOVE, BORROW = range(8)

# Steps of a borrow (see monarch._tensor._stream): made on the origin stream, first used and last
# used on the borrowing stream, dropped on the origin stream (which waits for the last use).
CREATE, FIRST_USE, LAST_USE, DROP = range(4)

MAIN_STREAM = "main"


class Ref:
    """A remote tensor in the arguments of an op: its id in the workers' tables."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:
        self.id = id

    def __reduce__(self) -> Any:
        return Ref, (self.id,)

    def __repr__(self) -> str:
        return f"Ref({self.id})"


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    """What a worker keeps in place of a tensor whose op failed (and of everything computed
    from it): the failing op's sequence number, the worker's rank and the formatted traceback."""

    seq: int
    rank: int
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Placeholder:
    """A tensor in the result of a probed remote function, described by its metadata: the
    descriptor of monarch._tensor._meta (SAME/VIEW/NEW with input indices and metadata)."""

    describe: tuple
