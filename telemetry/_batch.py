"""A drained batch: what one process ships to the controller in a ``Telemetry`` message.

Wire form (a msgpack-friendly list)::

    [1,                 # BATCH_VERSION
     resource,          # {"host": str, "proc": str, "pid": int, "job": str, ...}
     spans,             # [SpanRecord.to_wire(), ...]
     logs,              # [LogRecord.to_wire(), ...]   (tags already include the resource)
     metrics,           # [MetricPoint.to_wire(), ...]
     transfers,         # [TransferRecord.to_wire(), ...]
     failures,          # [FailureRecord.to_wire(), ...]
     sites,             # [[name, attributes, value_key, counted], ...]: what site spans
                        #  share (counted: [mesh, method] of an invocation site, or None)
     site_spans,        # [site indices, trace ids (bytes, 16 each), span ids (bytes, 8 each),
                        #  parent span ids (bytes, 8 each, zeros: none), start_ns list,
                        #  end_ns list, outcome names, outcome indices, values]: columns
     statuses,          # [ActorStatus.to_wire(), ...]
     message_groups,    # flight records (see `monarch.telemetry._actors`)
     log_tags,          # [{tags}, ...]: a log line whose tags field is an int has these
     tallies,           # [[site index, count, sum of durations ns, bytes in, bucket counts,
                        #  newest end ns], ...]: per invocation site, its spans drained and
                        #  those a full buffer dropped (`monarch.telemetry._sites.Tallies`)
     log_columns,       # [hlcs, wall_ns list, streams, levels, texts, indices into log_tags,
                        #  trace contexts (None or [trace id, span id])]: a proc's lines as
                        #  columns (`monarch.telemetry._logchunk`); ``logs`` is then empty
     log_tag_numbers]   # [int, ...]: the sender's number of each log_tags dict (the same
                        #  number, the same tags, for the sender's life)

Site span ``p`` is the `SpanRecord` named after its site ``sites[site_indices[p]]``, with the
site's attributes plus ``{value_key: values[p]}`` (if value_key is not None), from the batch's
process (see `monarch.telemetry._sites` and `monarch.telemetry._columns`). The invocation
metrics are not in ``metrics``: the store adds up the tallies (`monarch.telemetry._invocations`).
The items after ``failures`` may be missing (a batch of spans in full form only) or empty;
readers ignore trailing items they do not know, so a newer sender may append more. Lines come
as ``logs`` (rows, each with its own tags or an index into ``log_tags``: what a dead proc's crash
files held) or as ``log_columns`` (what a proc's recorder drains).

`encode_batch` turns it into bytes with msgpack (``use_bin_type``); `decode_batch` accepts
either form and returns a `Batch` of records, skipping (and counting) entries it cannot read.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._columns import read_site_spans
from ._logchunk import read_columns
from ._records import FailureRecord, LogRecord, MetricPoint, SpanRecord, TransferRecord

BATCH_VERSION = 1
_KINDS = (SpanRecord, LogRecord, MetricPoint, TransferRecord, FailureRecord)


class BatchError(ValueError):
    """Raised by `decode_batch` for data that is not a batch at all (wrong version or shape).

    The controller drops such a message and counts it; nothing is retried.
    """


@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """A decoded batch. ``invalid`` counts entries that could not be decoded and were skipped."""

    resource: dict[str, Any]
    spans: list[SpanRecord]
    logs: list[LogRecord]
    metrics: list[MetricPoint]
    transfers: list[TransferRecord]
    failures: list[FailureRecord]
    invalid: int = 0

    def records(self) -> list[Any]:
        """Returns every record of the batch, spans first."""
        return [*self.spans, *self.logs, *self.metrics, *self.transfers, *self.failures]


def encode_batch(wire: list[Any]) -> bytes:
    """Encodes a batch's wire list as msgpack bytes."""
    import msgpack  # lazily: importing msgpack reads the environment

    return msgpack.packb(wire, use_bin_type=True)


def decode_batch(data: bytes | list[Any]) -> Batch:
    """Decodes msgpack bytes or a wire list into a `Batch` (site spans become `SpanRecord`s).

    Raises:
        BatchError: ``data`` is not a batch of a version this code reads.
    """
    wire = unpack_batch(data)
    (spans, logs, metrics, transfers, failures), invalid = decode_columns(wire)
    chunk, bad_lines = read_columns(wire, _as_is)
    if chunk is not None:
        logs += chunk.records()
    invalid += bad_lines
    resource = dict(wire[1])
    site_spans, bad = read_site_spans(wire, source_of(resource))
    if site_spans is not None:
        spans += site_spans.records()
    return Batch(resource, spans, logs, metrics, transfers, failures, invalid + bad)


def unpack_batch(data: bytes | bytearray | memoryview | list[Any]) -> list[Any]:
    """Returns the wire list of a batch given as msgpack bytes or as a wire list.

    Raises:
        BatchError: ``data`` is not a batch of a version this code reads.
    """
    wire = _unpack(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    if not isinstance(wire, (list, tuple)) or len(wire) < 7 or wire[0] != BATCH_VERSION:
        raise BatchError(f"not a telemetry batch of version {BATCH_VERSION}")
    if not isinstance(wire[1], dict):
        raise BatchError("batch resource is not a map")
    return list(wire)


def source_of(resource: dict[str, Any]) -> str:
    """A process's name in records: its ``proc`` tag, else ``pid-<pid>``."""
    return str(resource.get("proc") or f"pid-{resource.get('pid')}")


def _unpack(data: bytes | bytearray | memoryview) -> Any:
    import msgpack

    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise BatchError(f"undecodable telemetry batch: {exc}") from None


def decode_columns(wire: list[Any]) -> tuple[list[list[Any]], int]:
    """Decodes the record entries of a batch wire list (not its site spans, nor its log
    columns: `monarch.telemetry._logchunk.read_columns`): returns [spans, logs, metrics,
    transfers, failures] and how many entries could not be read."""
    invalid = 0
    columns: list[list[Any]] = []
    if len(wire) > 11:
        invalid += _share_log_tags(wire[3], wire[11])
    for cls, entries in zip(_KINDS, wire[2:7]):
        records, bad = _decode_entries(cls, entries)
        columns.append(records)
        invalid += bad
    return columns, invalid


def _as_is(tags: dict[str, Any], number: int | None) -> dict[str, Any]:
    return tags


def _share_log_tags(logs: Any, table: Any) -> int:
    """Puts each line's tags dict in place of its index into the batch's tag table (lines of
    one actor then share one dict); a line whose index does not read is dropped, counted."""
    if not isinstance(logs, list) or not isinstance(table, list):
        return 0
    if not all(isinstance(tags, dict) for tags in table):
        table = []
    kept, bad = [], 0
    for line in logs:
        try:
            at = line[5]
            if type(at) is int:
                if not 0 <= at < len(table):
                    raise IndexError(at)
                line[5] = table[at]
            kept.append(line)
        except (TypeError, IndexError, KeyError):
            bad += 1
    logs[:] = kept
    return bad


def _decode_entries(cls: Any, entries: Any) -> tuple[list[Any], int]:
    if not isinstance(entries, (list, tuple)):
        return [], 1
    records, bad = [], 0
    for entry in entries:
        try:
            records.append(cls.from_wire(entry))
        except Exception:  # a malformed entry must not poison the rest of the batch
            bad += 1
    return records, bad
