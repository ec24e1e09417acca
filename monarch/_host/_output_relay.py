"""The output relay: what the controller's local procs print reaches its stdout and stderr in
batches, and before the answers that follow it.

The local zygote, and so every local proc, writes its stdout and stderr into pipes (one per
stream, or one when the two are the same file: a terminal, `2>&1`, so their lines keep their
order) that a thread of the controller reads: it wakes at the first bytes, lets more gather
for `GATHER_S`, and writes all it read at once (whole lines, PIPE_BUF bytes a write at most).
Who reads the job's output (a terminal, a harness draining a pipe) then wakes a few times per
pass, not once per printed line, and a proc's print wakes nobody: at 1,024 actors printing a
line per call, procs writing straight into a pipe read by `cat` were preempted by the reader
~1,000 times a round; relayed, the round took ~20 ms less in one job's alternating blocks
(2026-12-07).

Order: a line a proc printed before it answered is out before the caller sees the answer, as
when procs wrote to the terminal themselves (what Monarch's do): `Future.get`, `await` and
`as_asyncio` drain the pipes (`drain`: a read that finds nothing costs ~1 us) before they hand
out an outcome (`_future.before_result`). The one exception is a reader that takes nothing for
`DRAIN_WAIT_S` (a paused terminal): a drain waits no longer, and the thread writes the rest
when it can. Each write of a proc is relayed whole and in
order (the tee writes a line with one write; a pipe never splits a write of up to PIPE_BUF
bytes), and the relay writes whole lines of at most PIPE_BUF bytes at a time, so a line the
controller prints meanwhile lands between two lines, never inside one.

Only a pipe, a socket or a terminal gets a relay: output to a file or /dev/null wakes nobody,
and the procs write it directly, as before. Procs on other hosts write to their worker's
output. `MONARCH_OUTPUT_RELAY=0` turns the relay off.
"""

from __future__ import annotations

import dataclasses
import os
import select
import stat
import threading
import time
from typing import Any

from .._wire._switch import switch

GATHER_S = 0.005
"""How long the relay lets output gather after its first byte before it writes."""
READ_BYTES = 1 << 20
"""The most one read takes; a read this full is followed by another at once."""
PIPE_BYTES = 1 << 20
"""The pipes' capacity (Linux's default is 64 KiB): room for a burst while output gathers."""
DRAIN_WAIT_S = 0.25
"""The longest a drain (`get`, `await`) waits for the output to go out; past it, order may
slip (a terminal or reader that takes nothing for this long)."""
CLOSE_WAIT_S = 1.0
"""How long `close` waits for the procs' last output (every writer gone: EOF)."""
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ, Linux
_PIPE_BUF = select.PIPE_BUF


@dataclasses.dataclass(eq=False)
class _Stream:
    read: int  # the pipe's read end (non-blocking)
    out: int  # a dup of the controller's stream at the start
    pending: bytearray = dataclasses.field(default_factory=bytearray)  # read, not written
    complete: bool = True  # the last read emptied the pipe: `pending` ends where a write did


class OutputRelay:
    """The pipes and the thread; `start` makes one (or None when none is needed)."""

    @classmethod
    def start(cls) -> OutputRelay | None:
        """A relay for this process's fds 1 and 2 where they are a pipe, a socket or a
        terminal, its thread running; None where neither is, or when MONARCH_OUTPUT_RELAY
        is off (a value that does not read raises ValueError)."""
        if not switch("MONARCH_OUTPUT_RELAY"):
            return None
        groups = _groups()
        return cls(groups) if groups else None

    def __init__(self, groups: list[tuple[int, ...]]) -> None:
        self.fds: dict[int, int] = {}
        """1 / 2 -> the write end the zygote gets as that stream (`handed_over` closes ours)."""
        self._streams: list[_Stream] = []
        for fds in groups:
            r, w = os.pipe2(os.O_CLOEXEC)
            try:
                import fcntl

                fcntl.fcntl(w, _F_SETPIPE_SZ, PIPE_BYTES)
            except OSError:
                pass  # a lower pipe-max-size: the default capacity
            os.set_blocking(r, False)
            self._streams.append(_Stream(r, os.dup(fds[0])))
            for fd in fds:
                self.fds[fd] = w
        self._lock = threading.Lock()  # one pass at a time (a drain waits DRAIN_WAIT_S at most)
        self._buffer = memoryview(bytearray(READ_BYTES))  # reads land here (no 1 MiB allocations)
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="monarch-output", daemon=True)
        self._thread.start()

    def handed_over(self) -> None:
        """Closes our copies of the write ends, once the zygote has its own: when it and
        every proc are gone, the pipes read EOF."""
        for w in set(self.fds.values()):
            os.close(w)
        self.fds = {}

    def drain(self) -> None:
        """Writes what the pipes hold now (before a future hands out an answer: the lines
        procs printed before they answered go out first). Waits `DRAIN_WAIT_S` at most, for
        the thread's pass and for the stream to take the output; what a slow stream did not
        take by then, the thread writes."""
        deadline = time.monotonic() + DRAIN_WAIT_S
        if not self._lock.acquire(timeout=DRAIN_WAIT_S):
            return
        try:
            if self._pass(deadline):
                self._poke()
        finally:
            self._lock.release()

    def close(self) -> None:
        """Waits (`CLOSE_WAIT_S` at most) for the procs' last output, writes it, ends the
        thread and closes the pipes. After the zygote and its procs are stopped."""
        self.handed_over()
        self._thread.join(CLOSE_WAIT_S)  # it ends by itself at EOF on every pipe
        self._closing = True
        self._poke()
        self._thread.join(CLOSE_WAIT_S)
        if not self._lock.acquire(timeout=CLOSE_WAIT_S):
            return  # the thread waits on a stream that takes nothing: the exit ends it
        try:
            self._pass(None)
            for stream in self._streams:
                for fd in (stream.read, stream.out):
                    os.close(fd)
            self._streams = []
        finally:
            self._lock.release()
        if not self._thread.is_alive():
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _poke(self) -> None:
        try:
            os.write(self._wake_w, b"!")
        except OSError:
            pass  # a wake is pending already

    def _run(self) -> None:
        """The thread: wakes at output (or a poke), lets it gather, writes it; ends when every
        pipe is at EOF or `close` says so. Only this thread removes a stream (and `close`,
        once it ended), so the fds it polls stay open."""
        poller = select.poll()  # not select(): no limit on the fds' numbers
        for fd in (*(s.read for s in self._streams), self._wake_r):
            poller.register(fd, select.POLLIN)
        again = False
        while self._streams and not self._closing:
            if not again:
                ready = {fd for fd, _ in poller.poll()}
                if self._wake_r in ready:
                    try:
                        os.read(self._wake_r, 4096)
                    except OSError:
                        pass
                if self._closing:
                    return
                if ready - {self._wake_r}:
                    time.sleep(GATHER_S)
            with self._lock:
                again = self._pass(None, reap=poller)

    def _pass(self, deadline: float | None, reap: Any = None) -> bool:
        """Reads what each pipe holds and writes it (by `deadline`, see `_write`). True when
        something is left to do at once: a read came back full, or output waits for a stream
        to take it. A pipe at EOF (every writer gone) is closed when `reap` (the thread's
        poller) is given. Under `_lock`."""
        more = False
        buffer = self._buffer
        for stream in list(self._streams):
            try:
                n = os.readv(stream.read, [buffer])
            except BlockingIOError:
                n = -1
            except OSError:
                n = 0
            if n == 0 and not stream.pending:  # every writer is gone
                if reap is not None:
                    reap.unregister(stream.read)
                    self._streams.remove(stream)
                    os.close(stream.read)
                    os.close(stream.out)
                continue
            if n > 0:
                stream.pending += buffer[:n]
            # a full read may end inside a line: its tail waits for the next read (an empty
            # pipe or EOF says the tail is all there is)
            stream.complete = n < READ_BYTES
            more = more or not stream.complete
            if stream.pending:
                _write(stream, deadline)
                more = more or bool(stream.pending)
        return more


def _write(stream: _Stream, deadline: float | None) -> None:
    """Writes `stream.pending`, waiting for the stream to take it until `deadline`
    (`time.monotonic`; None: however long it takes). A stream whose reader is gone drops it:
    procs never wait on a reader that left.

    Each write is at most PIPE_BUF bytes and ends at a line's end where one is in reach: the
    controller's own prints share the stream, and a pipe keeps a write whole only up to
    PIPE_BUF (a megabyte written at once let a line the script printed meanwhile land in the
    middle of a proc's line, under load). After a read that filled the buffer (it may end
    inside a line) only whole lines are written; the rest waits for the next read."""
    pending = stream.pending
    end = len(pending) if stream.complete else pending.rfind(b"\n") + 1
    try:
        while end > 0:
            if deadline is not None:
                poller = select.poll()
                poller.register(stream.out, select.POLLOUT)
                if not poller.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                    return
            size = end
            if size > _PIPE_BUF:
                size = pending.rfind(b"\n", 0, _PIPE_BUF) + 1 or _PIPE_BUF
            written = os.write(stream.out, pending[:size])
            del pending[:written]
            end -= written
    except OSError:
        pending.clear()


def _groups() -> list[tuple[int, ...]]:
    """The fds among 1 and 2 to relay, grouped by the file they write to."""
    found: dict[tuple[int, int], list[int]] = {}
    for fd in (1, 2):
        try:
            info = os.fstat(fd)
        except OSError:
            continue  # closed
        if (stat.S_ISFIFO(info.st_mode) or stat.S_ISSOCK(info.st_mode)
                or (stat.S_ISCHR(info.st_mode) and os.isatty(fd))):
            found.setdefault((info.st_dev, info.st_ino), []).append(fd)
    return [tuple(fds) for fds in found.values()]
