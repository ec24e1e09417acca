"""An idle process looks at its telemetry less and less often, and a live record brings the
looks back at once: `_instrument.Looks` spaces them out (64 idle procs took ~27 % of a core,
most of it looking 10 times a second at nothing), `Recorder.on_live` wakes them."""

from __future__ import annotations

import pytest

from monarch._actors._slots import UNSHIPPED
from monarch._runtime import _instrument
from monarch._runtime._instrument import (BACKLOG, BULK_S, DRAIN_ITEMS, IDLE_TICK_S, LIVE_S,
                                          SHIP_S, UNWATCHED_LIVE_S, Looks, Pace)
from telemetry._sites import invocation_site
from telemetry._records import FailureRecord, TransferRecord
from telemetry._recorder import Recorder


def test_the_looks_space_out_while_idle_and_come_back_with_a_record() -> None:
    looks = Looks()
    waits = [looks.after(idle=True) for _ in range(6)]
    assert waits == sorted(waits) and waits[0] == 2 * SHIP_S
    assert waits[-1] == IDLE_TICK_S  # capped
    assert looks.after(idle=False) == SHIP_S  # something was recorded: back to every SHIP_S
    assert looks.after(idle=True) == 2 * SHIP_S


def test_a_restart_starts_a_new_chain_at_the_fast_pace() -> None:
    looks = Looks()
    for _ in range(5):
        looks.after(idle=True)
    old = looks.chain
    new = looks.restart()
    assert new != old and looks.chain == new  # the old chain's pending look is a no-op
    assert looks.wait == SHIP_S


def _woken(recorder: Recorder) -> list[int]:
    calls: list[int] = []
    recorder.on_live = lambda: calls.append(1)
    return calls


def test_a_log_line_a_transfer_or_a_failure_wakes_the_looks_once() -> None:
    recorder = Recorder()
    calls = _woken(recorder)
    recorder.add_log((0, 0, "stdout", "INFO", "a line", {}, None))
    recorder.add_log((0, 0, "stdout", "INFO", "another", {}, None))
    assert calls == [1]  # once: the shipper sets it again when it spaces the looks out
    assert recorder.on_live is None
    calls = _woken(recorder)
    recorder.add_transfer(TransferRecord(nbytes=1, seconds=0.1, src="a", dst="b", kind="tcp"))
    assert calls == [1]


def test_spans_do_not_wake_the_looks() -> None:
    """Spans are shipped in bulk (every BULK_S): a busy proc's spans would else wake it per
    call; the next look sees them and brings the fast pace back."""
    recorder = Recorder()
    calls = _woken(recorder)
    recorder.add_site_span((0, 1, 2, 0, 0, None, 1, "ok"))
    assert calls == [] and recorder.pending() == 1


@pytest.mark.parametrize("watched", [True, False])
def test_a_stream_of_lines_ships_at_the_live_pace_and_a_lone_line_at_once(
        watched: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Live records leave at the next look after a quiet spell, and no sooner than `LIVE_S`
    (someone watches the job live) or `UNWATCHED_LIVE_S` (nobody does) after the last
    shipment while they keep coming (each shipment costs both sides a fixed ~0.5 ms); the
    bulk leaves every `BULK_S`."""
    monkeypatch.setattr(_instrument, "WATCHED", watched)
    live_s = LIVE_S if watched else UNWATCHED_LIVE_S
    assert LIVE_S < UNWATCHED_LIVE_S <= BULK_S
    pace = Pace(now=100.0)
    assert pace.live_due(100.1)  # nothing shipped yet: a first line goes at once
    pace.sent_at = 100.1
    assert not pace.live_due(100.2) and not pace.live_due(100.1 + live_s - 0.01)
    assert pace.live_due(100.1 + live_s)
    assert not pace.bulk_due(100.0 + BULK_S - 0.01) and pace.bulk_due(100.0 + BULK_S)
    pace.sent_at = pace.bulk_at = 101.0  # a bulk shipment carries the lines too
    assert not pace.live_due(101.1) and pace.live_due(105.0)


def test_a_failure_does_not_wait_for_the_live_pace() -> None:
    """Lines wait for `LIVE_S` while they keep coming; a failure is urgent: the next look
    ships it whatever the pace."""
    recorder = Recorder()
    recorder.add_log((0, 0, "stdout", "INFO", "a line", {}, None))
    assert recorder.live() and not recorder.urgent()
    recorder.add_failure(FailureRecord(mesh="m", rank=0, actor_class="A", host="h", pid=1,
                                       exit_code=None, signal=None, reason="boom"))
    assert recorder.urgent()
    recorder.drain(live_only=True)
    assert not recorder.urgent() and not recorder.live()


def test_a_look_every_ship_s_still_drains_as_fast_as_a_look_every_tenth_of_a_second() -> None:
    """The looks were spaced from 0.1 s to `SHIP_S`: one shipment takes `DRAIN_ITEMS` of a
    kind (a backlog of `BACKLOG` ships at the next look), so a busy proc's spans and flight
    records leave at least as fast as 4,096 a kind every 0.1 s did, and an actor's flight
    recorder holds what it records between two looks at the 8,192 per 0.1 s it held before."""
    assert DRAIN_ITEMS / SHIP_S >= 4096 / 0.1
    assert UNSHIPPED / SHIP_S >= 8192 / 0.1
    site = invocation_site("drained", "Drained", 0, "step")
    recorder = Recorder()
    for i in range(DRAIN_ITEMS):
        recorder.add_site_span((site.id, bytes(16), i.to_bytes(8, "big"), None, i, None,
                                i + 1, "ok"))
    assert recorder.due(BACKLOG)
    wire = recorder.drain(DRAIN_ITEMS)
    assert wire is not None and len(wire[8][0]) == DRAIN_ITEMS  # every span, one shipment
    assert recorder.pending() == 0
