from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
from collections.abc import Iterator

import pytest
from monarch.telemetry._batch import decode_batch
from monarch.telemetry import (
    LoggingCapture,
    LogRecord,
    Recorder,
    StreamTee,
    install_capture,
    reset_actor_tags,
    set_actor_tags,
    start_span,
)


class FakeTerminal(io.StringIO):
    """A text stream with the attributes a real sys.stdout has."""

    encoding = "utf-8"

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return 42


def lines(recorder: Recorder) -> list[LogRecord]:
    wire = recorder.drain(10**6)
    return [] if wire is None else decode_batch(wire).logs


@pytest.fixture
def tee(recorder: Recorder) -> StreamTee:
    return StreamTee(FakeTerminal(), "stdout", recorder)


def test_writes_pass_through_unchanged(tee: StreamTee) -> None:
    assert tee.write("abc\nde") == 6
    print("fg", file=tee)  # type: ignore[arg-type]
    assert tee.wrapped.getvalue() == "abc\ndefg\n"  # type: ignore[attr-defined]


def test_stream_attributes_are_the_wrapped_streams(tee: StreamTee) -> None:
    assert tee.encoding == "utf-8" and tee.isatty() and tee.fileno() == 42
    assert tee.getvalue() == ""  # anything else is delegated too


def test_complete_lines_are_recorded_and_partial_ones_wait(tee: StreamTee,
                                                           recorder: Recorder) -> None:
    tee.write("one\ntw")
    assert [r.text for r in lines(recorder)] == ["one"]
    tee.write("o\n\nthree")
    assert [r.text for r in lines(recorder)] == ["two", ""]
    tee.flush()
    got = lines(recorder)
    assert [(r.text, r.stream, r.level) for r in got] == [("three", "stdout", logging.INFO)]


def test_print_records_one_line(tee: StreamTee, recorder: Recorder) -> None:
    print("a", 1, "b", file=tee)  # type: ignore[arg-type]
    assert [r.text for r in lines(recorder)] == ["a 1 b"]


def test_lines_are_tagged_with_actor_and_trace(tee: StreamTee, recorder: Recorder) -> None:
    token = set_actor_tags(mesh="trainer", rank=3)
    with start_span("step") as span:
        tee.write("in handler\n")
    reset_actor_tags(token)
    (record,) = lines(recorder)
    assert record.tags["mesh"] == "trainer" and record.rank == 3
    assert record.tags["proc"] == "proc-a" and record.tags["host"] == "h1"
    assert (record.trace_id, record.span_id) == span.context


def test_threads_do_not_splice_each_others_lines(tee: StreamTee, recorder: Recorder) -> None:
    go = threading.Barrier(2)

    def write(word: str) -> None:
        go.wait()
        for _ in range(200):
            tee.write(word)
            tee.write(word + "\n")

    threads = [threading.Thread(target=write, args=(w,)) for w in ("x", "y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {r.text for r in lines(recorder)} == {"xx", "yy"}


def test_carriage_returns_keep_the_last_redraw(tee: StreamTee, recorder: Recorder) -> None:
    tee.write("10%\r50%\r100%\r\n")
    assert [r.text for r in lines(recorder)] == ["100%"]


def test_progress_bar_is_one_line_however_often_it_is_flushed(tee: StreamTee,
                                                               recorder: Recorder) -> None:
    for percent in range(0, 101, 10):
        tee.write(f"\rtraining {percent}%")
        tee.flush()
    assert lines(recorder) == []
    tee.write("\n")
    assert [r.text for r in lines(recorder)] == ["training 100%"]
    assert tee.wrapped.getvalue().endswith("\rtraining 100%\n")  # type: ignore[attr-defined]


def test_recording_failure_never_breaks_the_write(recorder: Recorder) -> None:
    class Broken(Recorder):
        def add_log(self, fields: tuple) -> None:
            raise RuntimeError("telemetry bug")

    tee = StreamTee(FakeTerminal(), "stderr", Broken())
    assert tee.write("still printed\n") == 14


def test_full_buffer_drops_lines_without_blocking() -> None:
    small = Recorder(max_logs=3)
    tee = StreamTee(FakeTerminal(), "stdout", small)
    for i in range(10):
        tee.write(f"{i}\n")
    assert small.dropped()["log"] == 7


@contextlib.contextmanager
def capturing() -> Iterator[None]:
    # Installed inside the test body: pytest re-sets sys.stdout/err between fixture setup and
    # the test call, which would unwrap a tee installed by a fixture.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    capture = install_capture()
    try:
        yield
    finally:
        capture.uninstall()
        root.setLevel(level)


@pytest.fixture
def captured(recorder: Recorder) -> Iterator[Recorder]:
    with capturing():
        yield recorder


def test_print_to_captured_stdout_is_recorded(recorder: Recorder) -> None:
    with capturing():
        print("from print")
    assert [(r.stream, r.text) for r in lines(recorder)] == [("stdout", "from print")]


def test_install_wraps_std_streams_and_uninstall_restores(recorder: Recorder) -> None:
    before = sys.stdout, sys.stderr
    capture = install_capture(logging_level=None)
    assert isinstance(sys.stdout, StreamTee) and isinstance(sys.stderr, StreamTee)
    assert install_capture(logging_level=None).stdout is None  # never wrapped twice
    capture.uninstall()
    assert (sys.stdout, sys.stderr) == before


def test_logging_records_are_captured_with_logger_and_level(captured: Recorder) -> None:
    token = set_actor_tags(mesh="trainer", rank=1)
    logging.getLogger("my.lib").warning("careful %s", "now")
    reset_actor_tags(token)
    got = [r for r in lines(captured) if r.stream == "log"]
    assert [(r.text, r.level, r.tags["logger"], r.rank) for r in got] == [
        ("careful now", logging.WARNING, "my.lib", 1)]


def test_logging_exception_text_is_kept(captured: Recorder) -> None:
    try:
        raise KeyError("k")
    except KeyError:
        logging.getLogger("x").exception("failed")
    (record,) = [r for r in lines(captured) if r.stream == "log"]
    assert record.text.startswith("failed\nTraceback") and "KeyError" in record.text


def test_line_a_stream_handler_writes_is_not_recorded_twice(recorder: Recorder) -> None:
    with capturing():
        handler = logging.StreamHandler(sys.stderr)  # writes through the tee
        logging.getLogger().addHandler(handler)
        try:
            logging.getLogger("lib").warning("once")
            sys.stderr.write("plain stderr\n")
        finally:
            logging.getLogger().removeHandler(handler)
    got = [(r.stream, r.text) for r in lines(recorder)]
    assert got == [("log", "once"), ("stderr", "plain stderr")]


def test_stream_handler_of_a_non_propagating_logger_is_still_captured(recorder: Recorder
                                                                       ) -> None:
    from monarch import config

    lonely = logging.getLogger("lonely")
    prefixing, config.prefix_python_logs_with_actor = config.prefix_python_logs_with_actor, False
    with capturing():  # (without the runtime's `[actor=...]` prefix, if a job runs here)
        lonely.propagate = False
        handler = logging.StreamHandler(sys.stderr)
        lonely.addHandler(handler)
        try:
            lonely.warning("only on stderr")
        finally:
            lonely.removeHandler(handler)
            lonely.propagate = True
            config.prefix_python_logs_with_actor = prefixing
    assert [(r.stream, r.text) for r in lines(recorder)] == [("stderr", "only on stderr")]


def test_logging_capture_never_raises(recorder: Recorder) -> None:
    handler = LoggingCapture(recorder)
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%d", ("not a number",), None)
    handler.emit(record)  # getMessage raises inside; swallowed
