"""The per-process runtime: one inbox loop, outbound links, ports, ordering, actor slots.

Every process of a job (the controller and each proc) runs one `ProcessRuntime`. The thread
that leads (see `_leader`: the I/O thread, or a thread that would otherwise sleep) runs the
loop: it forwards casts down the tree, releases calls in per-sender order to actor slots,
settles port sinks with replies, and runs system handlers. Any thread may send.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import os
import queue
import sys
import threading
import time
import traceback
from typing import Any, Callable, Sequence

import zmq

from . import _clock, _future, _gather
from ._fd_limits import size_context
from ._recipients import Recipients
from ._identity import ProcessIdentity
from ._forward import Forwarder
from ._leader import BATON, DONE, PARK_CHECK_S, Leadership
from ._ordering import Numbering, Reorder
from ._ports import Sink
from .._geometry._view import View
from .._wire._messages import Batch, Call, Notice, Reply, Replies, Seqs
from .._wire import _signals
from .._wire._transport import Inbox, Outbox, PeerGone

_NO_ARG = object()

SYSTEM_PREFIX = "@"
"""Mesh ids starting with this address a proc mesh's system agents (one per proc)."""

WAITER_POLL_MS = 20
"""The longest poll of a thread that leads while it waits on a future: the future may be set
by another thread without waking the loop, so it is looked at this often."""


class ProcessRuntime:
    """Sends and receives for one process. Create, `start()`, and `close()` once."""

    def __init__(self, identity: ProcessIdentity, endpoint: str,
                 advertise: str | None = None) -> None:
        self.identity = identity
        self.ctx = zmq.Context()
        self.max_peers = size_context(self.ctx)
        """Sockets this process may hold (`_fd_limits`): about the peers it can send to."""
        self.inbox = Inbox(self.ctx, identity.secret, endpoint, advertise)
        self.exit_code = 0
        """What the process exits with once its loop ended (1: its proc's bootstrap failed)."""
        self.address = self.inbox.address
        self.dead: dict[str, str] = {}
        """Address of each process known to have died -> why (exit code or signal)."""
        self.failed_actors: dict[tuple[str, int], str] = {}
        """(actor mesh id, base rank) -> failure report, for actors known failed or stopped."""
        self.outbox = Outbox(self.ctx, identity.secret, self.dead.__contains__)
        self.outbox.on_held_lost = self._held_lost
        self.outbox.on_backlog = self._wake_off_loop
        self.numbering = Numbering()
        self.reorder = Reorder(self._deliver)
        self.tables: dict[str, tuple[str, ...]] = {}
        """Proc mesh id -> address of each of its procs (by base rank)."""
        self.actors: dict[str, Any] = {}
        """Actor mesh id -> this process's actor slot of that mesh."""
        self._early: dict[str, list[tuple[Call, list[Any]]]] = {}
        self._untabled: dict[str, list[tuple[Call, list[Any]]]] = {}
        self.system_methods: dict[str, Callable[[Call, list[Any]], None]] = {}
        self.notice_handlers: dict[str, Callable[[Any], None]] = {}
        self.kind_handlers: dict[type, Callable[[Any, list[Any]], None]] = {}
        self.ports: dict[int, Sink] = {}
        self._port_ids = itertools.count(1)
        self._views: dict[tuple, View] = {}
        self.forwarder = Forwarder(self)
        self.held_spawns: list[tuple[Call, list[Any]]] | None = None
        """Spawns from other processes held while this proc's bootstrap runs (None: none)."""
        self.stopping: list[threading.Thread] = []
        """A proc's stop threads: joined before the process exits (see `_proc_main.run`)."""
        self.spawn_wait_s = 30.0
        """How long a ping waits for an actor whose spawn has not arrived (actor_spawn_max_idle)."""
        self._calls: list[Callable[[], None]] = []
        self._calls_lock = threading.Lock()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_ids = itertools.count()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._woken = False
        self._thread: threading.Thread | None = None
        self._closing = False
        self.leadership = Leadership(self.wake)
        self._poller: zmq.Poller | None = None
        self._handlers: dict[Any, tuple[Callable[..., None], Any]] | None = None
        self._leader_until: Callable[[], bool] | None = None
        """While a thread other than the I/O thread leads: its `until` (see `lead`)."""
        self.imminent: set[Any] = set()
        """Actor slots whose idle thread is about to take a message delivered to it (each
        slot adds itself when it is given one while `idle`, and drops out when its thread
        takes one): an answer given meanwhile is held for theirs (`_wire._answers`)."""
        self.awaited: list[tuple[Any, int]] = []
        """The slots the answers held now wait for, each with its `taken` count when the
        first was held (`hold_answer`; read and written under the held answers' lock)."""
        self.idle_polls = 0
        """Polls that found every inbox empty (loop thread): a dead sender's last messages are
        read once one happened after its death was known."""
        self.internal_errors = 0
        """Exceptions raised by loop callbacks (reported on stderr, never fatal)."""
        self.flush_telemetry: Callable[[], None] | None = None
        """Samples the actors and ships what was recorded until now (loop thread)."""
        self.ship_telemetry: Callable[[], None] | None = None
        """Ships what was recorded until now (any thread; in the controller: into its store)."""
        self.on_undelivered: Callable[[str, int], None] | None = None
        """Counts calls lost with a dead process (set by the telemetry seam)."""
        self.final_telemetry: Callable[[], None] | None = None
        """Ships every record left and says it was the last (not on the loop thread)."""
        self.telemetry_looks: Any = None
        """When the telemetry seam looks next at what was recorded (`_instrument.Looks`)."""

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, name: str = "monarch-io") -> None:
        """Starts the I/O thread; from now on, threads waiting on futures may lead."""
        self._thread = threading.Thread(target=self._io_main, name=name, daemon=True)
        self._thread.start()
        _future.set_waiter(self.wait_for)

    def run_here(self) -> None:
        """Runs the I/O thread's part in the calling thread until `close()` (procs' main)."""
        self._thread = threading.current_thread()
        _future.set_waiter(self.wait_for)
        self._io_main()

    def on_io_thread(self) -> bool:
        """True when called from the thread running the loop right now (the leader)."""
        return threading.get_ident() == self.leadership.leader_ident

    def can_lead(self) -> bool:
        """True while other threads may take the loop over (started, not closing)."""
        return self._thread is not None and not self._closing

    def wake(self) -> None:
        """Makes the leader's poll return soon. Thread-safe."""
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _wake_off_loop(self) -> None:
        """Wakes the leader unless this is the thread inside the loop (it flushes the backlog
        before it polls again)."""
        if self.leadership.leader_ident != threading.get_ident():
            self.wake()

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Runs `fn()` in the loop, soon. Thread-safe."""
        with self._calls_lock:
            self._calls.append(fn)
            if self._woken:
                return
            self._woken = True
        self.wake()

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        """Runs `fn()` in the loop after `delay` seconds. Thread-safe."""
        deadline = time.monotonic() + delay
        self.call_soon(lambda: heapq.heappush(self._timers,
                                              (deadline, next(self._timer_ids), fn)))

    def close(self) -> None:
        """Stops the loop, fails what still waits, closes sockets (queued sends get 0.5 s)."""
        first = not self._closing
        self._closing = True
        self.leadership.closing = True
        self.outbox.held.release(block=not self.on_io_thread())
        self.outbox.answers.release(None, block=not self.on_io_thread())
        self.wake()
        if self._thread is None:  # never started: no loop will close the inbox on its way out
            if not first:
                return
            self._fail_all("the monarch runtime of this process shut down")
            self.inbox.close()
        elif self._thread is not threading.current_thread() and self._thread.is_alive():
            self._thread.join(timeout=5)
        self.outbox.close(linger_ms=500)

    def wait_for(self, future: Any, timeout: float | None) -> bool:
        """Waits for `future` to settle, leading the loop meanwhile if possible; False on
        timeout. Installed as the waiter of every Future of this process."""
        self.outbox.held.release_first(block=not self.on_io_thread())
        if self.outbox.answers.by_address:
            self.outbox.answers.release(None, block=not self.on_io_thread())
        if self._closing or self.on_io_thread() or self._thread is None:
            return future._lock_wait(timeout)
        if future.done():
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        if threading.get_ident() == _signals.MAIN:
            _signals.guard()
        me: queue.SimpleQueue[Any] = queue.SimpleQueue()
        lead = self.leadership
        try:  # from `want` on: a signal's exception anywhere below gives the baton back
            if lead.want(me):
                self.lead(me, future.done, deadline, future._gather)
                return future.done()
            future.add_done_callback(lambda: me.put(DONE))
            try:
                item = me.get(timeout=None if deadline is None else max(0.0, timeout or 0.0))
            except queue.Empty:
                item = None
            if item is BATON:
                self.lead(me, future.done, deadline, future._gather)
            else:
                lead.cancel(me, None)
        except BaseException:
            lead.cancel(me, None)  # never waits; passes the baton on if `me` had it
            raise
        return future.done()

    # -- sending -----------------------------------------------------------------------------
    def new_port(self, sink: Sink) -> int:
        """Registers a sink; returns its port id."""
        port = next(self._port_ids)
        self.ports[port] = sink
        return port

    def drop_port(self, port: int) -> None:
        """Unregisters a port; replies to it are dropped from now on."""
        self.ports.pop(port, None)

    def cast(self, sender: str, to: Recipients, method: str, frames: list[Any],
             port: tuple | None, trace: tuple | None = None, *, block: bool = True,
             hold: bool = False) -> None:
        """Sends one call of `method` from `sender` to every actor of `to`, its answers to
        `port` (address, port id), or none (None). `hold`: the call may wait for the
        thread's next calls and leave with them (`_wire._held`). Raises PeerGone if the first
        hop is known dead."""
        ranks = to.ranks
        taken = self.numbering.taken
        ident = threading.get_ident()
        if ident == _signals.MAIN:
            _signals.guard()
        try:
            if len(ranks) == 1:
                seqs: tuple = ((self.numbering.take_one(sender, to.mesh, ranks[0], ident), 1),)
            else:
                seqs = self.numbering.take(sender, to.mesh, ranks, to.whole, ident)
            call = Call(sender, to.mesh, method, to.procs, to.wire, 0, len(ranks), seqs, port,
                        trace, _clock.now(), len(frames))
            if hold:
                if self.outbox.hold(to.table[ranks[0]], call, frames) \
                        and self.leadership.holder_polls():
                    self.wake()  # a leader polls, maybe for long: it releases them at once
            else:
                self.outbox.send(to.table[ranks[0]], call, frames, block=block)
        except BaseException as exc:
            out = taken.pop(ident, None)
            if out is not None and not isinstance(exc, Exception):
                # A signal's exception (KeyboardInterrupt, a handler's SystemExit) between
                # taking the numbers and handing the call over: it goes anyway (sent twice,
                # the replay is dropped), or the actors' stream would wait for it forever.
                call = Call(sender, to.mesh, method, to.procs, to.wire, 0, len(ranks), out,
                            port, trace, _clock.now(), len(frames))
                with contextlib.suppress(Exception):
                    self.outbox.send(to.table[ranks[0]], call, frames, block=False)
            raise
        taken.pop(ident, None)

    def _held_lost(self, address: str, msg: Any, reason: str | None) -> None:
        """Held calls that could not be sent: their callers get the error a send would have
        raised (see `ActorMesh._send`)."""
        calls = [Call(*fields) for fields in msg.calls] if type(msg) is Batch else [msg]
        reason = self.dead.get(address) or reason or "gone"
        for call in calls:
            if call.port is None or call.port[0] != self.address:
                continue
            sink = self.ports.pop(call.port[1], None)
            if sink is not None:
                sink.fail(address, reason, None)

    def reply(self, port: tuple, index: int, status: int, frames: Sequence[Any] = (),
              block: bool = True) -> None:
        """Sends a Reply to `port` = (address, port id). Replies to dead processes are dropped.
        An actor's thread's answer waits for those of the actors about to answer too, and
        leaves with them (`_wire._answers`)."""
        address, port_id = port
        reply = Reply(port_id, index, status, _clock.now(), len(frames))
        outbox = self.outbox
        try:
            if threading.get_ident() == self.leadership.leader_ident:  # `on_io_thread`, inline
                outbox.send(address, reply, frames, block=False)
            elif not self.imminent and not outbox.answers.busy():
                outbox.send(address, reply, frames, block=block)
            else:
                outbox.answers.answer(address, reply, list(frames), block, self.hold_answer)
        except PeerGone:
            pass

    def hold_answer(self) -> bool:
        """Whether an answer given now waits (asked under the held answers' lock,
        `_wire._answers`): the first one waits for the slots whose idle thread is about to
        take a message right now (`awaited`), the ones held after it for the same slots. So
        the wait is bounded: a stream of messages to idle actors (a burst of broadcasts)
        keeps some slot about to take one at every take, but each awaited slot takes one
        message, promptly, and then is no longer waited for."""
        if self.outbox.answers.by_address:
            return self.awaited_due()
        # one C call (`tuple`): other threads add and remove slots meanwhile
        self.awaited = [(slot, slot.taken) for slot in tuple(self.imminent) if slot.idle]
        return bool(self.awaited)

    def awaited_due(self) -> bool:
        """True while some slot the held answers wait for has not taken its message."""
        for slot, taken in self.awaited:
            if slot.idle and slot.taken == taken:
                return True
        return False

    def took(self, slot: Any) -> None:
        """An actor slot's thread took a message off its queue (its `taken` counted first):
        it is not about to any more; if no slot the held answers wait for is, they leave
        now, before its handler runs."""
        self.imminent.discard(slot)
        answers = self.outbox.answers
        # Read without the lock: a thread deciding to hold right now has the lock taken, and
        # one that has not yet decided sees this slot no longer idle (`hold_answer`).
        if answers.by_address or answers.lock.locked():  # `busy()`, on every message taken
            answers.release_unless(self.awaited_due)

    def notify_first(self, address: str, topic: str, body: Any) -> None:
        """`notify`, but a notice to this process itself is handled on the loop without the
        trip through its own socket: before anything another thread asks the loop for after
        this call returns (the spawner's word of a new mesh, in the controller: the admin API
        knows the mesh once `spawn()` returned). Only for a notice whose order against this
        process's other messages to itself does not matter."""
        if address != self.address:
            self.notify(address, topic, body)
            return

        def deliver() -> None:
            handler = self.notice_handlers.get(topic)
            if handler is not None:
                handler(body)

        self.call_soon(deliver)

    def notify(self, address: str, topic: str, body: Any) -> None:
        """Sends a Notice; a dead destination is skipped."""
        try:
            self.outbox.send(address, Notice(topic, body), block=not self.on_io_thread())
        except PeerGone:
            pass

    # -- failures ----------------------------------------------------------------------------
    def mark_dead(self, address: str, reason: str, failure: Any = None) -> None:
        """Records that the process at `address` died; fails whatever waits on it. I/O thread."""
        if address in self.dead:
            return
        self.dead[address] = reason
        lost = 0
        for port, sink in list(self.ports.items()):
            if address in sink.addresses and sink.fail(address, reason, failure):
                self.ports.pop(port, None)
                lost += 1
        if lost and self.on_undelivered is not None:
            self.on_undelivered("proc_died", lost)
        self.reorder.release_gaps()
        self.outbox.forget(address)

    def revive(self, address: str) -> None:
        """A new process listens at `address`, where a dead one did (the kernel gave a tcp
        port again): the old death no longer speaks for that address. I/O thread."""
        self.dead.pop(address, None)

    # -- the loop ----------------------------------------------------------------------------
    def _io_main(self) -> None:
        lead = self.leadership
        try:
            while True:
                if self.lead(lead.io_queue, None, None, _gather.ANY):
                    if self._closing:
                        break
                    continue
                self._await_baton()
        finally:
            self._fail_all("the monarch runtime of this process shut down")
            self.inbox.close()

    def _await_baton(self) -> None:
        """The I/O thread, not leading: waits to be handed the baton, and takes it over when it
        has been parked too long (a leader went off to run a long handler); sleeps while no
        park happens (see `_leader`)."""
        lead = self.leadership
        while True:
            try:
                if lead.io_queue.get(timeout=None if lead.io_asleep else PARK_CHECK_S) is BATON:
                    return  # (else WATCH: the baton was parked while it slept)
            except queue.Empty:
                if lead.take_if_parked(lead.io_queue, PARK_CHECK_S):
                    return

    def lead(self, me: queue.SimpleQueue[Any], until: Callable[[], bool] | None,
             deadline: float | None, gather: Any = None) -> bool:
        """Runs the loop as leader (`me` holds the baton) until `until()` holds, the deadline
        passes, or (for the I/O thread) a follower wants to lead; then releases the baton.
        `gather`: the sink of the call waited for, or `_gather.ANY` for an idle leader (the
        I/O thread, an idle actor's thread); while it and the other pending calls still expect
        many replies on a busy host, they are read in batches (`_gather`), unless the leader
        is about to stop leading. Returns True if
        `me` still holds it (the I/O thread when closing, or when the follower it yielded to
        gave up)."""
        lead = self.leadership
        is_io = me is lead.io_queue
        # An idle leader (the I/O thread, an idle actor's thread: `gather` is ANY) waits in
        # long polls: what ends its lead (a follower wanting it, an item on the actor's queue)
        # wakes the loop. A thread waiting on a future re-checks it every `WAITER_POLL_MS`.
        long_polls = is_io or gather is _gather.ANY
        lead.leader_ident = threading.get_ident()
        # A thread that leads while it waits for its own work stops draining when it came
        # (checked every 16 messages): under a flood of telemetry it would else handle
        # thousands of others' messages first, its own caller waiting (a 60 s timeout seen).
        self._leader_until = None if is_io else until
        try:
            pause = False
            while not self._closing:
                if until is not None and until():
                    break
                if is_io and lead.wanted():
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                if pause:  # decided after the last poll; a leader about to stop never pauses
                    _gather.pause()
                try:
                    self._poll_once(long_polls)
                except Exception:  # noqa: BLE001 - whichever thread leads, the loop goes on
                    # The leader may be an idle actor's thread or the I/O thread: an error
                    # of the loop's own code (a socket closed under the poller, a flush)
                    # ended that actor, or the runtime, with it. Reported, counted, and the
                    # poller is made anew at the next poll (a stale socket leaves it).
                    self._handlers = None
                    self._guarded(_reraise_current)
                pause = gather is not None and self.gathering(gather)
        except BaseException:
            lead.leader_ident = None
            self._leader_until = None
            lead.release(me)
            raise
        lead.leader_ident = None
        self._leader_until = None
        if is_io and self._closing:
            return True
        return lead.release(me)

    def gathering(self, gather: Any) -> bool:
        """True when a leader waiting on the call whose sink is `gather` should let replies
        pile up (`_gather`): that call (unless `gather` is `_gather.ANY`) still expects
        replies, this process's pending calls
        (their first `_gather.SCANNED` ports) expect `_gather.MIN_REPLIES` or more, and the
        host is busy."""
        if gather is not _gather.ANY and not gather.missing:
            return False
        due = 0
        # Taken in one C call, no bytecode between: callers' threads add and remove ports
        # while this runs (iterating the dict itself met "dictionary changed size during
        # iteration" when one did between two sinks: it ended the actor thread leading).
        for sink in tuple(itertools.islice(self.ports.values(), _gather.SCANNED)):
            due += sink.missing
            if due >= _gather.MIN_REPLIES:
                return _gather.host_load.busy()
        return False

    def _poll_once(self, long_polls: bool) -> None:
        """One poll of every input, then what is due (`long_polls`: wait up to a second when
        nothing is due, else at most `WAITER_POLL_MS`). Hot path: one call per message waited
        for, on each side of every call; keep it flat."""
        handlers = self._handlers or self._make_poller()
        outbox = self.outbox
        if outbox.answers.by_address:  # whoever held them is gone on (`_wire._answers`)
            outbox.answers.release(None, block=False)
        held = outbox.held
        if held.by_address and held.due():
            held.release(block=False)
        if self._timers or self.outbox.backlogged:
            timeout = self._poll_timeout_ms()
            if not long_polls and timeout > WAITER_POLL_MS:
                timeout = WAITER_POLL_MS
        else:
            timeout = 1000 if long_polls else WAITER_POLL_MS
        if held.by_address:  # another thread holds calls: send them when due (`_held`)
            timeout = 1
        events = self._poller.poll(timeout)  # type: ignore[union-attr]
        if threading.get_ident() == _signals.MAIN:
            _signals.depth += 1  # a KeyboardInterrupt waits until what was read is handled
            try:
                self._after_poll(events, handlers, held)
            finally:
                _signals.depth -= 1
            if _signals.pending:
                _signals.fire()
        else:
            self._after_poll(events, handlers, held)

    def _after_poll(self, events: list[Any], handlers: dict[Any, tuple[Callable[..., None], Any]],
                held: Any) -> None:
        """What one poll found, then what is due (the rest of `_poll_once`)."""
        idle = True
        for target, _ in events:
            handler, arg = handlers[target]
            if arg is _NO_ARG:
                handler()
            else:
                idle = False
                handler(arg)
        if idle:
            self.idle_polls += 1  # every inbox was empty: what was sent before has been read
        timers = self._timers
        if timers and timers[0][0] <= time.monotonic():
            self._run_timers()
        if self.forwarder.pending:
            self.forwarder.flush()
        if held.by_address and held.due():
            held.release(block=False)
        if self.outbox.backlogged:
            self.outbox.flush()

    def _make_poller(self) -> dict[Any, tuple[Callable[..., None], Any]]:
        """Polls the inboxes (main and extra listening sockets), their monitors, ZAP and the
        wake pipe; returns what to run for each: (handler, argument), where an inbox's
        handler is the only one with an argument (its socket)."""
        poller = zmq.Poller()
        sock, zap, monitor = self.inbox.poll_sockets()
        handlers: dict[Any, tuple[Callable[..., None], Any]] = {
            sock: (self._drain_inbox, sock), zap: (self.inbox.service_zap, _NO_ARG),
            monitor: (self.inbox.service_monitor, _NO_ARG), self._wake_r: (self._run_calls, _NO_ARG)}
        lane = self.inbox.lane
        if lane is not None:
            handlers[lane.sock.fileno()] = (self._accept_lanes, _NO_ARG)
            for fd, conn in lane.conns.items():
                handlers[fd] = (self._drain_lane, conn)
        for extra, extra_monitor in self.inbox.extra:
            handlers[extra] = (self._drain_inbox, extra)
            handlers[extra_monitor] = (functools.partial(self.inbox.service_monitor,
                                                         extra_monitor), _NO_ARG)
        for target in handlers:
            poller.register(target, zmq.POLLIN)
        self._poller = poller
        self._handlers = handlers
        return handlers

    def listen_tcp(self, host: str, port: int = 0) -> str:
        """Also listens on tcp (other hosts reach this process there); from now on this
        process gives out the tcp address in its ports. Returns it. Loop thread only."""
        address = self.inbox.listen_also(f"tcp://{host}:{port}")
        self._handlers = None  # rebuilt with the new socket at the next poll
        self.address = address
        return address

    def _fail_all(self, reason: str) -> None:
        for port, sink in list(self.ports.items()):
            for address in set(sink.addresses):
                if sink.fail(address, reason, None):
                    break
        self.ports.clear()

    def _poll_timeout_ms(self) -> int:
        if self.outbox.backlogged:
            return 1
        if self._timers:
            return max(0, int((self._timers[0][0] - time.monotonic()) * 1000) + 1)
        return 1000

    def _run_calls(self) -> None:
        try:
            os.read(self._wake_r, 4096)
        except BlockingIOError:
            pass
        with self._calls_lock:
            calls, self._calls = self._calls, []
            self._woken = False
        for fn in calls:
            self._guarded(fn)

    def _run_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, fn = heapq.heappop(self._timers)
            self._guarded(fn)

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        """Runs a loop callback; an exception is reported and counted, never fatal to the loop."""
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - the loop must survive any single callback
            self.internal_errors += 1
            if self.internal_errors <= 20:
                sys.stderr.write(f"monarch[{self.identity.name}]: internal error in the loop:\n"
                                 f"{traceback.format_exc()}")

    def _drain_inbox(self, sock: Any) -> None:
        recv = self.inbox.recv_nowait
        handle = self._handle
        stop = self._leader_until
        for i in range(10_000):  # bounded, so timers and calls get their turn
            got = recv(sock)
            if got is None:
                return
            handle(*got)
            if stop is not None and not i & 15 and stop():
                return  # an actor's thread leading: its own message came, it goes back to it

    def _handle(self, msg: Any, frames: list[Any]) -> None:
        """Handles one received message (from the zmq inbox or a lane) by its kind."""
        kind = type(msg)
        try:
            if kind is Call:
                self._on_call(msg, frames)
            elif kind is Batch:
                self._on_batch(msg, frames)
            elif kind is Reply:
                self._on_reply(msg, frames)
            elif kind is Replies:
                self._on_replies(msg, frames)
            elif kind is Notice:
                self._on_notice(msg)
            else:
                handler = self.kind_handlers.get(kind)
                if handler is not None:
                    handler(msg, frames)
        except Exception:  # noqa: BLE001 - one bad message must not end the loop
            self.inbox.stats.bad_frames += 1
            self._guarded(_reraise_current)

    def _accept_lanes(self) -> None:
        lane = self.inbox.lane
        if lane is not None and lane.accept():
            self._handlers = None  # rebuilt with the new connections at the next poll

    def _drain_lane(self, conn: Any) -> None:
        """Reads one lane connection and handles its whole messages, as `_drain_inbox`."""
        out: list[list[Any]] = []
        try:
            alive = conn.read(out)
        except Exception:  # noqa: BLE001 - a connection's fault must not end the loop
            conn.broken, alive = True, False
            self._guarded(_reraise_current)
        lane_message = self.inbox.lane_message
        for parts in out:  # a read's whole messages (a lane's reads are bounded)
            got = lane_message(parts)
            if got is not None:
                self._handle(*got)
        if not alive:
            stats = self.inbox.stats
            if conn.denied:
                stats.denied_peers += 1
            elif conn.broken:
                stats.bad_frames += 1
            self.inbox.lane.drop(conn)  # type: ignore[union-attr]
            self._handlers = None

    def _on_batch(self, msg: Batch, frames: list[Any]) -> None:
        self._each(msg.calls, Call, frames, self._on_call)

    def _each(self, entries: Any, kind: Any, frames: list[Any],
              handle: Callable[[Any, list[Any]], None]) -> None:
        """Handles each message of a Batch or a Replies: each entry the fields of a `kind`
        message, their frames after the envelope in order. A malformed entry drops the rest,
        counted as a bad frame."""
        offset, nfields = 0, kind._nfields
        for fields in entries:
            if type(fields) is not tuple or len(fields) != nfields:
                self.inbox.stats.bad_frames += 1
                return
            msg = kind(*fields)
            count = msg.nframes
            if type(count) is not int or count < 0 or offset + count > len(frames):
                self.inbox.stats.bad_frames += 1
                return
            handle(msg, frames[offset:offset + count])
            offset += count

    def _on_call(self, msg: Call, frames: list[Any]) -> None:
        _clock.observe(msg.hlc)
        if msg.hi - msg.lo > 1:
            if msg.procs not in self.tables:
                self._untabled.setdefault(msg.procs, []).append((msg, frames))
                return
            self.forwarder.forward(msg, frames)
        first = msg.seqs[0]  # the number of index `lo` (`Seqs.at(seqs, 0)`, inline)
        self.reorder.push((msg.sender, msg.mesh), first[0] if first[1] > 0 else
                          Seqs.at(msg.seqs, 0), (msg, frames))

    def learn_table(self, procs: str, addresses: Sequence[str]) -> None:
        """Records a proc mesh's address table; releases calls that waited for it. I/O thread."""
        if procs in self.tables:
            return
        self.tables[procs] = tuple(addresses)
        for msg, frames in self._untabled.pop(procs, ()):
            self._on_call(msg, frames)

    def view(self, wire: tuple) -> View:
        """The View for a wire tuple (cached)."""
        view = self._views.get(wire)
        if view is None:
            if len(self._views) > 4096:
                self._views.clear()
            view = self._views[wire] = View.from_wire(wire)
        return view

    def _deliver(self, item: tuple[Call, list[Any]]) -> None:
        msg, frames = item
        mesh = msg.mesh
        if mesh.startswith(SYSTEM_PREFIX):
            handler = self.system_methods.get(msg.method)
            if handler is not None:
                handler(msg, frames)
            return
        slot = self.actors.get(mesh)
        if slot is not None:
            slot.deliver(msg, frames)
        else:
            self._early.setdefault(mesh, []).append(item)

    def add_actor(self, mesh: str, slot: Any) -> None:
        """Installs an actor slot and hands it the calls that arrived before it. I/O thread."""
        self.actors[mesh] = slot
        for msg, frames in self._early.pop(mesh, ()):
            slot.deliver(msg, frames)

    def _on_reply(self, msg: Reply, frames: list[Any]) -> None:
        _clock.observe(msg.hlc)
        sink = self.ports.get(msg.port)
        if sink is not None and sink.deliver(msg, frames):
            self.ports.pop(msg.port, None)

    def _on_replies(self, msg: Replies, frames: list[Any]) -> None:
        self._each(msg.replies, Reply, frames, self._on_reply)

    def _on_notice(self, msg: Notice) -> None:
        handler = self.notice_handlers.get(msg.topic)
        if handler is not None:
            handler(msg.body)


_current: ProcessRuntime | None = None


def current() -> ProcessRuntime | None:
    """This process's runtime, or None before it joined a job."""
    return _current


def set_current(runtime: ProcessRuntime | None) -> None:
    """Sets this process's runtime (bootstrap only)."""
    global _current
    _current = runtime


def _reraise_current() -> None:
    raise  # noqa: PLE0704 - re-raises the exception being handled, for _guarded to report
