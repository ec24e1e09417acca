"""Streams: sequences of ops that run beside each other on every worker.

Each worker runs each stream's ops in order on a thread of its own (the main stream on the
actor's thread), so communication on one stream overlaps computation on another. A tensor
belongs to the stream that made it; another stream uses it through a borrow, as in Monarch:

    t2, borrow = other.borrow(t)          # t2: t's storage, usable on `other`
    with other.activate():
        r = t2.reduce("dp")               # runs on `other` once t is ready on t's stream
    borrow.drop()                         # t's stream waits for other's last use of t2

While borrowed, `t` may be read but not written (or, with `mutable=True`, neither read nor
written) on its own stream; the checks happen in the controller, before anything is sent.
"""

from __future__ import annotations

import contextlib
import itertools
import traceback
import warnings
from typing import TYPE_CHECKING, Any, Iterator

from ._ops import BORROW, CREATE, DROP, FIRST_USE, LAST_USE, MAIN_STREAM

if TYPE_CHECKING:
    from ._proxy import StorageAliases, Tensor

_ids = itertools.count(1)


class Stream:
    """A named stream of ops (the default one is "main"); `activate()` makes ops made in its
    block run on it; `borrow(t)` lends it a tensor of another stream."""

    def __init__(self, name: str, _default: bool = False) -> None:
        self.name = name
        self.default = _default
        self._wire = MAIN_STREAM if _default else f"{name}#{next(_ids)}"

    def activate(self) -> "_StreamActivation":
        """Makes this the active stream until the returned context exits (`with` or not)."""
        return _StreamActivation(self)

    def borrow(self, t: "Tensor", mutable: bool = False) -> tuple["Tensor", "Borrow"]:
        """Lends `t` (a tensor of another stream) to this stream: returns the borrowed tensor
        and the Borrow, which must be dropped (`borrow.drop()` or `with borrow:`)."""
        from ._proxy import StorageAliases, Tensor

        if not isinstance(t, Tensor):
            raise TypeError(f"only remote monarch tensors can be borrowed, not {type(t)}")
        if t.stream is self:
            raise ValueError(f"{t} is already on {self}")
        origin = t._aliases
        if mutable and "w" not in origin.access:
            raise RuntimeError("Cannot borrow this tensor mutably because it (or a view) is "
                               "already being borrowed non-mutably.")
        if "r" not in origin.access:
            raise RuntimeError("Cannot borrow this tensor: it is borrowed mutably elsewhere.")
        engine, view = t.mesh._engine, t.mesh._view
        lent = Tensor(t._meta, t.mesh, self, StorageAliases(borrowed_from=origin))
        borrow = Borrow(engine.new_ref(), t, lent._aliases, self, mutable)
        borrow._restore = origin.borrows[0]._restore if origin.borrows else origin.access
        seq = engine.next_seq()
        engine.record(view, (BORROW, seq, t.stream._wire, CREATE, borrow.id, t.ref, lent.ref))
        engine.record(view, (BORROW, seq, self._wire, FIRST_USE, borrow.id, t.ref, lent.ref))
        origin.access = "" if mutable else "r"
        lent._aliases.access = "rw" if mutable else "r"
        origin.borrows.append(borrow)
        return lent, borrow

    def __deepcopy__(self, memo: dict[int, Any]) -> "Stream":
        return self

    def __repr__(self) -> str:
        return f"<Stream({self.name!r}) at {hex(id(self))}>"

    def __str__(self) -> str:
        return f"stream {self.name!r}"


class Borrow:
    """A tensor lent to another stream; `drop()` (or leaving `with borrow:`) returns it."""

    def __init__(self, id: int, origin: "Tensor", lent: "StorageAliases", stream: Stream,
                 mutable: bool) -> None:
        self.id = id
        self._origin_stream = origin.stream
        self._origin = origin._aliases
        self._mesh = origin.mesh
        self._lent = lent
        self._stream = stream
        self._mutable = mutable
        self._dropped = False
        self._restore = "rw"  # the origin's access before its first live borrow
        self._made_at = "".join(traceback.format_stack(limit=8)[:-1])

    def __enter__(self) -> "Borrow":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.drop()

    def drop(self) -> None:
        """Frees the borrowed tensors; the origin stream waits for their last use."""
        if self._dropped:
            return
        self._dropped = True
        for t in list(self._lent.members or ()):
            if t.ref is not None:
                t._dropped_at = "the borrow was dropped"
                t._free()
        engine, view = self._mesh._engine, self._mesh._view
        seq = engine.next_seq()
        engine.record(view, (BORROW, seq, self._stream._wire, LAST_USE, self.id, 0, 0))
        engine.record(view, (BORROW, seq, self._origin_stream._wire, DROP, self.id, 0, 0))
        self._origin.borrows.remove(self)
        if not self._origin.borrows:
            self._origin.access = self._restore

    def __del__(self) -> None:
        if not getattr(self, "_dropped", True):
            warnings.warn("borrow.drop() must be called before a borrow is freed (it says when "
                          "the borrowed tensor returns to its stream); dropping it now. "
                          f"The borrow was made at:\n{self._made_at}", stacklevel=2)
            self._mesh._engine.defer(self.drop)


_main = Stream(MAIN_STREAM, _default=True)
_active = _main


def active_stream() -> Stream:
    """The stream ops are recorded on now."""
    return _active


def get_active_stream() -> Stream:
    """The active stream (Monarch's name)."""
    return _active


class _StreamActivation:
    def __init__(self, stream: Stream) -> None:
        self._cm = _activate(stream)
        self._cm.__enter__()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(None, None, None)


@contextlib.contextmanager
def _activate(stream: Stream) -> Iterator[None]:
    global _active
    old, _active = _active, stream
    try:
        yield
    finally:
        _active = old
