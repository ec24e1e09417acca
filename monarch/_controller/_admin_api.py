"""The admin API's routes: each takes the request's parameters and returns JSON-able data, a
`Stream` of records (sent as NDJSON), or `Text` (Prometheus, py-spy).

Parameters come from the query string and, for POST, the JSON body (the body wins).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from .. import telemetry
from ..telemetry import _topology_delta
from .._runtime import _collector
from .._wire._switch import on_off
from . import _admin_cost
from . import _admin_views as views
from ._admin_actions import Actions, BadRequest, NotFound


@dataclasses.dataclass
class Stream:
    """Records to send as NDJSON: `initial` dicts, then what `subscription` delivers and
    `keep` accepts (converted by `convert`), until the client leaves or the server closes."""

    subscription: telemetry.Subscription
    initial: list[dict[str, Any]]
    keep: Callable[[Any], bool]
    convert: Callable[[Any], dict[str, Any]]
    skip: set[tuple[Any, ...]] = dataclasses.field(default_factory=set)
    """`_line_key` of the log lines already sent in `initial` (the subscription started before:
    a line in both is sent once). A key, not the record's `id()`: the store makes a record
    per read, and a later record may take a freed one's id."""

    def batches(self, closing: Callable[[], bool], idle_s: float = 1.0) -> Iterator[list[dict]]:
        """Lists of dicts to send; an empty list after `idle_s` without records (heartbeat)."""
        if self.initial:
            yield self.initial
        sub = self.subscription
        skip = self.skip
        while not closing() and not sub.closed:
            records = sub.wait(idle_s, 1000)
            yield [self.convert(r) for r in records
                   if (not skip or _line_key(r) not in skip) and self.keep(r)]


def _line_key(record: Any) -> tuple[Any, ...]:
    """What tells one log line from another: its stamps, stream, text and process."""
    return (record.hlc, record.wall_ns, record.stream, record.text, record.tags.get("proc"))


JSON = "application/json"
_ENCODER = json.JSONEncoder(default=str, separators=(",", ":"), check_circular=False)


def json_bytes(value: Any) -> bytes:
    """An answer as compact JSON (values JSON has no type for as their `str`): the
    topology at 1,024 actors is 11 % fewer bytes and 8 % less time than with the default
    separators and circularity check (an answer is plain data, never cyclic)."""
    return _ENCODER.encode(value).encode()


@dataclasses.dataclass(frozen=True)
class Binary:
    """A binary answer (an Arrow IPC stream of query results, JSON written already)."""

    body: bytes
    content_type: str = "application/vnd.apache.arrow.stream"


@dataclasses.dataclass(frozen=True)
class Text:
    """A plain-text answer."""

    body: str
    content_type: str = "text/plain; charset=utf-8"


class Params:
    """A request's parameters with typed accessors that raise BadRequest."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def text(self, name: str, default: str | None = None, required: bool = False) -> Any:
        value = self.values.get(name, default)
        if value is None and required:
            raise BadRequest(f"missing parameter {name!r}")
        return value if value is None else str(value)

    def integer(self, name: str, default: int | None = None, required: bool = False) -> Any:
        return self._number(int, name, default, required)

    def number(self, name: str, default: float | None = None) -> Any:
        return self._number(float, name, default, False)

    def flag(self, name: str) -> bool:
        value = self.values.get(name)
        try:
            return on_off(name, "" if value is None else str(value), False)
        except ValueError as exc:
            raise BadRequest(f"parameter {exc}") from None

    def _number(self, kind: type, name: str, default: Any, required: bool) -> Any:
        value = self.values.get(name)
        if value is None or value == "":
            if required:
                raise BadRequest(f"missing parameter {name!r}")
            return default
        try:
            return kind(value)
        except (TypeError, ValueError):
            raise BadRequest(f"parameter {name!r} must be a number, got {value!r}") from None


def arrow_ipc(table: Any) -> bytes:
    """A pyarrow Table as Arrow IPC stream bytes."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


class AdminApi:
    """The routes of one job's admin API."""

    def __init__(self, job: Any, address: Callable[[], str],
                 costs: _admin_cost.Costs | None = None) -> None:
        self.job = job
        self.costs = costs or _admin_cost.Costs()
        self.store: telemetry.Store = job.store
        self.actions = Actions(job)
        self.versions = _topology_delta.Versions()
        self._address = address
        self.routes: dict[tuple[str, str], Callable[[Params], Any]] = {
            ("GET", "/v1"): self.index,
            ("GET", "/v1/job"): self.job_info,
            ("GET", "/v1/topology"): self.topology,
            ("GET", "/v1/logs"): self.logs,
            ("GET", "/v1/logs/follow"): self.follow_logs,
            ("GET", "/v1/spans"): self.spans,
            ("GET", "/v1/metrics"): self.metrics,
            ("GET", "/metrics"): self.prometheus,
            ("GET", "/v1/transfers"): self.transfers,
            ("GET", "/v1/failures"): self.failures,
            ("GET", "/v1/subscribe"): self.subscribe,
            ("GET", "/v1/trace"): self.trace,
            ("GET", "/v1/stats"): self.stats,
            ("GET", "/v1/query"): self.query,
            ("POST", "/v1/query"): self.query,
            ("POST", "/v1/pyspy"): self.store_pyspy,
            ("GET", "/v1/actor"): self.actor,
            ("POST", "/v1/kill"): self.kill,
            ("POST", "/v1/stop"): self.stop,
            ("POST", "/v1/stack"): self.stack,
            ("GET", "/v1/stacks"): self.stacks,
            ("GET", "/v1/diagnose"): lambda p: self.actions.diagnose(),
            ("POST", "/v1/break_next"): self.break_next,
            ("GET", "/v1/debug/sessions"): self.debug_sessions,
            ("POST", "/v1/debug/send"): self.debug_send,
            ("GET", "/v1/debug/read"): self.debug_read,
            ("POST", "/v1/debug/continue"): self.debug_continue,
            ("POST", "/v1/debug/cast"): self.debug_cast,
        }

    def snapshot(self) -> dict[str, Any]:
        return self.actions.on_loop(views.snapshot, self.job)

    # -- reading ---------------------------------------------------------------------------
    def index(self, p: Params) -> dict[str, Any]:
        return {"routes": [f"{method} {path}" for method, path in sorted(self.routes)]}

    def job_info(self, p: Params) -> dict[str, Any]:
        return {**views.job_info(self.job, self.actions.on_loop(views.census, self.job),
                                 self._address()),
                "top": views.top_line(self.store), "state": "running"}

    def topology(self, p: Params) -> Binary:
        """The whole topology, or what changed since the version `since` (`_topology_delta`),
        as JSON: built and written with the collector paused (`_runtime._collector`). With
        `fold`, every mesh but those named in `rows` (comma-separated ids or names) comes
        folded: a summary by host and its actors that are not simply running
        (`views._folded`), what a console needs of a mesh whose rows it does not show."""
        snap, since = self.snapshot(), p.text("since")
        rows = None
        if p.flag("fold"):  # every mesh folded but those `rows` names (ids or names)
            rows = frozenset(filter(None, (p.text("rows") or "").split(",")))
        with _collector.paused():
            answer = self.versions.answer(views.topology(snap, self.store, rows), since)
            body = json_bytes(answer)
            del answer  # freed here, while no collection can walk it
        return Binary(body, JSON)

    def logs(self, p: Params) -> list[dict[str, Any]]:
        records = self.store.logs(mesh=self._mesh_name(p.text("mesh")), rank=p.integer("rank"),
                                  since_hlc=p.integer("since_hlc"), text=p.text("text"),
                                  stream=p.text("stream"), limit=p.integer("limit", 500))
        return [views.log_dict(r) for r in records]

    def follow_logs(self, p: Params) -> Stream:
        mesh, rank = self._mesh_name(p.text("mesh")), p.integer("rank")
        subscription = self.store.subscribe(("log",))  # before the history: nothing is missed
        n = p.integer("history", 0) or 0
        history = self.store.logs(mesh=mesh, rank=rank, limit=n) if n > 0 else []

        def keep(r: telemetry.LogRecord) -> bool:
            return ((mesh is None or r.tags.get("mesh") == mesh)
                    and (rank is None or r.tags.get("rank") == rank))

        return Stream(subscription, [views.log_dict(r) for r in history], keep, views.log_dict,
                      set(map(_line_key, history)))

    def spans(self, p: Params) -> list[dict[str, Any]]:
        trace = p.text("trace_id")
        try:
            trace_id = bytes.fromhex(trace) if trace else None
        except ValueError:
            raise BadRequest(f"trace_id must be hex, got {trace!r}") from None
        spans = self.store.spans(trace_id=trace_id, mesh=self._mesh_name(p.text("mesh")),
                                 name=p.text("name"), limit=p.integer("limit", 200))
        return [views.span_dict(s) for s in spans]

    def metrics(self, p: Params) -> list[dict[str, Any]]:
        return [views.metric_dict(m) for m in self.store.metrics(by_process=p.flag("by_process"))]

    def prometheus(self, p: Params) -> Text:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(telemetry.StoreCollector(self.store))  # type: ignore[arg-type]
        return Text(generate_latest(registry).decode(), CONTENT_TYPE_LATEST)

    def transfers(self, p: Params) -> dict[str, Any]:
        return views.transfers(self.store, p.number("window", 10.0),
                               p.number("history_s", 60.0), p.number("bucket_s", 1.0))

    def failures(self, p: Params) -> list[dict[str, Any]]:
        return [views.failure_dict(f) for f in self.snapshot()["failures"]]

    def subscribe(self, p: Params) -> Stream:
        kinds = [k.strip() for k in (p.text("kinds") or "span,log,metric,transfer,failure")
                 .split(",") if k.strip()]
        try:
            subscription = self.store.subscribe(kinds)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        return Stream(subscription, [], lambda r: True, views.record_dict)

    def trace(self, p: Params) -> dict[str, Any]:
        spans = self.store.spans(mesh=self._mesh_name(p.text("mesh")),
                                 limit=p.integer("limit", 100_000))
        return telemetry.chrome_trace(spans, self.store.resources())

    def stats(self, p: Params) -> dict[str, Any]:
        history = getattr(getattr(self.job, "watcher", None), "history", None)
        return {"store": dataclasses.asdict(self.store.statistics()), "time": time.time(),
                "history": None if history is None else history.statistics(),
                "admin": self.costs.snapshot()}

    def query(self, p: Params) -> Any:
        """SQL over the telemetry tables: an Arrow IPC stream, or JSON rows (format=json)."""
        from ..telemetry import _sql
        from ..telemetry import _tables as tables

        sql = p.text("sql", required=True)
        schema = p.text("schema") or "pymonarch"
        if schema == "monarch":  # Monarch's tables (monarch.job.TelemetryConfig)
            return self._monarch_query(sql, p)
        if schema != "pymonarch":
            raise BadRequest(f"schema must be pymonarch (ours, docs/QUERY.md) or monarch "
                             f"(torchmonarch's tables), got {schema!r}")

        def one(name: str) -> Any:
            if name == "actors":
                return tables.actors(views.actor_rows(
                    views.topology(self.snapshot(), self.store)))
            return tables.store_tables(self.store, [name])[name]

        sources: dict[str, Any] = {name: (lambda n=name: one(n)) for name in tables.TABLES}
        self._ship_own()
        history = getattr(getattr(self.job, "watcher", None), "history", None)
        try:
            # with a history, the appended tables are what it wrote and what it has not
            # written yet: the store's bound never hides a record from SQL
            with history.lock if history is not None else contextlib.nullcontext():
                if history is not None:
                    sources.update(history.sources())
                result = _sql.query(sql, sources, max_rows=p.integer("limit", _sql.MAX_ROWS))
        except _sql.QueryError as exc:
            raise BadRequest(str(exc)) from None
        if p.text("format") == "json":
            return _sql.rows(result)
        return Binary(arrow_ipc(result))

    def _ship_own(self) -> None:
        """Puts the controller's own records (its call spans) up to now in the store."""
        ship = getattr(self.job.runtime, "ship_telemetry", None)
        if ship is not None:
            ship()

    def _monarch_query(self, sql: str, p: Params) -> Any:
        """SQL over Monarch's tables, made from the store now (`telemetry._monarch`)."""
        from ..telemetry import _monarch, _sql

        self._ship_own()
        sources = _monarch.sources(self.store, p.number("retention_s", 0.0) or 0.0)
        try:
            result = _sql.query(sql, sources, max_rows=p.integer("limit", _sql.MAX_ROWS),
                                schemas=_monarch.schemas())
        except _sql.QueryError as exc:
            raise BadRequest(str(exc)) from None
        if p.text("format") == "json":
            return _sql.rows(result)
        return Binary(arrow_ipc(result))

    def store_pyspy(self, p: Params) -> dict[str, Any]:
        """Keeps a py-spy dump for SQL (Monarch's `pyspy_*` tables)."""
        from ..telemetry._monarch import read_pyspy

        dump_id, proc_ref = p.text("dump_id", required=True), p.text("proc_ref", required=True)
        dump_json = p.text("pyspy_result_json", required=True)
        try:
            read_pyspy(dump_json)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        self.store.meshbook.add_pyspy_dump(dump_id, proc_ref, dump_json)
        return {"status": "ok", "dump_id": dump_id}

    def actor(self, p: Params) -> dict[str, Any]:
        """One actor: its topology entry, its flight recorder (the last messages it handled)
        and its status events."""
        mesh, rank = p.text("mesh", required=True), p.integer("rank", required=True)
        snap = self.actions.on_loop(views.mesh_snapshot, self.job, mesh)
        found = views.actor_entry(snap, self.store, rank)
        if found is None:
            raise NotFound(f"no actor {mesh}[{rank}] in this job; `monarch ps` lists them")
        m, a = found
        limit = p.integer("limit", 64)
        recent = self.store.messages(actor=a["actor_id"], limit=limit)
        events = [e for e in self.store.status_events() if e.actor == a["actor_id"]]
        return {"mesh": m["name"], "mesh_id": m["mesh"], "class_name": m["class_name"],
                **a, "stall_s": snap["stall_s"],
                "recent": [views.message_dict(r) for r in reversed(recent)],
                "events": [views.event_dict(e) for e in events]}

    def _mesh_name(self, mesh: str | None) -> str | None:
        """Telemetry tags meshes by name: a mesh id given by the caller becomes its name."""
        if mesh is None:
            return None

        def name() -> str:
            record = self.job.supervisor.meshes.get(mesh)
            return record.name if record is not None else mesh

        return self.actions.on_loop(name)

    # -- actions ---------------------------------------------------------------------------
    def kill(self, p: Params) -> dict[str, Any]:
        return self.actions.kill(p.text("mesh", required=True), p.text("selection", ""),
                                 p.text("sig", "KILL"))

    def stop(self, p: Params) -> dict[str, Any]:
        return self.actions.stop(p.text("mesh", required=True), p.text("selection", ""),
                                 p.number("timeout"))

    def stack(self, p: Params) -> Text:
        return Text(self.actions.stack(p.text("proc", required=True)))

    def stacks(self, p: Params) -> dict[str, Any]:
        return self.actions.stacks(p.text("mesh", required=True), p.text("selection", ""))

    def break_next(self, p: Params) -> dict[str, Any]:
        return self.actions.break_next(p.text("mesh", required=True),
                                       p.integer("rank", required=True))

    # -- debugger --------------------------------------------------------------------------
    def debug_sessions(self, p: Params) -> list[dict[str, Any]]:
        """The open sessions, read in this process (`_debug.open_sessions`: an actor leaving
        pdb waits until the controller knows), not asked of the DebugController by a message
        (~3 ms of the controller and a span in the job's telemetry at each console poll)."""
        from .._actors._debug import open_sessions

        return open_sessions()

    def debug_send(self, p: Params) -> dict[str, Any]:
        ok = self.actions.debugger().send.call_one(
            p.integer("session_id", required=True), p.text("line", required=True)).get(timeout=30)
        if not ok:
            raise NotFound(f"no open debug session {p.integer('session_id')}")
        return {"sent": True}

    def debug_read(self, p: Params) -> dict[str, Any]:
        timeout = min(max(p.number("timeout", 10.0), 0.0), 60.0)
        text, offset, closed = self.actions.debugger().read.call_one(
            p.integer("session_id", required=True), p.integer("offset", 0), timeout).get(
                timeout=timeout + 30)
        return {"text": text, "offset": offset, "closed": closed}

    def debug_continue(self, p: Params) -> dict[str, Any]:
        return {"continued": self.actions.debugger().continue_all.call_one().get(timeout=30)}

    def debug_cast(self, p: Params) -> dict[str, Any]:
        ranks = p.values.get("ranks")
        if ranks is not None and not (isinstance(ranks, list)
                                      and all(isinstance(r, int) for r in ranks)):
            raise BadRequest("ranks must be a list of ints or null (all)")
        sent = self.actions.debugger().cast.call_one(
            p.text("actor_name", required=True), ranks, p.text("line", required=True)).get(
                timeout=30)
        return {"sessions": sent}
