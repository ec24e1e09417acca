from __future__ import annotations

from monarch.telemetry import LogRecord, compress_ranks, fold

SEC = 10**9


def line(text: str, rank: int | None, t: float = 0.0, stream: str = "stdout") -> LogRecord:
    hlc = int(t * SEC) + 1000 * SEC
    return LogRecord(hlc, hlc, stream, 20, text, {} if rank is None else {"rank": rank})


def test_compress_ranks() -> None:
    assert compress_ranks([0, 1, 2, 3, 6]) == "0-3,6"
    assert compress_ranks([5, 3, 4, 4, 9, 10]) == "3-5,9-10"
    assert compress_ranks([]) == ""
    assert compress_ranks([1, "ctl"]) == "1,ctl"


def test_identical_lines_across_ranks_fold_into_one() -> None:
    records = [line("loss=0.25", r) for r in range(8)] + [line("only me", 3)]
    folded = fold(records)
    assert [str(f) for f in folded] == [
        "[8 similar log lines] [ranks 0-7] loss=0.25", "[3] only me"]
    assert folded[0].unfold() == records[:8]
    assert folded[0].count == 8 and folded[0].ranks == list(range(8))


def test_repeats_from_one_rank_count_as_lines() -> None:
    (folded,) = fold([line("tick", 0), line("tick", 0), line("tick", 1)])
    assert str(folded) == "[3 similar log lines] [ranks 0-1] tick"


def test_windows_and_streams_separate_lines() -> None:
    records = [line("x", 0, 0.1), line("x", 1, 0.2), line("x", 3, 0.3, stream="stderr"),
               line("x", 2, 1.5)]
    assert [(f.stream, f.ranks) for f in fold(records, window=1.0)] == [
        ("stdout", [0, 1]), ("stderr", [3]), ("stdout", [2])]
    assert [f.count for f in fold(records, window=None)] == [3, 1]


def test_lines_without_rank() -> None:
    assert [str(f) for f in fold([line("controller", None), line("controller", None)])] == [
        "[2 similar log lines] controller"]
