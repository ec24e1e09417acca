"""The telemetry tables' schemas, and making Arrow tables and arrays of plain columns.

One schema per table (`COLUMNS`, documented in ``docs/QUERY.md``): the same columns live (from
the store, `monarch.telemetry._tables`) and post-mortem (from Parquet). pyarrow is imported on
first use.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

I64, F64, STR, BOOL = "int64", "float64", "string", "bool"

COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "actors": (
        ("actor", STR), ("mesh", STR), ("mesh_id", STR), ("rank", I64), ("point", STR),
        ("actor_class", STR), ("proc", STR), ("host", STR), ("pid", I64), ("state", STR),
        ("messages", I64), ("queue_depth", I64), ("latency_p50_ms", F64),
        ("last_method", STR), ("running_method", STR), ("running_since_ns", I64),
        ("running_s", F64), ("caller", STR), ("trace_id", STR), ("running", I64),
        ("queued", I64), ("queued_methods", STR), ("stalled", BOOL), ("failure", STR),
        ("updated_ns", I64)),
    "actor_status_events": (
        ("time_ns", I64), ("actor", STR), ("mesh", STR), ("rank", I64), ("event", STR),
        ("detail", STR), ("proc", STR)),
    "messages": (
        ("actor", STR), ("mesh", STR), ("rank", I64), ("method", STR), ("sender", STR),
        ("start_ns", I64), ("end_ns", I64), ("duration_ms", F64), ("outcome", STR),
        ("bytes", I64), ("proc", STR)),
    "spans": (
        ("trace_id", STR), ("span_id", STR), ("parent_span_id", STR), ("name", STR),
        ("start_ns", I64), ("end_ns", I64), ("duration_ms", F64), ("outcome", STR),
        ("proc", STR), ("mesh", STR), ("rank", I64), ("method", STR), ("actor_class", STR),
        ("bytes_in", I64), ("attributes", STR)),
    "logs": (
        ("hlc", I64), ("time_ns", I64), ("stream", STR), ("level", I64), ("text", STR),
        ("mesh", STR), ("rank", I64), ("actor_class", STR), ("proc", STR), ("host", STR),
        ("pid", I64), ("trace_id", STR), ("span_id", STR), ("tags", STR)),
    "metrics": (
        ("name", STR), ("type", STR), ("labels", STR), ("mesh", STR), ("method", STR),
        ("value", F64), ("count", I64), ("time_ns", I64), ("proc", STR)),
    "transfers": (
        ("time_ns", I64), ("bytes", I64), ("seconds", F64), ("src", STR), ("dst", STR),
        ("kind", STR), ("mesh", STR), ("proc", STR)),
    "failures": (
        ("time_ns", I64), ("mesh", STR), ("rank", I64), ("actor_class", STR), ("host", STR),
        ("pid", I64), ("exit_code", I64), ("signal", I64), ("cause", STR), ("reason", STR),
        ("traceback", STR), ("proc", STR)),
}
"""Every table's columns and their types, in order."""

TABLES = tuple(COLUMNS)


def repeating(table: str) -> list[str]:
    """The text columns of a table whose values repeat (names, meshes, outcomes...): the
    ones worth a dictionary in Parquet. Ids are unique: a dictionary of them costs twice."""
    return [name for name, kind in COLUMNS.get(table, ()) if kind == STR
            and not name.endswith("_id")]


def schema(table: str) -> pa.Schema:
    """The Arrow schema of a table."""
    import pyarrow as pa

    types = {I64: pa.int64(), F64: pa.float64(), STR: pa.string(), BOOL: pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS[table]])


def from_rows(table: str, rows: Iterable[Sequence[Any]]) -> pa.Table:
    """A table from rows given in column order (None for a missing value)."""
    columns = list(zip(*rows)) or [()] * len(COLUMNS[table])
    return from_columns(table, [list(c) for c in columns])


def from_columns(table: str, columns: Sequence[Sequence[Any]]) -> pa.Table:
    """A table from its columns, in order."""
    import pyarrow as pa

    s = schema(table)
    return pa.Table.from_arrays([column_array(c, f.type) for c, f in zip(columns, s)], schema=s)


def column_array(column: Sequence[Any], kind: Any) -> Any:
    """An Arrow array of `column`: as it is when every value is of the column's type (Arrow
    checks, in C), else cleaned value by value (`_clean`)."""
    import pyarrow as pa

    try:
        return pa.array(column, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return pa.array(_clean(column, kind), type=kind)


def _clean(column: Sequence[Any], kind: Any) -> Sequence[Any]:
    import pyarrow as pa

    if kind == pa.int64():
        return [v if type(v) is int else (int(v) if isinstance(v, (bool, float)) else None)
                for v in column]
    if kind == pa.string():
        return [v if v is None or type(v) is str else str(v) for v in column]
    return column


def hex_column(data: bytes, width: int) -> pa.Array:
    """A string array of `data` cut into `width`-byte ids, each as lowercase hex."""
    import pyarrow as pa

    n = len(data) // width
    text = pa.py_buffer(binascii.hexlify(data[:n * width]))
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(2 * width), n, [None, text]).cast(
        pa.string())


def hex_or_none(value: bytes | None) -> str | None:
    return value.hex() if value else None


def text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def int_or_none(value: Any) -> int | None:
    return value if type(value) is int else None


def json_text(value: dict[str, Any]) -> str:
    return json.dumps(value, default=str, sort_keys=True)
