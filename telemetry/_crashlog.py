"""What a proc recorded but may not have shipped, kept where its SIGKILL cannot take it.

A proc ships its records every 100 ms; one killed between two shipments took the log lines
and user spans of its last moments with it (the ones that explain the kill). So each accepted
line and user span is also written, one `os.write` of its msgpack form (~2 µs), to a file of
its own: two files used in turn (``<stem>.tlog0``, ``<stem>.tlog1``). Before a shipment that
follows one which emptied the buffers, the recorder `turn`s: it truncates the other file (what
it held was shipped by that shipment) and writes there from now on. So the two files always
hold everything not shipped yet, and at most two shipments' worth more.

When a proc dies of anything but a clean stop, its host agent reads both files (`recover`)
and sends their records to the controller, flagged as recovered; the store keeps the ones it
does not have yet (a record in the files may have been shipped already). A proc that ends
cleanly removes its files. Everything here is best effort and never raises into the caller:
telemetry never breaks the actor.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

SUFFIXES = (".tlog0", ".tlog1")
MAX_FILE_BYTES = 64 << 20
"""A file this large takes no more records (the buffers it mirrors are bounded; this bounds
the file when shipping stalls for long)."""

_packb: Any = None


class CrashLog:
    """The two files of one proc, written as records are buffered.

    Args:
        stem: the files' path without its suffix (e.g. ``<run dir>/<proc>``).
    """

    def __init__(self, stem: str) -> None:
        global _packb
        import msgpack  # here, not at import: importing telemetry reads no environment

        _packb = msgpack.packb
        self.paths = [stem + suffix for suffix in SUFFIXES]
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC
        self._fds = [os.open(path, flags, 0o600) for path in self.paths]
        self._sizes = [0, 0]
        self._active = 0

    def write(self, kind: str, fields: Any) -> None:
        """Appends one record (``log`` or ``span`` fields as the recorder buffers them)."""
        active = self._active
        if self._sizes[active] >= MAX_FILE_BYTES:
            return
        try:
            data = _packb([kind, fields], use_bin_type=True, default=_plain)
            os.write(self._fds[active], data)
        except Exception:  # noqa: BLE001 - a closed file, a full disk, an odd value
            return
        self._sizes[active] += len(data)

    def turn(self) -> None:
        """Empties the other file and writes there from now on (what it held was shipped)."""
        other = 1 - self._active
        try:
            os.ftruncate(self._fds[other], 0)
        except OSError:
            return
        self._sizes[other] = 0
        self._active = other

    def close(self, remove: bool = True) -> None:
        """Closes the files (and removes them: the proc ends cleanly, nothing to recover)."""
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        if remove:
            for path in self.paths:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass


def _plain(value: Any) -> Any:
    """What msgpack cannot pack as it is: a mapping (the actor tags are a read-only view) as
    a dict, any other sequence as a list, anything else as its text."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return str(value)


def recover(stem: str, remove: bool = True) -> tuple[list[Any], list[Any]]:
    """(log fields, user span fields) in the files of a dead proc, each once; a record cut
    short by the kill is skipped. Removes the files unless ``remove`` is False."""
    import msgpack

    logs: dict[Any, Any] = {}
    spans: dict[Any, Any] = {}
    for path in (stem + suffix for suffix in SUFFIXES):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if remove:
            os.unlink(path)
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        unpacker.feed(data)
        try:
            for item in unpacker:
                _take(item, logs, spans)
        except Exception:  # noqa: BLE001 - garbage past a torn record: keep what read
            pass
    return list(logs.values()), list(spans.values())


def _take(item: Any, logs: dict[Any, Any], spans: dict[Any, Any]) -> None:
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], list)):
        return
    kind, fields = item
    if (kind == "log" and len(fields) >= 7 and type(fields[0]) is int
            and type(fields[4]) is str and isinstance(fields[5], dict)):
        logs[(fields[0], fields[4])] = fields  # (hlc, text)
    elif kind == "span" and len(fields) >= 8 and isinstance(fields[1], bytes):
        spans[fields[1]] = fields  # span id
