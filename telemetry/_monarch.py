"""Monarch's telemetry tables, made from our store (torchmonarch 0.7.0's names and columns).

A Monarch script asks `job.enable_telemetry(TelemetryConfig())` and then
`state.query_engine_client.query(sql)`; its SQL names Monarch's tables (`actors`, `meshes`,
`actor_status_events`, `messages`, `message_status_events`, `sent_messages`, `spans`,
`metric_sums`, `metric_gauges`, `metric_histograms`, the `pyspy_*` tables). Those are made
here, at the moment of the query, from the same store our own tables (docs/QUERY.md) come
from; only the tables a statement names are made.

- **Ids.** Monarch's ids are unsigned 64-bit numbers; ours are text (`wm-a4f3d295[0]`, a
  mesh id, a span id). Each id column holds `uid(text)`: the first 8 bytes of the text's
  BLAKE2b, so the same actor has the same number in every table and joins work. `full_name`
  keeps our text id.
- **Where each comes from.** `meshes`/`actors`: the mesh records the controller keeps of every
  spawn (`MeshEvent`: host, proc and actor meshes, each proc's system agent and each host's
  agent as actors of their mesh; the script's root actor `<root>` in the mesh `client`).
  `actor_status_events`: the steps of each actor's life as its proc saw them (created,
  initializing, running = Monarch's Idle, stopping, stopped, failed; Client for the root).
  `messages` and `message_status_events`: the flight records (each actor's recent handled
  messages); *queued* is when the sender sent it (its clock), *active* when the handler
  began, *complete* or *failed* when it ended. `sent_messages`: the callers' call spans
  (one per cast, with the view cast to). `spans`: our spans (a user's `span(...)` is Monarch's
  `python_user_span`, its name in `fields_json`). `metric_*`: the newest value of each series
  per process (ours are cumulative). `pyspy_*`: dumps stored with `store_pyspy_dump`.
- **Retention.** `retention_s` > 0 keeps only the messages, message events, sent messages and
  spans of the last that many seconds (Monarch's `TelemetryConfig.retention_secs`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ._hlc import hlc_wall_ns

if TYPE_CHECKING:
    import pyarrow as pa

    from ._store import Store

U64, I64, I32, U32, F64, STR, BOOL = "uint64", "int64", "int32", "uint32", "float64", "string", \
    "bool_"

COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "actors": (("id", U64), ("timestamp_us", I64), ("mesh_id", U64), ("rank", U64),
               ("full_name", STR), ("display_name", STR)),
    "meshes": (("id", U64), ("timestamp_us", I64), ("class", STR), ("given_name", STR),
               ("full_name", STR), ("shape_json", STR), ("parent_mesh_id", U64),
               ("parent_view_json", STR)),
    "actor_status_events": (("id", U64), ("timestamp_us", I64), ("actor_id", U64),
                            ("new_status", STR), ("reason", STR)),
    "messages": (("id", U64), ("timestamp_us", I64), ("from_actor_id", U64),
                 ("to_actor_id", U64), ("endpoint", STR), ("port_index", U64)),
    "message_status_events": (("id", U64), ("timestamp_us", I64), ("message_id", U64),
                              ("status", STR)),
    "sent_messages": (("id", U64), ("timestamp_us", I64), ("sender_actor_id", U64),
                      ("actor_mesh_id", U64), ("view_json", STR), ("shape_json", STR)),
    "spans": (("id", U64), ("timestamp_us", I64), ("parent_id", U64), ("name", STR),
              ("target", STR), ("level", STR), ("fields_json", STR), ("process_id", STR),
              ("thread_name", STR), ("file", STR), ("line", U32)),
    "metric_sums": (("name", STR), ("timestamp_us", I64), ("start_timestamp_us", I64),
                    ("scope_name", STR), ("unit", STR), ("is_monotonic", BOOL),
                    ("temporality", STR), ("attributes_json", STR),
                    ("resource_attributes_json", STR), ("sum_f64", F64), ("sum_i64", I64),
                    ("sum_u64", U64)),
    "metric_gauges": (("name", STR), ("timestamp_us", I64), ("start_timestamp_us", I64),
                      ("scope_name", STR), ("unit", STR), ("attributes_json", STR),
                      ("resource_attributes_json", STR), ("value_f64", F64),
                      ("value_i64", I64), ("value_u64", U64)),
    "metric_histograms": (("name", STR), ("timestamp_us", I64), ("start_timestamp_us", I64),
                          ("scope_name", STR), ("unit", STR), ("temporality", STR),
                          ("attributes_json", STR), ("resource_attributes_json", STR),
                          ("count", U64), ("sum_f64", F64), ("sum_i64", I64), ("sum_u64", U64),
                          ("min_f64", F64), ("min_i64", I64), ("min_u64", U64),
                          ("max_f64", F64), ("max_i64", I64), ("max_u64", U64),
                          ("bounds_json", STR), ("bucket_counts_json", STR)),
    "pyspy_dumps": (("dump_id", STR), ("timestamp_us", I64), ("proc_ref", STR), ("pid", I32),
                    ("binary", STR), ("capture_mode", STR), ("warnings_json", STR)),
    "pyspy_stack_traces": (("dump_id", STR), ("pid", I32), ("thread_id", U64),
                           ("thread_name", STR), ("os_thread_id", U64), ("active", BOOL),
                           ("owns_gil", BOOL)),
    "pyspy_frames": (("dump_id", STR), ("thread_id", U64), ("frame_depth", I32), ("name", STR),
                     ("filename", STR), ("module", STR), ("short_filename", STR),
                     ("line", I32), ("is_entry", BOOL)),
    "pyspy_local_variables": (("dump_id", STR), ("thread_id", U64), ("frame_depth", I32),
                              ("name", STR), ("addr", U64), ("arg", BOOL), ("repr", STR)),
}
"""Every table's columns and their (Arrow) types, in order."""

TABLES = tuple(COLUMNS)

STATUSES = {"created": "Created", "initializing": "Initializing", "client": "Client",
            "running": "Idle", "stopping": "Stopping", "stopped": "Stopped",
            "failed": "Failed"}
"""Our status events as Monarch's `new_status` (others, such as stalls, have no counterpart)."""

ROOT, CLIENT_MESH = "root", "client"
SCOPE = "monarch"


@functools.lru_cache(maxsize=65536)
def uid(text: str) -> int:
    """Our text id as Monarch's 64-bit id: the first 8 bytes of its BLAKE2b."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@functools.cache
def schemas() -> dict[str, pa.Schema]:
    """Each table's Arrow schema."""
    import pyarrow as pa

    return {name: pa.schema([(c, getattr(pa, t)()) for c, t in cols])
            for name, cols in COLUMNS.items()}


def sources(store: Store, retention_s: float = 0.0) -> dict[str, Callable[[], Any]]:
    """How to make each table from ``store`` now (`telemetry._sql.query`'s sources). Tables
    made from the same records (messages and their events, spans and sent messages, the three
    metric tables, the four py-spy tables) share one pass over them within a query."""
    since_us = int((time.time() - retention_s) * 1e6) if retention_s > 0 else None
    once = functools.cache
    started = once(lambda: _started_us(store))
    messages = once(lambda: _messages(store, since_us))
    spans = once(lambda: _our_spans(store, since_us))
    metrics = once(lambda: _metrics(store))
    pyspy = once(lambda: _pyspy(store))
    made = {"actors": lambda: _actors(store, started()),
            "meshes": lambda: _meshes(store, started()),
            "actor_status_events": lambda: _status_events(store),
            "messages": lambda: messages()[0],
            "message_status_events": lambda: messages()[1],
            "sent_messages": lambda: _sent(spans()),
            "spans": lambda: _spans(spans()),
            "metric_sums": lambda: metrics()[0],
            "metric_gauges": lambda: metrics()[1],
            "metric_histograms": lambda: metrics()[2]}
    for name in ("pyspy_dumps", "pyspy_stack_traces", "pyspy_frames", "pyspy_local_variables"):
        made[name] = functools.partial(lambda n: pyspy()[n], name)
    return made


def _table(name: str, rows: list[tuple[Any, ...]]) -> pa.Table:
    import pyarrow as pa

    schema = schemas()[name]
    columns = list(zip(*rows)) if rows else [() for _ in schema]
    return pa.table([pa.array(list(col), type=field.type) for col, field in zip(columns, schema)],
                    schema=schema)


def _us(ns: int) -> int:
    return ns // 1000


def _shape(labels: Iterable[str], sizes: Iterable[int]) -> str:
    return json.dumps({"inner": {"labels": list(labels), "sizes": list(sizes)}},
                      separators=(",", ":"))


def _region(view: Any) -> str | None:
    if view is None:
        return None
    labels, offset, sizes, strides = view
    return json.dumps({"labels": list(labels), "slice": {
        "offset": offset, "sizes": list(sizes), "strides": list(strides)}},
        separators=(",", ":"))


def _started_us(store: Store) -> int:
    events = [e.time_ns for e in store.status_events() if e.actor == ROOT]
    return _us(min(events)) if events else _us(time.time_ns())


# -- topology -------------------------------------------------------------------------------

CLASS_OF = {"host": "Host", "proc": "Proc"}


def _meshes(store: Store, started_us: int) -> pa.Table:
    rows: list[tuple[Any, ...]] = [(uid(CLIENT_MESH), started_us, "Client",
                                    CLIENT_MESH, CLIENT_MESH, _shape((), ()), None, None)]
    for m in store.meshbook.meshes():
        cls = CLASS_OF.get(m.kind) or f"Python<{m.class_name.rsplit('.', 1)[-1]}>"
        rows.append((uid(m.mesh), _us(m.time_ns), cls, m.name, m.mesh,
                     _shape(m.labels, m.sizes), uid(m.parent) if m.parent else None,
                     _region(m.parent_view)))
    return _table("meshes", rows)


def _actors(store: Store, started_us: int) -> pa.Table:
    rows = [(uid(ROOT), started_us, uid(CLIENT_MESH), 0, ROOT, "<root>")]
    for m in store.meshbook.meshes():
        t, mesh = _us(m.time_ns), uid(m.mesh)
        for entry in m.actors:
            if m.kind == "actor":
                rank, _, label = entry
                name = f"{m.mesh}[{rank}]"
            else:  # a proc's system agent, a host's agent: actors of their mesh
                rank, where = entry
                name, label = f"{where}/{'agent' if m.kind == 'proc' else 'host_agent'}", None
            rows.append((uid(name), t, mesh, rank, name, label))
    return _table("actors", rows)


def _status_events(store: Store) -> pa.Table:
    rows = []
    for e in store.status_events():
        status = STATUSES.get(e.event)
        if status is not None:
            rows.append((uid(f"{e.actor}|{e.time_ns}|{e.event}"), _us(e.time_ns), uid(e.actor),
                         status, e.detail or None))
    return _table("actor_status_events", rows)


# -- messages -------------------------------------------------------------------------------

def _messages(store: Store, since_us: int | None) -> tuple[pa.Table, pa.Table]:
    messages, events = [], []
    for actor, _, _, _, entries in store.message_groups():
        to = uid(actor)
        for (method, sender, start, end, outcome, _), sent in zip(entries, entries.sents):
            if since_us is not None and _us(end) < since_us:
                continue
            key = f"{actor}|{start}|{method}"
            message = uid(key)
            messages.append((message, _us(start), uid(sender), to, method,
                             uid(f"{actor}|{method}")))
            if sent:
                queued = min(hlc_wall_ns(sent), start)
                events.append((uid(key + "|queued"), _us(queued), message, "queued"))
            events.append((uid(key + "|active"), _us(start), message, "active"))
            done = "complete" if outcome == "ok" else "failed"
            events.append((uid(key + "|" + done), _us(end), message, done))
    return _table("messages", messages), _table("message_status_events", events)


def _our_spans(store: Store, since_us: int | None) -> list[dict[str, Any]]:
    from ._tables import spans

    table = spans(store.span_chunks())
    if since_us is not None and table.num_rows:
        import pyarrow.compute as pc

        table = table.filter(pc.greater_equal(table["end_ns"], since_us * 1000))
    return table.select(["span_id", "parent_span_id", "name", "start_ns", "proc",
                         "method", "attributes"]).to_pylist()


def _sent(spans: list[dict[str, Any]]) -> pa.Table:
    rows = []
    for s in spans:
        if not s["name"].startswith("call "):
            continue
        attributes = json.loads(s["attributes"] or "{}")
        if "mesh_id" not in attributes:
            continue
        view = json.loads(attributes["view"])
        shape = {"labels": view["labels"], "sizes": view["slice"]["sizes"]}
        rows.append((uid(s["span_id"]), _us(s["start_ns"]), uid(attributes["sender"]),
                     uid(attributes["mesh_id"]), attributes["view"],
                     json.dumps(shape, separators=(",", ":"))))
    return _table("sent_messages", rows)


def _spans(spans: list[dict[str, Any]]) -> pa.Table:
    rows = []
    for s in spans:
        fields = json.loads(s["attributes"] or "{}")
        name = s["name"]
        if s["method"] is None and not name.startswith("call "):  # a user's span(...)
            fields, name = {"name": name, **fields}, "python_user_span"
        parent = s["parent_span_id"]
        rows.append((uid(s["span_id"]), _us(s["start_ns"]), uid(parent) if parent else None,
                     name, SCOPE, "INFO", json.dumps(fields, separators=(",", ":")),
                     s["proc"], None, None, None))
    return _table("spans", rows)


# -- metrics --------------------------------------------------------------------------------

RESOURCE_KEYS = ("host", "proc", "pid", "job")


def _metrics(store: Store) -> tuple[pa.Table, pa.Table, pa.Table]:
    resources = store.resources()
    sums, gauges, histograms = [], [], []
    for p in store.metrics(by_process=True):
        labels = {k: v for k, v in p.labels.items() if k not in RESOURCE_KEYS}
        attributes = json.dumps(labels, separators=(",", ":"), sort_keys=True)
        resource = {"service.name": SCOPE, "process": p.source,
                    **{k: v for k, v in resources.get(p.source, {}).items()
                       if k in RESOURCE_KEYS}}
        head = (p.name, _us(p.time_ns), None, SCOPE, None)
        value = _numbers(p.value)
        tail = (attributes, json.dumps(resource, separators=(",", ":"), sort_keys=True))
        if p.kind in ("counter", "updown"):
            sums.append((*head, p.kind == "counter", "cumulative", *tail, *value))
        elif p.kind == "gauge":
            gauges.append((*head, *tail, *value))
        elif p.kind == "histogram":
            histograms.append((*head, "cumulative", *tail, p.count, *value,
                               None, None, None, None, None, None,
                               json.dumps(list(p.bounds)), json.dumps(list(p.buckets))))
    return (_table("metric_sums", sums), _table("metric_gauges", gauges),
            _table("metric_histograms", histograms))


def _numbers(value: float) -> tuple[float, int | None, int | None]:
    """A value as Monarch's (f64, i64, u64) columns: the integer ones when it is whole."""
    whole = float(value).is_integer() and abs(value) < 2**63
    return (float(value), int(value) if whole else None,
            int(value) if whole and value >= 0 else None)


# -- py-spy ---------------------------------------------------------------------------------

def read_pyspy(dump_json: str) -> dict[str, Any]:
    """A py-spy dump as Monarch stores it: `{"Ok": {pid, binary, capture_mode, stack_traces,
    warnings}}` or the inner object.

    Raises:
        ValueError: not JSON, a failed dump (`{"Err": ...}`), or no `stack_traces` list.
    """
    try:
        data = json.loads(dump_json)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a py-spy dump must be JSON: {exc}") from None
    if isinstance(data, dict) and "Err" in data:
        raise ValueError(f"the py-spy dump failed: {data['Err']}")
    if isinstance(data, dict) and "Ok" in data:
        data = data["Ok"]
    if not isinstance(data, dict) or not isinstance(data.get("stack_traces"), list):
        raise ValueError("a py-spy dump is {\"Ok\": {\"pid\": ..., \"stack_traces\": [...]}} "
                         "(or the object inside \"Ok\")")
    return data


def _pyspy(store: Store) -> dict[str, pa.Table]:
    dumps, traces, frames, local_vars = [], [], [], []
    for time_ns, dump_id, proc_ref, text in store.meshbook.pyspy_dumps():
        data = read_pyspy(text)  # checked when stored
        dumps.append((dump_id, _us(time_ns), proc_ref, data.get("pid"), data.get("binary"),
                      data.get("capture_mode"), json.dumps(data.get("warnings", []))))
        for trace in data["stack_traces"]:
            thread = trace.get("thread_id")
            traces.append((dump_id, trace.get("pid"), thread, trace.get("thread_name"),
                           trace.get("os_thread_id"), trace.get("active"),
                           trace.get("owns_gil")))
            for depth, frame in enumerate(trace.get("frames", [])):
                frames.append((dump_id, thread, depth, frame.get("name"), frame.get("filename"),
                               frame.get("module"), frame.get("short_filename"),
                               frame.get("line"), frame.get("is_entry")))
                for var in frame.get("locals") or []:
                    local_vars.append((dump_id, thread, depth, var.get("name"), var.get("addr"),
                                       var.get("arg"), var.get("repr")))
    return {"pyspy_dumps": _table("pyspy_dumps", dumps),
            "pyspy_stack_traces": _table("pyspy_stack_traces", traces),
            "pyspy_frames": _table("pyspy_frames", frames),
            "pyspy_local_variables": _table("pyspy_local_variables", local_vars)}
