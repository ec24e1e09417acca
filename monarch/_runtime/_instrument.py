"""The runtime's telemetry: spans per call and per invocation, metrics, logs, and shipping.

Every process records into its `monarch.telemetry` recorder (bounded; drops and counts under
overload) and ships drained batches to the controller every `SHIP_S` in `Telemetry` messages;
the controller ingests its own batches (as wire lists, not encoded) and everyone else's into its
store. One `call` is one trace: the caller's call span travels in the envelope and parents each
actor's invocation span. Both are site spans (a few tuples per call, see
`monarch.telemetry._sites`); ending an invocation also counts its message, latency and bytes.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable

from .. import telemetry
from ..telemetry._actors import COLUMNS_FROM
from .._wire._messages import Notice, Telemetry
from .._wire._switch import switch
from .._wire._transport import PeerGone

SHIP_S = 0.25
"""How often a process samples its actors and looks whether to ship: it ships at once what
people watch live (log lines, failures, transfers: those alone) or a backlog of `BACKLOG`
records... (0.1 s made 64 busy procs look 640 times a second, ~150 us of a proc's CPU a look
at 1,024 actors: in one job's alternating blocks, 0.25 s with `BULK_S` 1 s made the printing
round 113 -> 93 ms and the controller's CPU a round 52 -> 33 ms; 2026-12-07.)"""

LIVE_S = 0.5
"""...but no sooner than this after the last shipment while someone watches the job live
(`WATCHED`): a line after a quiet spell leaves at the next look, a stream of them twice a
second, the console's refresh rate (each shipment costs both sides a fixed ~0.5 ms, paid per
proc: at 1,024 actors printing a line per call, ten shipments a second per proc took a quarter
of the round, four a second made the round ~5 ms (7 %) longer than two; 2026-12-07). A failure
does not wait for it: it leaves at the next look..."""

UNWATCHED_LIVE_S = 1.0
"""...and no sooner than this while nobody watches: a stream of lines leaves with the bulk, once
a second (at 1,024 actors printing a line per call, a second instead of half of one made the
round 89 -> 81 ms in one job's alternating blocks, the controller's CPU a round 35 -> 31 ms
and the procs' 149 -> 133 ms; 2026-12-08)."""

BULK_S = 1.0
"""...and everything else (spans, metrics, actor statuses, flight records) this often, not
with each live shipment (a proc printing a line per call shipped a snapshot of its changed
metrics ten times a second, which took more of a 1,024-actor round than the lines did):
a shipment has a fixed cost on both ends (~0.6 ms in a proc, ~0.4 ms in the controller, 16 procs
at 4 actors each, measured 2026-11-27; ~1.3 ms in the controller at 1,024 actors printing,
2026-12-07), paid per proc, so it counts at scale. Once a second: a metric, a span or an
actor's queue reaches the console a second late at most (its states, failures and stalls do not
wait for it)."""

IDLE_TICK_S = 1.0
"""The longest wait between two looks of a process that has nothing to ship: the wait doubles
from `SHIP_S` while nothing is recorded (an idle proc woke 10 times a second for nothing,
~0.4 % of a core each) and is back to `SHIP_S` at the first record; a live record (a log line,
a failure, a transfer) wakes the look at once (`Recorder.on_live`)."""

DRAIN_ITEMS = 10240
"""Records of each kind one shipment takes at most: 40,960 a second per kind at `SHIP_S`."""

BACKLOG = DRAIN_ITEMS // 2
"""Spans or flight-recorder entries waiting that make a process ship at the next look (half of
what one drain takes per kind: the drain rate stays `DRAIN_ITEMS` per kind per `SHIP_S`)."""

ENABLED = True
"""Whether this process records telemetry; set once when it joins the job."""

WATCHED = False
"""Whether someone watches the job live (a console, `monarch logs -f`, a subscription, log
forwarding, an OTLP exporter): the controller says so (`set_watched`, notice
``telemetry_watched``, see `_controller._watched`), and lines then leave every `LIVE_S`."""


WATCHED_NOTICE = "telemetry_watched"
"""The controller's notice to its procs of who watches (body: {"watched": bool})."""


def set_watched(body: dict[str, Any]) -> None:
    """`WATCHED_NOTICE`'s handler in a proc."""
    global WATCHED
    WATCHED = bool(body.get("watched"))


def enabled_by_default() -> bool:
    """Telemetry is on unless the switch MONARCH_TELEMETRY is off or it is configured off
    (another value than on/off spellings raises ValueError)."""
    from .. import config

    return switch("MONARCH_TELEMETRY") and bool(config.get("telemetry"))


class Looks:
    """When a process looks next at what it has recorded: every `SHIP_S` while records come;
    while none does, each wait doubles up to `IDLE_TICK_S`. A live record restarts the looks
    at once: a new chain, whose number makes the old chain's pending look a no-op."""

    def __init__(self) -> None:
        self.chain = 0
        self.wait = SHIP_S

    def after(self, idle: bool) -> float:
        """The wait before the next look, after one that found the recorder `idle` (empty)."""
        self.wait = min(self.wait * 2, IDLE_TICK_S) if idle else SHIP_S
        return self.wait

    def restart(self) -> int:
        """Starts a new chain of looks (a live record came while they were spaced out)."""
        self.chain += 1
        self.wait = SHIP_S
        return self.chain


class Pace:
    """When a process's next shipments are due: the bulk every `BULK_S` after the last bulk
    one, live records (alone) once `LIVE_S` (`UNWATCHED_LIVE_S` while nobody watches) has
    passed since the last shipment of any kind.
    Only the loop thread changes it (`ship_telemetry` from another thread may set `bulk_at`
    too: a shipment a little early or late, nothing lost)."""

    def __init__(self, now: float) -> None:
        self.bulk_at = now
        self.sent_at = 0.0  # a first line goes at the first look

    def bulk_due(self, now: float) -> bool:
        return now - self.bulk_at >= BULK_S

    def live_due(self, now: float) -> bool:
        return now - self.sent_at >= (LIVE_S if WATCHED else UNWATCHED_LIVE_S)


def start_process(runtime: Any, *, enabled: bool, ship_to: str | None,
                  ingest: Callable[[Any], object] | None, capture: bool,
                  passthrough: bool = True) -> None:
    """Sets this process up: resource tags, log capture, and the shipping timer.

    Args:
        runtime: the process runtime (its loop runs the shipping timer).
        enabled: record spans and metrics on the hot paths.
        ship_to: the controller's address (procs), or None in the controller.
        ingest: the controller's store ingestion, used instead of shipping.
        capture: tee stdout/stderr and `logging` into the recorder.
        passthrough: False: record lines without printing them here (log forwarding: the
            controller prints them).
    """
    global ENABLED
    ENABLED = enabled
    identity = runtime.identity
    telemetry.configure({"host": identity.hostname, "proc": identity.name, "pid": os.getpid(),
                         "job": identity.job_id})
    if capture:
        telemetry.install_capture(passthrough=passthrough)
    recorder = telemetry.process_recorder()
    if ship_to is not None:  # a proc: what it has not shipped survives its SIGKILL
        try:
            recorder.keep_for_crash(str(crash_stem(identity.run_dir, identity.name)))
        except OSError as exc:
            print(f"monarch: no crash files for {identity.name}: {exc}", file=sys.stderr)
    sample = actor_sampler(runtime, recorder, queue_depth=enabled)
    # One sampler and shipper at a time: the loop's looks, a flush from another thread and the
    # final flush (a look that took an actor's flight records just before the final flush's
    # last drain put them in the recorder after it: never shipped, lost uncounted).
    shipping = threading.RLock()

    pace = Pace(time.monotonic())

    def ship() -> None:
        with shipping:
            sample()
            send()

    def send(live_only: bool = False) -> None:
        with shipping:
            if not live_only:
                pace.bulk_at = time.monotonic()
            if ingest is not None:  # the controller's own records: no need to encode them
                wire = recorder.drain(DRAIN_ITEMS, live_only)
                if wire is not None:
                    ingest(wire)
                return
            batch = recorder.drain_bytes(DRAIN_ITEMS, live_only)
            if batch and ship_to is not None and ship_to not in runtime.dead:
                pace.sent_at = time.monotonic()
                try:
                    runtime.outbox.send(ship_to, Telemetry(identity.name, batch), block=False)
                except PeerGone:
                    pass  # the controller is gone; this proc is about to be stopped

    looks = runtime.telemetry_looks = Looks()

    def tick(chain: int) -> None:
        if chain != looks.chain or runtime._closing:
            return  # a live record started a new chain (`wake`)
        if not shipping.acquire(blocking=False):  # another thread ships (the final flush)
            runtime.call_later(SHIP_S, lambda: tick(chain))
            return
        try:
            now = time.monotonic()
            bulk = pace.bulk_due(now)
            busy = sample(full=bulk)
            idle = not busy and recorder.pending() == 0
            if bulk or recorder.due(BACKLOG):
                send()
            elif recorder.live() and (pace.live_due(now) or recorder.urgent()):
                send(live_only=True)
        finally:
            shipping.release()
        wait = looks.after(idle)
        if wait > SHIP_S:
            recorder.on_live = wake
        runtime.call_later(wait, lambda: tick(chain))

    def wake() -> None:  # any thread: a live record while the looks were spaced out
        runtime.call_soon(lambda: tick(looks.restart()))

    runtime.call_later(SHIP_S, lambda: tick(looks.chain))
    runtime.flush_telemetry = ship  # ships what was recorded until now, once (loop thread)
    runtime.ship_telemetry = send  # the same without sampling the actors (any thread)
    if enabled:
        runtime.on_undelivered = lambda reason, n: telemetry.process_recorder().metrics.inc(
            ("messages_undelivered", reason), n)
    runtime.final_telemetry = lambda: _final_flush(runtime, recorder, sample, ship_to, ingest,
                                                   shipping)


def _take_all(items: Any, most: int = -1) -> list[Any]:
    """Takes from the left of a deque that another thread may be emptying too (the final flush
    samples from its own thread), `most` items at most (-1: all): what each takes, it takes
    once; an empty deque ends it."""
    taken: list[Any] = []
    while most:
        try:
            taken.append(items.popleft())
        except IndexError:
            break
        most -= 1
    return taken


def crash_stem(run_dir: Any, proc: str) -> Any:
    """Where proc ``proc`` keeps what it has not shipped (`telemetry._crashlog`), without the
    files' suffix: its host agent reads it there when the proc dies."""
    return run_dir / proc


RECOVERED_NOTICE = "telemetry_recovered"
"""What a dead proc's crash files held, sent by its host agent before its exit (body: proc,
batch)."""
FINAL_NOTICE = "telemetry_final"
"""The notice a stopping proc sends after its last `Telemetry` (same link, so it arrives after)."""


def _final_flush(runtime: Any, recorder: Any, sample: Callable[..., bool], ship_to: str | None,
                 ingest: Callable[[Any], object] | None, shipping: Any) -> None:
    """Ships everything recorded so far (from any thread but the loop's: it may block), then,
    in a proc, tells the controller that was the last of it; no look samples or ships
    meanwhile (`shipping` held)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # a line still in a buffer reaches the capture now
        except (OSError, ValueError):
            pass
    with shipping:
        _ship_all(runtime, recorder, sample, ship_to, ingest)


def _ship_all(runtime: Any, recorder: Any, sample: Callable[..., bool], ship_to: str | None,
              ingest: Callable[[Any], object] | None) -> None:
    sample()
    while True:
        if ingest is not None:
            wire = recorder.drain(DRAIN_ITEMS)
            if wire is None:
                return
            ingest(wire)
            continue
        batch = recorder.drain_bytes(DRAIN_ITEMS)
        if ship_to is None or ship_to in runtime.dead:
            return
        try:
            if not batch:
                runtime.outbox.send(ship_to, Notice(FINAL_NOTICE, {"proc": runtime.identity.name}))
                crash, recorder.crash = recorder.crash, None
                if crash is not None:  # everything was shipped: nothing to recover
                    crash.close(remove=True)
                return
            runtime.outbox.send(ship_to, Telemetry(runtime.identity.name, batch))
        except PeerGone:
            return


def actor_sampler(runtime: Any, recorder: Any,
                  queue_depth: bool = True) -> Callable[..., bool]:
    """Samples each actor of the process (off the message path): its status (handlers running
    now, messages waiting) when it changed, the messages its flight recorder took since the
    last sample, and ``queue_depth{actor}`` when it changed. The sampler returns whether any
    actor handled a message since its last look.

    A full sample goes with each bulk shipment (`BULK_S`); a look in between (``full=False``)
    takes only what cannot wait for it: the steps of an actor's life (with its status), and
    the flight records of an actor with `EARLY_ENTRIES` new (a busy one: its recorder would
    lose some by the next full sample; its status waits, as any other change of one does). A
    sample per look cost a busy proc of 16 actors 16 statuses ten times a second, and the
    controller a group per actor and look; building a busy actor's status at each look only to
    find it unchanged was ~5 % of a busy proc's Python under a burst of broadcasts."""
    last_depth: dict[str, int] = {}
    last_status: dict[str, tuple[Any, ...]] = {}
    looked: dict[str, int] = {}

    def sample(full: bool = True) -> bool:
        source = runtime.identity.name
        busy = False
        for slot in list(runtime.actors.values()):
            actor = slot.instance.actor_id
            recorded = slot.recorded
            if looked.get(actor, 0) != recorded:
                looked[actor] = recorded
                busy = True
            new = len(slot.unshipped)
            if not full and not slot.lifecycle:  # its status waits for the full sample
                if new >= EARLY_ENTRIES:
                    recorder.add_message_group(flight_records(slot, new))
                continue
            if queue_depth and full:
                depth = slot.queue_depth()
                if last_depth.get(actor) != depth:
                    last_depth[actor] = depth
                    telemetry.set_queue_depth(actor, depth)
            events = tuple(_take_all(slot.lifecycle))
            status = actor_status(slot, source, events)
            key = (status.state, status.running, status.queued, status.queued_methods)
            if last_status.get(actor) != key or events:
                last_status[actor] = key
                recorder.add_actor_status(status)
            if new > 0:
                recorder.add_message_group(flight_records(slot, new))
        return busy

    return sample


EARLY_ENTRIES = COLUMNS_FROM
"""New flight-recorder entries that have an actor's records taken at a look between two full
samples (16): a busy actor's entries do not wait for the bulk shipment (its recorder holds
`_actors._slots.UNSHIPPED` at most), and they travel as columns, which the controller reads in
half the time of rows (a burst of broadcasts to 1,024 actors shipped groups of 8 to 15 entries
as rows); one among a thousand, with one or two a look, ships them with the bulk."""


def actor_status(slot: Any, source: str, events: tuple = ()) -> telemetry.ActorStatus:
    """What `slot` runs now and what waits behind it (read without a lock: a copy made in C),
    with the steps of its life taken from it since the last status (`events`)."""
    running = sorted(list(slot.running.values()), key=lambda r: r[1])
    waiting = list(slot.waiting)
    header = slot.header
    return telemetry.ActorStatus(
        slot.instance.actor_id, header.mesh, header.name, slot.rank.rank, header.class_name,
        slot.state, tuple(telemetry.RunningHandler(
            method, start, str(sender), trace[0].hex() if trace and trace[0] else None, nbytes)
            for method, start, sender, trace, nbytes, *_ in running),
        len(waiting), tuple(waiting[:QUEUED_SHOWN]), time.time_ns(), source, events)


QUEUED_SHOWN = 16
"""Methods of waiting messages an actor status names (the count covers them all)."""


def flight_records(slot: Any, count: int) -> list[Any]:
    """The actor's first `count` unshipped flight-recorder entries (fewer if another sampler,
    the final flush's, took some meanwhile), taken, as one group (`telemetry.message_group`):
    the entries as they are."""
    return telemetry.message_group(slot.instance.actor_id, slot.header.name, slot.rank.rank,
                                   _take_all(slot.unshipped, count))


def invocation_site(slot: Any, method: str) -> Any:
    """The site of the actor's invocation spans of `method` (span ``<mesh>.<method>``, child of
    the caller's span, current while it runs; ending it counts the message, its latency and its
    bytes: ``messages_handled``, ``handler_latency_seconds``, ``message_bytes``)."""
    header = slot.header
    return telemetry.invocation_site(header.name, header.class_name, slot.rank.rank, method)


def count_dropped(kind: str) -> None:
    """Counts a record of ``kind`` lost before the recorder took it
    (``telemetry_dropped{kind}``, as the recorder counts its own drops)."""
    telemetry.process_recorder().count_dropped(kind)


def count_undelivered(reason: str) -> None:
    """Counts a message that never reached a handler (``messages_undelivered{reason}``)."""
    if ENABLED:
        telemetry.process_recorder().metrics.inc(("messages_undelivered", reason))


def count_failure(cause: str) -> None:
    """Counts a failure by cause: ``user`` (an endpoint raised) or ``infrastructure``."""
    if ENABLED:
        telemetry.process_recorder().metrics.inc(("job_failures", cause))


def actor_spawned(slot: Any) -> None:
    """Observes ``actor_spawn_seconds{mesh}``: from the spawn request to the end of __init__."""
    if ENABLED and slot.requested_ns:
        seconds = max(time.time_ns() - slot.requested_ns, 0) / 1e9
        telemetry.process_recorder().metrics.observe(
            ("actor_spawn_seconds", slot.header.name), seconds)


def tag_actor(slot: Any) -> None:
    """Tags log lines of the current thread/task with the actor's mesh and rank."""
    telemetry.set_actor_tags(mesh=slot.header.name, rank=slot.rank.rank,
                             actor_class=slot.header.class_name,
                             actor=slot.instance.actor_id)
