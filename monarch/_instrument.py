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
from typing import Any, Callable

from . import telemetry
from ._wire._messages import Notice, Telemetry
from ._wire._transport import PeerGone

SHIP_S = 0.1
"""How often a process ships its telemetry to the controller."""

ENABLED = True
"""Whether this process records telemetry; set once when it joins the job."""


def enabled_by_default() -> bool:
    """Telemetry is on unless MONARCH_TELEMETRY is 0/false/off or configured off."""
    from . import config

    flag = os.environ.get("MONARCH_TELEMETRY", "").strip().lower()
    if flag in ("0", "false", "off", "no"):
        return False
    return bool(config.get("telemetry"))


def start_process(runtime: Any, *, enabled: bool, ship_to: str | None,
                  ingest: Callable[[Any], object] | None, capture: bool) -> None:
    """Sets this process up: resource tags, log capture, and the shipping timer.

    Args:
        runtime: the process runtime (its loop runs the shipping timer).
        enabled: record spans and metrics on the hot paths.
        ship_to: the controller's address (procs), or None in the controller.
        ingest: the controller's store ingestion, used instead of shipping.
        capture: tee stdout/stderr and `logging` into the recorder.
    """
    global ENABLED
    ENABLED = enabled
    identity = runtime.identity
    telemetry.configure({"host": identity.hostname, "proc": identity.name, "pid": os.getpid(),
                         "job": identity.job_id})
    if capture:
        telemetry.install_capture()
    recorder = telemetry.process_recorder()
    sample = queue_sampler(runtime) if enabled else (lambda: None)

    def ship() -> None:
        sample()
        if ingest is not None:  # the controller's own records: no need to encode them
            wire = recorder.drain()
            if wire is not None:
                ingest(wire)
        else:
            batch = recorder.drain_bytes()
            if batch and ship_to is not None and ship_to not in runtime.dead:
                try:
                    runtime.outbox.send(ship_to, Telemetry(identity.name, batch), block=False)
                except PeerGone:
                    pass  # the controller is gone; this proc is about to be stopped
        if not runtime._closing:
            runtime.call_later(SHIP_S, ship)

    runtime.call_later(SHIP_S, ship)
    runtime.flush_telemetry = ship
    runtime.final_telemetry = lambda: _final_flush(runtime, recorder, sample, ship_to, ingest)


FINAL_NOTICE = "telemetry_final"
"""The notice a stopping proc sends after its last `Telemetry` (same link, so it arrives after)."""


def _final_flush(runtime: Any, recorder: Any, sample: Callable[[], None], ship_to: str | None,
                 ingest: Callable[[Any], object] | None) -> None:
    """Ships everything recorded so far (from any thread but the loop's: it may block), then,
    in a proc, tells the controller that was the last of it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # a line still in a buffer reaches the capture now
        except (OSError, ValueError):
            pass
    sample()
    while True:
        if ingest is not None:
            wire = recorder.drain()
            if wire is None:
                return
            ingest(wire)
            continue
        batch = recorder.drain_bytes()
        if ship_to is None or ship_to in runtime.dead:
            return
        try:
            if not batch:
                runtime.outbox.send(ship_to, Notice(FINAL_NOTICE, {"proc": runtime.identity.name}))
                return
            runtime.outbox.send(ship_to, Telemetry(runtime.identity.name, batch))
        except PeerGone:
            return


def queue_sampler(runtime: Any) -> Callable[[], None]:
    """Sets ``queue_depth{actor}`` of each actor of the process when it changed (sampled with
    each shipment, off the message path)."""
    last: dict[str, int] = {}

    def sample() -> None:
        for slot in list(runtime.actors.values()):
            actor, depth = slot.instance.actor_id, slot.queue_depth()
            if last.get(actor) != depth:
                last[actor] = depth
                telemetry.set_queue_depth(actor, depth)

    return sample


def call_span(mesh_name: str, method: str, mode: str) -> Any:
    """The caller's span of one adverb call (not made current: it ends on another thread)."""
    return telemetry.start_site_span(telemetry.call_site(mesh_name, method, mode))


def end_call_span(span: Any, future: Any) -> Callable[[], None]:
    """A done-callback ending `span` with the future's outcome."""
    def end() -> None:
        span.end("error" if future.failed() else "ok")

    return end


def invocation_span(slot: Any, msg: Any, frames: list[Any]) -> Any:
    """The actor's span of one invocation, child of the caller's span; current while it runs."""
    header = slot.header
    site = telemetry.invocation_site(header.name, header.class_name, slot.rank.rank, msg.method)
    return telemetry.begin_invocation(site, msg.trace, sum(map(len, frames)) if frames else 0)


def end_invocation(slot: Any, msg: Any, span: Any, started: float, outcome: str) -> None:
    """Ends an invocation span; that counts the message, its latency and its bytes received
    (``messages_handled``, ``handler_latency_seconds``, ``message_bytes``)."""
    telemetry.end_invocation(span, outcome)


def tag_actor(slot: Any) -> None:
    """Tags log lines of the current thread/task with the actor's mesh and rank."""
    telemetry.set_actor_tags(mesh=slot.header.name, rank=slot.rank.rank,
                             actor_class=slot.header.class_name,
                             actor=slot.instance.actor_id)
