"""What a proc recorded but may not have shipped, kept where its SIGKILL cannot take it.

A proc ships its records up to twice a second; one killed between two shipments took the log lines
and user spans of its last moments with it (the ones that explain the kill). So each accepted
line and user span is also copied, in its msgpack form, into a file of its own mapped into
memory: two files used in turn (``<stem>.tlog0``, ``<stem>.tlog1``). A store into a shared file
mapping is the kernel's as soon as it is made, so a SIGKILL or a segfault cannot take it, and it
costs no system call: an `os.write` per line released the GIL in the actor's handler, and at 16
actors a proc that hand-over cost ~14 µs of CPU a printed line. A file starts with the length of
the records it holds (8 bytes, little-endian, stored after the record it covers) and grows by
doubling. Before a shipment that follows one which emptied the buffers, the recorder `turn`s: it
empties the other file (what it held was shipped by that shipment) and writes there from now
on. So the two files always hold everything not shipped yet, and at most two shipments' worth
more.

A line's tags (an actor's: the same object for all its lines) are written once per file, as a
``tags`` record, and each line refers to them by number: packing ten tags per line was a third
of a printed line's cost in the actor's thread. One msgpack packer serves every record (used
under the lock): a packer made per record was another third.

When a proc dies of anything but a clean stop, its host agent reads both files (`recover`)
and sends their records to the controller, flagged as recovered; the store keeps the ones it
does not have yet (a record in the files may have been shipped already). A proc that ends
cleanly removes its files. Everything here is best effort and never raises into the caller:
telemetry never breaks the actor.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from collections.abc import Mapping
from typing import Any

SUFFIXES = (".tlog0", ".tlog1")
MAX_FILE_BYTES = 64 << 20
"""A file this large takes no more records (the buffers it mirrors are bounded; this bounds
the file when shipping stalls for long)."""
FIRST_BYTES = 256 << 10
"""A file's size at first; it doubles when a record does not fit."""
_HEAD = struct.Struct("<Q")  # the bytes of records that follow

class CrashLog:
    """The two files of one proc, written as records are buffered.

    Args:
        stem: the files' path without its suffix (e.g. ``<run dir>/<proc>``).
    """

    def __init__(self, stem: str) -> None:
        import msgpack  # here, not at import: importing telemetry reads no environment

        self.paths = [stem + suffix for suffix in SUFFIXES]
        self._files = [_Mapped(path) for path in self.paths]
        self._active = self._files[0]
        self._lock = threading.Lock()  # actor threads record at once: one writes at a time
        self._pack = msgpack.Packer(use_bin_type=True, default=_plain).pack  # under _lock

    def write(self, kind: str, fields: Any) -> None:
        """Appends one record (``log`` or ``span`` fields as the recorder buffers them)."""
        try:
            with self._lock:
                active, pack = self._active, self._pack
                if kind != "log":
                    active.append(pack((kind, fields)))
                    return
                tags = fields[5]
                at = active.tags.get(id(tags))
                if at is None:  # the first line of these tags in this file
                    at = active.tags[id(tags)] = len(active.kept)
                    active.kept.append(tags)  # kept: its id stays its own while the file holds it
                    active.append(pack(("tags", (at, tags if type(tags) is dict
                                                 else dict(tags)))))
                active.append(pack(("log", (*fields[:5], at, *fields[6:]))))
        except Exception:  # noqa: BLE001 - a closed file, a full disk, an odd value
            return

    def turn(self) -> None:
        """Empties the other file and writes there from now on (what it held was shipped)."""
        with self._lock:
            other = self._files[1] if self._active is self._files[0] else self._files[0]
            other.clear()
            self._active = other

    def close(self, remove: bool = True) -> None:
        """Closes the files (and removes them: the proc ends cleanly, nothing to recover)."""
        with self._lock:
            for file in self._files:
                file.close()
        if remove:
            for path in self.paths:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass


class _Mapped:
    """One crash file, mapped: a length, then that many bytes of records."""

    def __init__(self, path: str) -> None:
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        self._fd = os.open(path, flags, 0o600)
        self._map: mmap.mmap | None = None
        self._used = 0
        self.tags: dict[int, int] = {}
        """id of a tags object -> its number in this file (written as a ``tags`` record)."""
        self.kept: list[Any] = []
        """The tags objects numbered, in order."""
        self._map_bytes(FIRST_BYTES)

    def _map_bytes(self, size: int) -> mmap.mmap:
        os.ftruncate(self._fd, size)
        if self._map is not None:
            self._map.close()
        self._map = mmap.mmap(self._fd, size)
        return self._map

    def append(self, data: bytes) -> None:
        mapped = self._map
        if mapped is None:
            return
        start = _HEAD.size + self._used
        end = start + len(data)
        if end > len(mapped):
            if end > MAX_FILE_BYTES:
                return
            mapped = self._map_bytes(min(MAX_FILE_BYTES, max(end, 2 * len(mapped))))
        mapped[start:end] = data
        self._used = end - _HEAD.size
        _HEAD.pack_into(mapped, 0, self._used)  # after the record: a kill never tears it

    def clear(self) -> None:
        if self._map is not None:
            self._used = 0
            _HEAD.pack_into(self._map, 0, 0)
        self.tags.clear()
        self.kept.clear()

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
            os.close(self._fd)


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
        if len(data) < _HEAD.size:
            continue
        used = _HEAD.unpack_from(data, 0)[0]
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        unpacker.feed(data[_HEAD.size:_HEAD.size + used])
        tags: dict[Any, Any] = {}  # the file's tags records, by number
        try:
            for item in unpacker:
                _take(item, logs, spans, tags)
        except Exception:  # noqa: BLE001 - garbage past a torn record: keep what read
            pass
    return list(logs.values()), list(spans.values())


def _take(item: Any, logs: dict[Any, Any], spans: dict[Any, Any],
          tags: dict[Any, Any]) -> None:
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], list)):
        return
    kind, fields = item
    if kind == "tags" and len(fields) == 2 and isinstance(fields[1], dict):
        tags[fields[0]] = fields[1]
    elif (kind == "log" and len(fields) >= 7 and type(fields[0]) is int
            and type(fields[4]) is str and type(fields[5]) is int and fields[5] in tags):
        fields[5] = tags[fields[5]]
        logs[(fields[0], fields[4])] = fields  # (hlc, text)
    elif kind == "span" and len(fields) >= 8 and isinstance(fields[1], bytes):
        spans[fields[1]] = fields  # span id
