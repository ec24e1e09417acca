"""Answers a process's actors give together travel together: held per destination, sent as one
`Replies`.

A call to every actor of a mesh reaches each proc's actors (16 a proc at 1,024 actors over
64 procs) at once, and they answer one after the other, each with a message of its own: its
envelope, its sendmsg (which hands the GIL to another thread), and at the caller a read, a
decode and a dispatch each. `ProcessRuntime.reply` holds an answer while another actor of the
process has a message that its idle thread is about to take (it will answer soon too: the
runtime's `imminent` slots; the first answer held waits for those about to take one then, each
for one message, the answers held after it for the same: `ProcessRuntime.hold_answer`); what is
held leaves as one `Replies` per destination with the first of:

- an answer given while no such actor is left: it leaves with the held ones (`answer`);
- the last awaited actor taking its message, before its handler runs (`ProcessRuntime.took`),
  so a long handler never holds back the answers given before it;
- any other message the process sends to that destination (`Outbox.send_raw`: nothing a
  thread sends overtakes its held answers), the loop's next poll, the runtime's close;
- `MAX_HELD` answers held for one destination.

Whether to hold is decided under `lock`, as is the release of the last actor taking its
message: an answer is never held after that release looked (it would wait for that actor's
handler). Sends happen under `lock` too, so the answers of one thread to one port (a `Port`
sent to several times) leave in the order given, whichever thread releases them.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ._messages import Reply, reply_or_replies
from ._signals import holding

MAX_HELD = 64
"""Answers held for one destination before they leave without waiting for more."""

SMALL = 64 * 1024
"""Only an answer of one frame of at most this many bytes is held: a large one (out-of-band
buffers, a big value) leaves as it always did, after the ones held before it."""


class HeldAnswers:
    """The answers held per destination address (any thread)."""

    def __init__(self, send: Callable[[str, Any, list[Any], bool], None],
                 full: Callable[[str], bool] = lambda address: False) -> None:
        self._send = send
        """Sends one message now (the outbox's held calls first, these answers bypassed)."""
        self._full = full
        """True while the link to an address has a backlog: answers to it are not held, so
        a sender that would wait for it (back-pressure) still does."""
        self.by_address: dict[str, list[tuple[Reply, list[Any]]]] = {}
        """Destination address -> (Reply, frames) of each answer held for it, in order."""
        self.lock = threading.Lock()
        """Held while answers are held or sent. Sends under it never block (they join the
        link's queue, in order); a sender that may wait (`block`) does so without it."""

    def busy(self) -> bool:
        """True while answers are held or being sent: an answer must go through `answer`
        (it would overtake those of its own thread being sent by another)."""
        return bool(self.by_address) or self.lock.locked()

    def answer(self, address: str, reply: Reply, frames: list[Any], block: bool,
               hold: Callable[[], bool]) -> None:
        """Holds `reply` if it is small and `hold()` says so (asked under the lock), else
        sends it now: with the answers held for `address` before it, in one message, or
        after them."""
        small = len(frames) <= 1 and (not frames or len(frames[0]) <= SMALL)
        with self.lock:
            held = self.by_address.get(address)
            if small and hold() and (held is None or len(held) < MAX_HELD - 1) \
                    and not self._full(address):
                if held is None:
                    self.by_address[address] = [(reply, frames)]
                else:
                    held.append((reply, frames))
                return
            if held is not None:
                del self.by_address[address]
                if small:
                    held.append((reply, frames))
                msg, all_frames = reply_or_replies(held)
                self._send(address, msg, all_frames, False)
                if small:
                    return
        self._send(address, reply, frames, block)

    def release(self, address: str | None, block: bool) -> None:
        """Sends what is held for `address` (every destination for None). `block=False` is the
        loop's: it never waits for the lock (the thread holding it sends them); `block=True`
        waits for it, so what this thread sends next cannot overtake them."""
        holding(self.lock, block, lambda: self._release(address))

    def release_unless(self, busy: Callable[[], bool]) -> None:
        """Sends everything held unless `busy()` (asked under the lock, as `answer` asks)."""
        with self.lock:
            if self.by_address and not busy():
                self._release(None)

    def _release(self, address: str | None) -> None:
        """The caller holds the lock. Each destination's answers leave `by_address` before
        they are sent (`send` drops what a dead destination cannot take, as for one answer)."""
        by_address = self.by_address
        addresses = [address] if address is not None else list(by_address)
        for each in addresses:
            held = by_address.pop(each, None)
            if held:
                msg, frames = reply_or_replies(held)
                self._send(each, msg, frames, False)
