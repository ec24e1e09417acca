"""SQL over the telemetry with Apache DataFusion (the engine Monarch itself uses).

`query(sql, tables)` registers each table — an Arrow table made now from the live store, or
the Parquet files of a job's history — in a fresh DataFusion context and runs one statement.
Only the tables the statement names are made (a query of ``logs`` does not build ``spans``).
Whatever the engine refuses (a syntax error, an unknown table or column) is a `QueryError`
carrying the engine's own message; nothing else escapes. datafusion is imported on first use.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._arrow import TABLES, from_rows

if TYPE_CHECKING:
    import pyarrow as pa

TableSource = Callable[[], "pa.Table | str | tuple[str | None, pa.Table] | None"]
"""Makes one table on demand: an Arrow table, the directory of the Parquet files holding it,
or both (a live job's history: what it wrote, and what it has not written yet); None: an
empty table."""

MAX_ROWS = 100_000
"""Rows a query returns at most (a ``LIMIT`` of its own may ask for fewer)."""

CHANGES = frozenset(("create", "drop", "insert", "update", "delete", "alter", "copy",
                     "truncate", "set", "reset", "prepare", "execute", "deallocate", "begin",
                     "commit", "rollback"))
"""Statements that would change tables or the session: refused, saying why (a fresh session
runs each query, so DataFusion would run them and change nothing)."""

_lock = threading.Lock()  # one query at a time per process: DataFusion uses every core


class QueryError(ValueError):
    """The SQL could not run: the message is the engine's (syntax, unknown table or column,
    a type mismatch). Fix the statement; the job is not affected."""


def named_tables(sql: str, names: Iterable[str] = TABLES) -> set[str]:
    """The telemetry tables a statement mentions (by word, case-insensitive)."""
    words = set(re.findall(r"[a-z_][a-z0-9_]*", sql.lower()))
    return {name for name in names if name in words}


def query(sql: str, tables: Mapping[str, TableSource], max_rows: int = MAX_ROWS,
          schemas: Mapping[str, pa.Schema] | None = None) -> pa.Table:
    """Runs one SQL statement over the telemetry tables (and ``information_schema``).

    Args:
        sql: e.g. ``SELECT mesh, count(*) FROM spans GROUP BY mesh``.
        tables: how to make each table (see `TableSource`); tables not given are empty.
        max_rows: at most this many rows come back.
        schemas: the tables there are and their schemas (an empty one stands for a table the
            statement does not name); default: ours (`_tables.TABLES`).

    Returns:
        The result as an Arrow table.

    Raises:
        QueryError: the engine refused the statement (its message says why).
    """
    if not sql or not sql.strip():
        raise QueryError("empty query: give one SQL statement, e.g. SELECT * FROM actors")
    first = re.sub(r"^(\s|--[^\n]*\n|/\*.*?\*/)*", "", sql, flags=re.S).split(None, 1)
    if first and first[0].lstrip("(").lower() in CHANGES:
        raise QueryError(f"only queries run here (SELECT, WITH, EXPLAIN, SHOW...): "
                         f"{first[0].upper()} would change nothing, the tables are made "
                         "afresh for each query")
    from datafusion import SessionConfig, SessionContext

    names = list(TABLES if schemas is None else schemas)
    named = named_tables(sql, names)
    with _lock:
        ctx = SessionContext(SessionConfig().with_information_schema(True))
        for name in names:
            source = tables.get(name) if name in named else None
            if source is None and schemas is not None:
                empty = schemas[name].empty_table()
                source = lambda empty=empty: empty  # noqa: E731
            _register(ctx, name, source)
        try:
            frame = ctx.sql(sql)
            batches = frame.limit(max_rows).collect()
            arrow_schema = frame.schema()
        except Exception as exc:  # DataFusion raises several types; all mean "bad query"
            raise QueryError(_engine_message(exc)) from None
    import pyarrow as pa

    return pa.Table.from_batches(batches, schema=arrow_schema)


def _register(ctx: Any, name: str, source: TableSource | None) -> None:
    made = source() if source is not None else None
    if isinstance(made, str):
        ctx.register_parquet(name, made)
        return
    if isinstance(made, tuple):
        written, pending = made
        if written is not None:
            ctx.register_parquet(f"{name}__written", written)
            _register_table(ctx, f"{name}__pending", pending)
            ctx.register_view(name, ctx.sql(f"SELECT * FROM {name}__written UNION ALL "
                                             f"SELECT * FROM {name}__pending"))
            return
        made = pending
    _register_table(ctx, name, made if made is not None else from_rows(name, []))


def _register_table(ctx: Any, name: str, table: pa.Table) -> None:
    batches = table.to_batches() or [_empty_batch(table)]
    ctx.register_record_batches(name, [batches])


def _empty_batch(table: pa.Table) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pylist([], schema=table.schema)


def _engine_message(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.removeprefix("DataFusion error: ").strip() or type(exc).__name__


def rows(table: pa.Table) -> list[dict[str, Any]]:
    """A result's rows as JSON-able dicts (bytes as hex, times as ISO text)."""
    out = []
    for row in table.to_pylist():
        out.append({k: _jsonable(v) for k, v in row.items()})
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)
