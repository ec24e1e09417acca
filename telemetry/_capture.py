"""Log capture in a process: a stdout/stderr tee and a `logging` handler, both tagging records.

The tee passes every write through unchanged, then records complete lines (one partial-line
buffer per thread, so two threads printing at once do not splice each other's lines). A line a
`logging` handler writes for a record our handler also captures is recorded once, as the
``log`` record, not again as a stream line.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
import time
from typing import Any, TextIO

from . import _context
from ._hlc import process_clock
from ._recorder import Recorder, process_recorder

MAX_PARTIAL = 65536  # a "line" longer than this is recorded in pieces
_time_ns = time.time_ns
_get_ident = threading.get_ident
_trace_var = _context._trace
_tags_var = _context._tags
_clock_now = process_clock().now
_STREAM_LEVELS = {"stdout": logging.INFO, "stderr": logging.WARNING}


def _record(recorder: Recorder | None, stream: str, level: int, text: str, tags: dict[str, Any],
            wall_ns: int) -> None:
    (recorder or process_recorder()).add_log((
        _clock_now(), wall_ns, stream, level, text, tags, _trace_var.get()))


class StreamTee:
    """Wraps a text stream: writes go through unchanged and complete lines are recorded.

    Everything but `write`, `writelines` and `flush` is the wrapped stream's (``encoding``,
    ``isatty()``, ``fileno()``, ``buffer``, ...). Recording never raises into the writer.
    """

    def __init__(self, stream: TextIO, name: str, recorder: Recorder | None = None,
                 skip_logging: LoggingCapture | None = None, passthrough: bool = True) -> None:
        self._stream = stream
        self._passthrough = passthrough  # False: lines are only recorded (someone else prints)
        self._name = name
        self._level = _STREAM_LEVELS.get(name, logging.INFO)
        self._recorder = recorder
        self._skip_logging = skip_logging
        self._partial: dict[int, str] = {}  # thread id -> text after its last newline
        self._unwritten: dict[int, str] = {}  # the same, not passed through yet

    @property
    def wrapped(self) -> TextIO:
        """The stream this tee writes to."""
        return self._stream

    def write(self, text: str) -> int:
        """Writes the lines ``text`` completes to the wrapped stream (whole lines, one write
        and a flush, so the lines of many procs sharing a terminal, pipe or file never mix,
        whatever its buffering: PYTHONUNBUFFERED wrote ``print``'s text and its newline
        apart), then records them.

        `print` writes its text, then its newline: those two writes take a path of their own
        (what the general one would do, without its calls: a printed line is ~18 Python calls
        in the actor's thread, at 1,024 actors printing a line per call)."""
        written = len(text)
        tid = _get_ident()
        partial, unwritten = self._partial, self._unwritten
        if text == "\n":
            try:
                if self._passthrough:
                    self._stream.write(unwritten.pop(tid, "") + text)
                    self._stream.flush()
            except ValueError:  # the stream was closed (interpreter exit)
                pass
            try:
                if self._records(sys._getframe(1)):
                    self._emit(partial.pop(tid, ""))
            except Exception:  # telemetry must never break print()
                pass
            return written
        if (0 < written < MAX_PARTIAL and tid not in partial and tid not in unwritten
                and "\n" not in text and "\r" not in text):  # a line begins
            if self._passthrough:
                unwritten[tid] = text
            try:
                if self._records(sys._getframe(1)):
                    partial[tid] = text
            except Exception:  # telemetry must never break print()
                pass
            return written
        if self._passthrough:
            try:
                self._pass(text)
            except ValueError:  # the stream was closed (interpreter exit)
                pass
        try:
            if self._records(sys._getframe(1)):
                self._capture(text)
        except Exception:  # telemetry must never break print()
            pass
        return written

    def _records(self, caller: Any) -> bool:
        """Whether what `caller` (a frame) writes is recorded: not a line a `logging` handler
        writes for a record our handler records too."""
        skip = self._skip_logging
        return (skip is None or caller.f_globals.get("__name__") != "logging"
                or not skip.wrote_this(caller))

    def writelines(self, lines: Any) -> None:
        """Writes each string of ``lines``."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Writes and flushes this thread's partial line, and records it.

        A line being redrawn in place (a progress bar: it contains ``\r``) stays pending until
        its newline, so each redraw is not recorded as a line of its own.
        """
        tid = _get_ident()
        unwritten = self._unwritten.pop(tid, None)
        if unwritten:
            self._stream.write(unwritten)
        self._stream.flush()
        partial = self._partial.get(tid)
        if partial and "\r" not in partial:
            del self._partial[tid]
            self._emit(partial)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _pass(self, text: str) -> None:
        tid = _get_ident()
        pending = self._unwritten.pop(tid, "") + text
        end = pending.rfind("\n") + 1
        if end == 0 and len(pending) < MAX_PARTIAL:
            if pending:
                self._unwritten[tid] = pending
            return
        if 0 < end < len(pending):
            self._unwritten[tid] = pending[end:]
            pending = pending[:end]
        self._stream.write(pending)
        self._stream.flush()

    def _capture(self, text: str) -> None:
        tid = _get_ident()
        previous = self._partial.pop(tid, None)
        if previous:
            text = previous + text
        newline = text.find("\n")
        if newline < 0:
            if text:
                self._buffer(tid, text)
        elif newline == len(text) - 1:  # the common case: one complete line
            self._emit(text[:-1])
        else:
            lines = text.split("\n")
            rest = lines.pop()
            for line in lines:
                self._emit(line)
            if rest:
                self._buffer(tid, rest)

    def _buffer(self, tid: int, text: str) -> None:
        if "\r" in text:  # only the last redraw stays visible; keep a \r to mark it a redraw
            text = "\r" + _visible(text)
        while len(text) > MAX_PARTIAL:
            self._emit(text[:MAX_PARTIAL])
            text = text[MAX_PARTIAL:]
        self._partial[tid] = text

    def _emit(self, line: str) -> None:
        if "\r" in line:
            line = _visible(line)
        (self._recorder or process_recorder()).add_log((
            _clock_now(), _time_ns(), self._name, self._level, line, _tags_var.get(),
            _trace_var.get()))


def _visible(text: str) -> str:
    """What a terminal shows of ``text`` after its carriage returns."""
    return text.rstrip("\r").rsplit("\r", 1)[-1]


class LoggingCapture(logging.Handler):
    """A `logging.Handler` that records each record as a ``log`` LogRecord.

    Tags: the current actor tags plus ``logger``. The text is the message, then the formatted
    exception and stack if any.
    """

    def __init__(self, recorder: Recorder | None = None, level: int = logging.NOTSET,
                 echo: bool = True) -> None:
        super().__init__(level)
        self._recorder = recorder
        self._echo = echo  # print what no other handler takes, as Python would
        self._formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        """Records ``record``; never raises. A record no other handler takes is also printed
        the way Python prints it when no handler is set (`logging.lastResort`): capturing
        must not hide a warning a program would otherwise show."""
        try:
            tags = {**_context._tags.get(), "logger": record.name}
            _record(self._recorder, "log", record.levelno, self._text(record), tags,
                    int(record.created * 1e9))
            if self._echo and self._alone(record) and logging.lastResort is not None \
                    and record.levelno >= logging.lastResort.level:
                stream = sys.stderr
                stream = stream.wrapped if isinstance(stream, StreamTee) else stream
                stream.write(record.getMessage() + "\n")
                stream.flush()
        except Exception:  # telemetry must never break logging
            pass

    def _alone(self, record: logging.LogRecord) -> bool:
        """True when no other handler on the record's way to the root logger takes it."""
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(h is not self and record.levelno >= h.level for h in logger.handlers):
                return False
            if not logger.propagate:
                break
            logger = logger.parent
        return True

    def wrote_this(self, frame: Any) -> bool:
        """True if ``frame`` (in module `logging`) writes a record this handler also records."""
        record = frame.f_locals.get("record")
        return isinstance(record, logging.LogRecord) and self._reaches_me(record)

    def _reaches_me(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return False
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if self in logger.handlers:
                return True
            if not logger.propagate:
                return False
            logger = logger.parent
        return False

    def _text(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        prefix = getattr(record, "actor_prefix", None)  # the runtime's `[actor=...] `: a tag
        if prefix and text.startswith(prefix):
            text = text[len(prefix):]
        if record.exc_info:
            text += "\n" + self._formatter.formatException(record.exc_info)
        if record.stack_info:
            text += "\n" + self._formatter.formatStack(record.stack_info)
        return text


@dataclasses.dataclass
class Capture:
    """What `install_capture` installed; `uninstall` puts things back."""

    stdout: StreamTee | None
    stderr: StreamTee | None
    handler: LoggingCapture | None

    def uninstall(self) -> None:
        """Restores sys.stdout/sys.stderr (if still ours) and removes the logging handler."""
        for tee, attr in ((self.stdout, "stdout"), (self.stderr, "stderr")):
            if tee is not None and getattr(sys, attr) is tee:
                tee.flush()
                setattr(sys, attr, tee.wrapped)
        if self.handler is not None:
            logging.getLogger().removeHandler(self.handler)


def install_capture(recorder: Recorder | None = None, *, streams: bool = True,
                    logging_level: int | None = logging.NOTSET,
                    passthrough: bool = True) -> Capture:
    """Starts capturing this process's stdout/stderr lines and `logging` records.

    Args:
        recorder: where records go; defaults to the process recorder.
        streams: wrap sys.stdout and sys.stderr in a `StreamTee` (not twice).
        logging_level: level of the handler added to the root logger (None: no handler).
            The root logger's own level still filters records, as usual.
        passthrough: False records lines without writing them to the real streams (and
            without printing unhandled log records): another process prints them.

    Returns:
        A `Capture`; call ``uninstall()`` to undo.
    """
    handler = None
    if logging_level is not None:
        handler = LoggingCapture(recorder, logging_level, echo=passthrough)
        logging.getLogger().addHandler(handler)
    _threads_inherit_tags()
    return Capture(_tee("stdout", recorder, handler, passthrough) if streams else None,
                   _tee("stderr", recorder, handler, passthrough) if streams else None, handler)


def _tee(name: str, recorder: Recorder | None, handler: LoggingCapture | None,
         passthrough: bool = True) -> StreamTee | None:
    stream = getattr(sys, name)
    if stream is None or isinstance(stream, StreamTee):
        return None
    tee = StreamTee(stream, name, recorder, handler, passthrough)
    setattr(sys, name, tee)
    return tee


def _threads_inherit_tags() -> None:
    """A thread started by an actor (a library's background thread: torchft's, a data
    loader's) logs with that actor's tags, not as the proc's root (`[actor=<root>]`, no mesh
    in the logs table): `Thread.start` hands the starter's tags to the new thread. Once per
    process; a thread started with no tags set is left as it is."""
    if getattr(threading.Thread.start, "_monarch_tags", False):
        return
    start = threading.Thread.start

    def start_tagged(self: threading.Thread) -> None:
        tags = _tags_var.get()
        if tags:
            run = self.run

            def run_tagged() -> None:
                _tags_var.set(tags)
                run()

            self.run = run_tagged  # type: ignore[method-assign]
        start(self)

    start_tagged._monarch_tags = True  # type: ignore[attr-defined]
    threading.Thread.start = start_tagged  # type: ignore[method-assign]
