"""The log book appends batches as they come and sorts only what a read or an eviction needs
(`telemetry._logbook`): whatever the order batches arrive in, and however reads interleave,
what it returns is what a book that put every line in its place at once would return."""

from __future__ import annotations

import random

import pytest

from monarch.telemetry import LogRecord
from monarch.telemetry import _logbook
from monarch.telemetry._logbook import LogBook


def line(hlc: int, proc: str, text: str) -> LogRecord:
    return LogRecord(hlc, hlc, "stdout", 20, text, {"proc": proc, "pid": 1, "mesh": "m"})


def batches(rng: random.Random, count: int) -> list[list[LogRecord]]:
    """Each proc's lines in its own order, shipped in batches that arrive late and
    interleaved (as procs' shipments do)."""
    clocks = {f"p{i}": 0 for i in range(6)}
    out = []
    for n in range(count):
        proc = rng.choice(list(clocks))
        batch = []
        for _ in range(rng.randrange(1, 9)):
            clocks[proc] += rng.randrange(0, 40)  # equal stamps too: arrival breaks ties
            batch.append(line(clocks[proc], proc, f"{proc}-{n}-{len(batch)}"))
        out.append(batch)
    return out


def in_order(lines: list[LogRecord]) -> list[LogRecord]:
    order = sorted(range(len(lines)), key=lambda i: (lines[i].hlc, lines[i].tags["proc"], i))
    return [lines[i] for i in order]


def reference(lines: list[LogRecord]) -> list[str]:
    return [r.text for r in in_order(lines)]


@pytest.mark.parametrize("settle_at", [8192, 16])
@pytest.mark.parametrize("seed", range(6))
def test_reads_see_every_line_in_order_whatever_the_batches_order(
        seed: int, settle_at: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_logbook, "SETTLE_AT", settle_at)  # 16: sorts between the reads too
    rng = random.Random(seed)
    book, seen = LogBook(10**6, 10**12), []
    for batch in batches(rng, 300):
        book.add_many(batch)
        seen += batch
        if rng.random() < 0.2:  # a read now and then (the console's poll)
            assert [r.text for r in book.all()] == reference(seen)
            limit = rng.randrange(1, 50)
            assert [r.text for r in book.find(None, None, None, None, None, limit)] == \
                reference(seen)[-limit:]
            since = rng.choice(seen).hlc
            after = [r.text for r in book.find(None, None, since, None, None, 10**6)]
            assert after == [r.text for r in in_order(seen) if r.hlc > since]
    assert [r.text for r in book.all()] == reference(seen)
    assert book.has(seen[7]) and not book.has(line(seen[7].hlc, seen[7].tags["proc"], "x"))


@pytest.mark.parametrize("seed", range(4))
def test_a_full_book_evicts_the_lowest_stamps(seed: int) -> None:
    rng = random.Random(seed)
    book, seen, evicted = LogBook(200, 10**12), [], 0
    for batch in batches(rng, 200):
        evicted += book.add_many(batch)
        seen += batch
    kept = [r.text for r in book.all()]
    assert len(kept) <= 200 and evicted == len(seen) - len(kept)
    assert kept == reference(seen)[-len(kept):]


@pytest.mark.parametrize("seed", range(3))
def test_a_book_nobody_reads_sorts_in_bounded_steps(seed: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The unsorted tail never grows past `SETTLE_AT` (and a batch): a book that filled unread
    sorted every line it held at its first eviction, one long stop of the controller's loop."""
    monkeypatch.setattr(_logbook, "SETTLE_AT", 64)
    rng = random.Random(seed)
    book, seen, widest = LogBook(10**6, 10**12), [], 0
    for batch in batches(rng, 500):
        book.add_many(batch)
        seen += batch
        widest = max(widest, len(book) - book._sorted)
    assert widest < 64 + 8 and len(seen) > 1000
    assert [r.text for r in book.all()] == reference(seen)
