from __future__ import annotations

import os
import sys
import threading

from monarch.telemetry import (
    BATCH_VERSION,
    FailureRecord,
    Recorder,
    TransferRecord,
    decode_batch,
    encode_batch,
    record_transfer,
    reset_actor_tags,
    set_actor_tags,
    start_span,
)
from monarch.telemetry._actors import message_group
from monarch.telemetry._capture import StreamTee


def lines_of(wire: list) -> list[tuple]:
    """A drained batch's lines as rows (hlc, wall, stream, level, text, tag index, trace
    context): a recorder ships them as the columns of item 13."""
    assert wire[3] == []  # no line as a row
    return list(zip(*wire[13])) if wire[13] else []


def test_drain_of_an_idle_recorder_is_none(recorder: Recorder) -> None:
    assert recorder.drain() is None


def test_full_buffer_drops_new_records_and_counts_them() -> None:
    small = Recorder(max_spans=2)
    for i in range(5):
        start_span(f"s{i}", recorder=small).end()
    assert small.dropped()["span"] == 3
    assert small.statistics().pending["span"] == 2
    wire = small.drain()
    assert wire is not None
    assert [s[3] for s in wire[2]] == ["s0", "s1"]
    dropped = [m for m in wire[4] if m[0] == "telemetry_dropped"]
    assert dropped and dropped[0][2] == {"kind": "span"} and dropped[0][3] == 3


def test_batch_wire_format(recorder: Recorder, drain) -> None:
    span = start_span("Trainer.step", attributes={"mesh": "trainer", "rank": 1})
    span.end()
    record_transfer(1024, 0.5, "proc-a", "proc-b", "shm", mesh="trainer")
    recorder.add_failure(FailureRecord("trainer", 1, "Trainer", "h1", 7, None, None, "boom", "tb"))
    wire = drain(recorder)
    (version, resource, spans, logs, metrics, transfers, failures, sites, site_spans, statuses,
     messages, log_tags, tallies, log_columns, log_tag_numbers) = wire
    assert version == BATCH_VERSION and sites == [] and site_spans == [] and tallies == []
    assert statuses == [] and messages == [] and log_tags == []
    assert resource == {"pid": os.getpid(), "host": "h1", "proc": "proc-a", "job": "j1"}
    assert spans[0][3] == "Trainer.step" and spans[0][8] == "proc-a"
    assert logs == [] and log_columns == [] and log_tag_numbers == []
    assert transfers[0][:5] == [1024, 0.5, "proc-a", "proc-b", "shm"]
    assert failures[0][0] == "trainer" and failures[0][7] == "boom"
    names = {m[0] for m in metrics}
    assert {"transfer_bytes", "transfers"} <= names


def test_drained_bytes_decode_to_records(recorder: Recorder, drain) -> None:
    start_span("a").end()
    batch = decode_batch(encode_batch(drain(recorder)))
    assert [s.name for s in batch.spans] == ["a"]
    assert batch.resource["proc"] == "proc-a"
    assert isinstance(batch.transfers, list) and batch.invalid == 0


def test_drain_takes_at_most_max_items_per_kind(recorder: Recorder) -> None:
    for i in range(5):
        start_span(str(i)).end()
    first = recorder.drain(max_items=3)
    second = recorder.drain(max_items=3)
    assert first is not None and second is not None
    assert [s[3] for s in first[2]] == ["0", "1", "2"]
    assert [s[3] for s in second[2]] == ["3", "4"]


def test_due_when_what_waits_is_watched_live_or_a_backlog(recorder: Recorder, drain) -> None:
    """Spans wait for the bulk shipment unless a backlog piles up (`due`); a log line, a
    transfer or a failure is `live` at once, and a drain clears either."""
    for i in range(3):
        start_span(f"s{i}").end()
    assert not recorder.due(backlog=4) and not recorder.live()
    start_span("s3").end()
    assert recorder.due(backlog=4) and not recorder.live()  # the backlog
    drain(recorder)
    assert not recorder.due(backlog=4)
    StreamTee(_Sink(), "stdout", recorder).write("hello\n")
    assert recorder.live() and not recorder.due(backlog=4)
    drain(recorder)
    assert not recorder.live()
    record_transfer(1024, 0.5, "proc-a", "proc-b", "shm", mesh="trainer")
    assert recorder.live()
    drain(recorder)
    recorder.add_failure(FailureRecord("trainer", 1, "Trainer", "h1", 7, None, None, "boom"))
    assert recorder.live()
    drain(recorder)
    assert not recorder.live()
    entry = ("step", "root", 1, 2, "ok", 0)
    recorder.add_message_group(message_group("a0", "trainer", 0, [entry] * 3))
    assert not recorder.due(backlog=4)
    recorder.add_message_group(message_group("a0", "trainer", 0, [entry]))
    assert recorder.due(backlog=4)  # flight-recorder entries pile up too
    drain(recorder)
    assert not recorder.due(backlog=4)


def test_a_live_drain_takes_lines_failures_and_transfers_and_leaves_the_bulk(
        recorder: Recorder) -> None:
    """A proc printing a line per call ships its lines at once, and its spans, metrics,
    statuses and flight records with the next full drain: nothing is taken twice or lost."""
    start_span("work").end()
    recorder.metrics.inc(("messages_handled", "step"))
    recorder.add_message_group(message_group("a0", "trainer", 0, [("step", "root", 1, 2,
                                                                   "ok", 0)]))
    StreamTee(_Sink(), "stdout", recorder).write("hello\n")
    recorder.add_failure(FailureRecord("trainer", 1, "Trainer", "h1", 7, None, None, "boom"))
    live = recorder.drain(live_only=True)
    assert live is not None
    (_, _, spans, _, metrics, transfers, failures, sites, site_spans, statuses, groups, _,
     tallies, _, _) = live
    assert [x[4] for x in lines_of(live)] == ["hello"] and len(failures) == 1
    assert spans == metrics == sites == site_spans == statuses == groups == tallies == []
    assert recorder.drain(live_only=True) is None  # nothing live is left
    rest = recorder.drain()
    assert rest is not None and not rest[13] and not rest[6]  # the lines went once
    assert [s[3] for s in rest[2]] == ["work"] and len(rest[10]) == 1
    assert any(m[0] == "messages_handled" for m in rest[4])


def test_log_lines_carry_resource_and_actor_tags(recorder: Recorder, drain) -> None:
    sink = _Sink()
    tee = StreamTee(sink, "stdout", recorder)
    token = set_actor_tags(mesh="trainer", actor_class="Trainer", rank=2)
    tee.write("hello\n")
    reset_actor_tags(token)
    tee.write("after\n")
    wire = drain(recorder)
    logs, table = lines_of(wire), wire[11]  # a line's tags: an index into the batch's table
    assert table[logs[0][5]] == {"pid": os.getpid(), "host": "h1", "proc": "proc-a",
                                 "job": "j1", "mesh": "trainer", "actor_class": "Trainer",
                                 "rank": 2}
    assert "mesh" not in table[logs[1][5]] and len(table) == 2


def test_lines_share_their_tags_through_the_batch_table(recorder: Recorder) -> None:
    """A batch carries each distinct tags dict once; decoded, an actor's lines share one
    dict; a line whose index is not in the table is dropped and counted, the rest kept."""
    from monarch.telemetry._batch import decode_batch, encode_batch

    tee = StreamTee(_Sink(), "stdout", recorder)
    token = set_actor_tags(mesh="trainer", rank=1)
    for i in range(5):
        tee.write(f"t{i}\n")
    reset_actor_tags(token)
    tee.write("root\n")
    wire = recorder.drain()
    assert len(wire[11]) == 2 and [line[5] for line in lines_of(wire)] == [0, 0, 0, 0, 0, 1]
    wire[13][5][2] = 7  # not in the table
    batch = decode_batch(encode_batch(wire))
    assert [r.text for r in batch.logs] == ["t0", "t1", "t3", "t4", "root"]
    assert batch.invalid == 1
    first, *rest = [r.tags for r in batch.logs[:4]]
    assert all(tags is first for tags in rest) and first["mesh"] == "trainer"
    assert "mesh" not in batch.logs[4].tags and batch.logs[4].tags["proc"] == "proc-a"


def test_after_fork_empties_everything(recorder: Recorder) -> None:
    start_span("a").end()
    recorder.add_transfer(TransferRecord(1, 1.0, "a", "b", "shm"))
    recorder.after_fork()
    assert recorder.drain() is None
    assert recorder.pending() == 0


class _Sink:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_log_lines_are_bounded_by_their_text_too() -> None:
    # a line may be 64 KiB: a count alone would let 16k of them hold a gigabyte
    recorder = Recorder(max_log_bytes=1000)
    for i in range(10):
        recorder.add_log((i, i, "stdout", 20, "x" * 300, {}, None))
    assert recorder.dropped()["log"] == 6  # 4 fit under 1000 bytes
    assert len(lines_of(recorder.drain())) == 4
    recorder.add_log((11, 11, "stdout", 20, "y" * 300, {}, None))  # drained: room again
    assert [line[4][0] for line in lines_of(recorder.drain())] == ["y"]


def test_draining_while_actors_print_loses_no_line() -> None:
    """Two threads print while the shipper drains: every line is shipped once. Recounting the
    buffered text with a generator raised "deque mutated during iteration" when a line landed
    mid-count, and the lines that drain had taken were lost with the batch."""
    recorder = Recorder(max_logs=10**6, max_log_bytes=1 << 30)
    per_thread, shipped = 20_000, []
    tags: dict = {}

    def print_lines(name: str) -> None:
        for i in range(per_thread):
            recorder.add_log((i, i, "stdout", 20, f"{name} {i}", tags, None))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as the interpreter can
    try:
        printers = [threading.Thread(target=print_lines, args=(n,)) for n in "ab"]
        for thread in printers:
            thread.start()
        while any(t.is_alive() for t in printers) or recorder.statistics().pending["log"]:
            wire = recorder.drain(max_items=500, live_only=True)
            if wire is not None:
                shipped += [line[4] for line in lines_of(wire)]
        for thread in printers:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(shipped) == len(set(shipped)) == 2 * per_thread
