"""The cast tree at one hop: where a cast range goes next, coalesced per next hop.

A hop serves the first index of its range and forwards the rest in at most `FANOUT` contiguous
ranges, each to the proc of its first index. Calls forwarded during one drain of the inbox are
sent to each next hop as one `Batch` (one zmq message, one decode there); a lone call as is.
"""

from __future__ import annotations

from typing import Any

from . import _clock
from .._wire._messages import Call, Seqs, call_or_batch
from .._wire._transport import PeerGone

FANOUT = 16
"""Children per hop of the cast tree."""


class Forwarder:
    """Forwarding state of one process (loop thread only)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self._plans: dict[tuple, list[tuple[int, int, str]]] = {}
        self.pending: dict[str, list[tuple[Call, list[Any]]]] = {}
        """Calls forwarded during the current drain (with their frames), by next hop."""

    def forward(self, msg: Call, frames: list[Any]) -> None:
        """Queues the children's share of a cast range (sent by `flush`)."""
        hlc = _clock.now()
        pending_by_hop = self.pending
        base, seqs, window = msg.lo, msg.seqs, Seqs.window
        for lo, hi, address in self._plan(msg):
            child = Call(msg.sender, msg.mesh, msg.method, msg.procs, msg.view, lo, hi,
                         window(seqs, lo - base, hi - base), msg.port, msg.trace, hlc,
                         msg.nframes)
            pending = pending_by_hop.get(address)
            if pending is None:
                pending_by_hop[address] = [(child, frames)]
            else:
                pending.append((child, frames))
                if len(pending) >= 256:
                    self.flush(address)

    def _plan(self, msg: Call) -> list[tuple[int, int, str]]:
        """The children of this hop for a cast range: (lo, hi, address) each (cached)."""
        key = (msg.view, msg.lo, msg.hi, msg.procs)
        plan = self._plans.get(key)
        if plan is None:
            view = self.runtime.view(msg.view)
            table = self.runtime.tables[msg.procs]
            plan = [(lo, hi, table[view.rank_at(lo)])
                    for lo, hi in view.chunks(msg.lo, msg.hi, FANOUT)]
            if len(self._plans) > 4096:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def flush(self, only: str | None = None) -> None:
        """Sends what was forwarded: one Call, or one Batch per next hop."""
        outbox = self.runtime.outbox
        for address in [only] if only is not None else list(self.pending):
            pending = self.pending.pop(address, None)
            if not pending:
                continue
            try:
                msg, frames = call_or_batch(pending)
                outbox.send(address, msg, frames, block=False)
            except PeerGone:
                pass  # its death is (or will be) known: the callers' sinks fail then
