"""The console's pure model: what the screen shows, computed from the admin API's dicts.

Nothing here touches a terminal, a thread or a socket: the app feeds `Snapshot`s and log records
in, and asks for tree rows, the selected node's target, log lines and rates. Everything the
console decides (what a slice selects, which process `k` kills, what folds) is tested here.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from monarch import telemetry

RUNNING, FAILED, STOPPED = "running", "failed", "stopped"
STOPPING, STARTING = "stopping", "starting"
PAUSED = "paused"
STALLED = "stalled"
"""An actor with a handler running past the stall threshold (MONARCH_STALL_S)."""
DEGRADED = "degraded"
"""An aggregate row (job, host, proc mesh, mesh) with failed and live children."""
"""An actor with an open debugger session (it sits in pdb)."""
_PRECEDENCE = (FAILED, DEGRADED, PAUSED, STALLED, STARTING, STOPPING, RUNNING, STOPPED)
"""Which state an aggregate row shows: the first one any child has."""


# -- snapshots --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """One poll of the admin API (each part as the client returned it; None when it failed)."""

    job: dict[str, Any] | None = None
    topology: dict[str, Any] | None = None
    sessions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    spans: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    transfers: dict[str, Any] | None = None
    error: str | None = None
    taken_at: float = 0.0
    actor: dict[str, Any] | None = None
    """The focused actor's detail (`AdminClient.actor`: flight recorder, events), if any."""


class Index:
    """Lookups over one snapshot's topology and debugger sessions."""

    def __init__(self, snapshot: Snapshot) -> None:
        topo = snapshot.topology or {"hosts": [], "meshes": [], "failures": []}
        self.hosts: list[dict[str, Any]] = list(topo.get("hosts", []))
        self.meshes = {m["mesh"]: m for m in topo.get("meshes", [])}
        self.procs = {p["proc"]: dict(p, host_id=h["id"]) for h in self.hosts
                      for p in h.get("procs", [])}
        self.failures: list[dict[str, Any]] = list(topo.get("failures", []))
        self.actors = {actor_key(m["mesh"], a["rank"]): (m, a) for m in self.meshes.values()
                       for a in m.get("actors", [])}
        self.sessions: dict[str, dict[str, Any]] = {}
        for info in snapshot.sessions:
            key = self.session_key(info)
            if key is not None:
                self.sessions.setdefault(key, info)

    def session_key(self, info: Mapping[str, Any]) -> str | None:
        """The actor key of a debugger session (by actor id `<mesh>[<rank>]`, else by name)."""
        actor_id = str(info.get("actor_id") or "")
        if actor_id.endswith("]") and "[" in actor_id:
            mesh, _, rank = actor_id[:-1].rpartition("[")
            if mesh in self.meshes and rank.isdigit():
                return actor_key(mesh, int(rank))
        named = [m for m in self.meshes.values() if m["name"] == info.get("actor_name")]
        return actor_key(named[-1]["mesh"], int(info["rank"])) if named else None

    def mesh_states(self, mesh: Mapping[str, Any], host: str | None = None) -> dict[str, int]:
        """How many of the mesh's actors (on `host` only, when given) are in each state as the
        console shows them (`actor_state`: paused in pdb, stalled), folded or not."""
        if "folded" not in mesh:
            counts: dict[str, int] = {}
            for actor in mesh.get("actors", []):
                if host is None or self.host_of(actor.get("proc")) == host:
                    state = self.actor_state(mesh, actor)
                    counts[state] = counts.get(state, 0) + 1
            return counts
        summaries = [v for h, v in mesh["folded"].items() if host in (None, h)]
        counts = {}
        for summary in summaries:
            for state, n in summary.get("states", {}).items():
                counts[state] = counts.get(state, 0) + n
        shown = set()
        for actor in mesh.get("actors", []):  # the notable ones: shown as `actor_state` says
            if host is not None and self.host_of(actor.get("proc")) != host:
                continue
            shown.add(actor["rank"])
            _move(counts, str(actor.get("state") or STARTING), self.actor_state(mesh, actor))
        procs = None
        mine = actor_key(mesh["mesh"], 0)[:-1]  # `actor:<mesh>:` (a name may hold a colon)
        for key in self.sessions:  # a running actor in pdb is not among the notable ones
            rank = key[len(mine):]
            if not key.startswith(mine) or not rank.isdigit() or int(rank) in shown:
                continue
            procs = rank_procs(mesh) if procs is None else procs
            if host is None or self.host_of(procs.get(int(rank))) == host:
                _move(counts, RUNNING, PAUSED)
        return counts

    def host_of(self, proc: Any) -> str | None:
        """The host id of a proc (None when the topology has no such proc)."""
        found = self.procs.get(str(proc))
        return found["host_id"] if found else None

    def failure(self, mesh: str, rank: int) -> dict[str, Any] | None:
        """The newest failure report of an actor."""
        name = self.meshes.get(mesh, {}).get("name")
        found = [f for f in self.failures if f.get("rank") == rank
                 and (f.get("mesh") == mesh or (f.get("mesh") is None
                                               and f.get("mesh_name") == name))]
        return found[-1] if found else None

    def actor_state(self, mesh: Mapping[str, Any], actor: Mapping[str, Any]) -> str:
        """running / failed / stopped / starting, or paused when it sits in pdb."""
        key = actor_key(mesh["mesh"], actor["rank"])
        if key in self.sessions and actor.get("state") not in (FAILED, STOPPED):
            return PAUSED
        if actor.get("stalled") and actor.get("state") == RUNNING:
            return STALLED
        return str(actor.get("state") or STARTING)


def rank_procs(mesh: Mapping[str, Any]) -> dict[int, str]:
    """Each rank's proc: from a folded mesh's `rank_procs`, else from its actors."""
    if "rank_procs" in mesh:
        return {int(rank): str(proc) for rank, proc in mesh["rank_procs"]}
    return {a["rank"]: str(a.get("proc", "")) for a in mesh.get("actors", [])}


def mesh_size(mesh: Mapping[str, Any]) -> int:
    """How many actors the mesh has (folded or not)."""
    if "rank_procs" in mesh:
        return len(mesh["rank_procs"])
    return len(mesh.get("actors", []))


def _move(counts: dict[str, int], before: str, after: str) -> None:
    """Counts one actor under `after` instead of `before`."""
    if before == after or not counts.get(before):
        return
    counts[before] -= 1
    if not counts[before]:
        del counts[before]
    counts[after] = counts.get(after, 0) + 1


def actor_key(mesh: str, rank: int) -> str:
    """The tree key of one actor."""
    return f"actor:{mesh}:{rank}"


def mesh_key(host: Any, mesh: str) -> str:
    """The tree key of an actor mesh's row on one host (a folded one's rate is kept by it)."""
    return f"mesh:{host}:{mesh}"


# -- the tree ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One line of the topology tree.

    `kind` is job, host, procs (a proc mesh on that host), mesh (an actor mesh on those procs)
    or actor; `ref` is the host id, proc mesh id, actor mesh id or actor key it stands for.
    """

    key: str
    kind: str
    depth: int
    label: str
    state: str
    ref: str = ""
    expandable: bool = False
    expanded: bool = False
    rate: float | None = None
    queue: int | None = None
    p50_ms: float | None = None
    last_method: str | None = None
    note: str = ""
    marked: bool = False


def default_expanded(kind: str, children: int) -> bool:
    """Hosts and proc meshes open; actor meshes open unless they are big (`children`: the
    mesh's ranks over every host)."""
    return kind != "mesh" or children <= 16


def build_rows(snapshot: Snapshot, expanded: Mapping[str, bool] | None = None,
               rates: Mapping[str, float] | None = None,
               marked: Iterable[str] = ()) -> list[Row]:
    """The visible tree rows: job → hosts → proc meshes → actor meshes → actors.

    Args:
        snapshot: the newest poll.
        expanded: the user's expand/collapse choices by row key (others: `default_expanded`).
        rates: messages/s by actor key.
        marked: actor keys selected by the slice input.
    """
    builder = _TreeBuilder(Index(snapshot), expanded or {}, rates or {}, set(marked))
    job = snapshot.job or {}
    return builder.build(job)


class _TreeBuilder:
    def __init__(self, index: Index, expanded: Mapping[str, bool], rates: Mapping[str, float],
                 marked: set[str]) -> None:
        self.index, self.expanded, self.rates, self.marked = index, expanded, rates, marked
        self.rows: list[Row] = []

    def build(self, job: Mapping[str, Any]) -> list[Row]:
        hosts = self.index.hosts
        kids = [self._host(h) for h in hosts]
        state = _worst(k.state for k in kids) if kids else STARTING
        title = f"job {job.get('job_id', '?')}"
        self.rows.insert(0, Row("job", "job", 0, title, state, "", bool(hosts), True,
                                _sum(k.rate for k in kids), None, None, None,
                                f"{len(hosts)} host(s)"))
        return self.rows

    def _open(self, key: str, kind: str, children: int) -> bool:
        return self.expanded.get(key, default_expanded(kind, children))

    def _host(self, host: dict[str, Any]) -> Row:
        procs = host.get("procs", [])
        groups = list(dict.fromkeys(p["procs"] for p in procs))
        key = f"host:{host['id']}"
        at, is_open = len(self.rows), self._open(key, "host", len(groups))
        kids = [self._procs(host, g, [p for p in procs if p["procs"] == g], is_open)
                for g in groups]
        # the header counts the job's procs: the controller is named apart, not counted in
        controller = any(p["proc"] == "controller" for p in procs)
        note = f"{len(procs) - controller} procs" + (" + controller" if controller else "")
        row = Row(key, "host", 1, host.get("hostname") or host["id"],
                  _worst(k.state for k in kids) if kids else RUNNING, host["id"], bool(groups),
                  is_open, _sum(k.rate for k in kids), note=note)
        self.rows.insert(at, row)
        return row

    def _procs(self, host: dict[str, Any], group: str, procs: list[dict[str, Any]],
               visible: bool) -> Row:
        names = {p["proc"] for p in procs}
        meshes = [m for m in self.index.meshes.values() if m.get("procs") == group
                  and (host["id"] in m.get("folded", ())
                       or any(a.get("proc") in names for a in m.get("actors", [])))]
        key = f"procs:{host['id']}:{group}"
        at, is_open = len(self.rows), self._open(key, "procs", len(meshes))
        kids = [self._mesh(host, m, names, visible and is_open) for m in meshes]
        states = [p.get("state") or STARTING for p in procs] + [k.state for k in kids]
        controller = group == "ctl" or any(p["proc"] == "controller" for p in procs)
        label = "controller" if controller else f"procs {group}"
        note = f"pid {procs[0].get('pid')}" if controller else _procs_note(procs)
        row = Row(key, "procs", 2, label, _worst(states), group, bool(meshes), is_open,
                  _sum(k.rate for k in kids), _sum(k.queue for k in kids), note=note)
        if visible:
            self.rows.insert(at, row)
        return row

    def _mesh(self, host: dict[str, Any], mesh: dict[str, Any], names: set[str],
              visible: bool) -> Row:
        actors = [a for a in mesh.get("actors", []) if a.get("proc") in names]
        key = mesh_key(host["id"], mesh["mesh"])
        # folds by the mesh's whole size: 64 ranks over 16 hosts are 16 groups of 4 otherwise,
        # every one open (a tree of 1,317 rows at 1,024 actors)
        at, is_open = len(self.rows), self._open(key, "mesh", mesh_size(mesh))
        kids = [self._actor(mesh, a, visible and is_open) for a in actors]
        extent = format_extent(mesh.get("extent"))
        summary = mesh.get("folded", {}).get(host["id"])
        if summary is None:
            failed = sum(k.state == FAILED for k in kids)
            state = _worst(k.state for k in kids) if kids else STARTING
            figures = (_sum(k.rate for k in kids), _sum(k.queue for k in kids),
                       _max(k.p50_ms for k in kids), _newest_method(kids))
        else:  # the job sent this mesh folded (`AdminClient.topology(rows=...)`)
            states = self.index.mesh_states(mesh, host["id"])
            failed = states.get(FAILED, 0)
            state = _worst(states) if states else STARTING
            figures = (self.rates.get(key), summary.get("queue_depth"),
                       summary.get("latency_p50_ms"), summary.get("last_method"))
        short_class = str(mesh.get("class_name", "")).rsplit(".", 1)[-1]
        note = f"{short_class} {extent}" + (f" · {failed} failed" if failed else "")
        if mesh.get("service"):  # first: the note column is narrow
            note = f"{service_note(mesh['service'])} · {note}"
        row = Row(key, "mesh", 3, mesh["name"], state, mesh["mesh"],
                  bool(actors) or summary is not None, is_open, *figures, note.strip())
        if visible:
            self.rows.insert(at, row)
        return row

    def _actor(self, mesh: dict[str, Any], actor: dict[str, Any], visible: bool) -> Row:
        key = actor_key(mesh["mesh"], actor["rank"])
        state = self.index.actor_state(mesh, actor)
        proc = self.index.procs.get(actor.get("proc", ""), {})
        note = f"pid {proc.get('pid')}" if proc.get("pid") else ""
        if state == FAILED:
            failure = self.index.failure(mesh["mesh"], actor["rank"])
            note = root_cause(failure, actor.get("failure"))
        elif state == PAUSED:
            info = self.index.sessions[key]
            note = f"pdb at {info.get('function')}:{info.get('lineno')}"
        elif actor.get("running"):
            note = running_note(actor)
        row = Row(key, "actor", 4, f"{mesh['name']}[{actor['rank']}]", state, key,
                  rate=self.rates.get(key), queue=actor.get("queue_depth"),
                  p50_ms=actor.get("latency_p50_ms"), last_method=actor.get("last_method"),
                  note=note, marked=key in self.marked)
        if visible:
            self.rows.append(row)
        return row


class _AllOpen(dict):  # type: ignore[type-arg]
    """Expansion choices that open every row."""

    def get(self, key: Any, default: Any = None) -> bool:
        return True


def failed_actors(snapshot: Snapshot) -> list[tuple[Row, list[str]]]:
    """Every failed actor, in tree order, with the keys of the rows above it (job, host, proc
    mesh, mesh): open those and the actor's row is shown, wherever it was folded."""
    found = []
    above: list[Row] = []
    for row in build_rows(snapshot, _AllOpen()):
        above = [r for r in above if r.depth < row.depth]
        if row.kind == "actor" and row.state == FAILED:
            found.append((row, [r.key for r in above]))
        above.append(row)
    return found


def running_note(actor: Mapping[str, Any]) -> str:
    """`in generate for 12.3 s` (the oldest handler running now; + how many more)."""
    running = actor.get("running") or []
    first = running[0]
    more = f" +{len(running) - 1}" if len(running) > 1 else ""
    return f"in {first['method']} for {first['running_s']:.1f} s{more}"


def service_note(service: Mapping[str, Any]) -> str:
    """`replica 1 healthy, load 2` (or `replica 1 replaced`) for a service replica's mesh."""
    where = f"replica {service.get('replica')}"
    if not service.get("current", True):
        return f"{where} replaced"
    return f"{where} {service.get('state')}, load {service.get('outstanding', 0)}"


def _procs_note(procs: list[dict[str, Any]]) -> str:
    live = sum(p.get("state") in (RUNNING, STARTING, STOPPING) for p in procs)
    return f"{live}/{len(procs)} procs live"


def _worst(states: Iterable[str]) -> str:
    present = set(states)
    if FAILED in present and present & {RUNNING, PAUSED, STALLED, STARTING, STOPPING, DEGRADED}:
        return DEGRADED
    return next((s for s in _PRECEDENCE if s in present), RUNNING)


def _sum(values: Iterable[Any]) -> Any:
    found = [v for v in values if v is not None]
    return sum(found) if found else None


def _max(values: Iterable[Any]) -> Any:
    found = [v for v in values if v is not None]
    return max(found) if found else None


def _newest_method(rows: list[Row]) -> str | None:
    return next((r.last_method for r in rows if r.last_method), None)


def root_cause(failure: Mapping[str, Any] | None, report: str | None = None) -> str:
    """One line saying why an actor failed (the failure's reason, else the report's last line)."""
    if failure and failure.get("reason"):
        return str(failure["reason"]).strip().splitlines()[-1]
    text = (failure or {}).get("report") or report or ""
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "failed"


def format_extent(extent: Mapping[str, Any] | None) -> str:
    """`{gpus: 4}` as Monarch prints an Extent."""
    if not extent:
        return "{}"
    pairs = zip(extent.get("labels", []), extent.get("sizes", []))
    return "{" + ", ".join(f"{label}: {size}" for label, size in pairs) + "}"


# -- what an action applies to ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """What the selected row (and the slice) designate for kill, stop, break, attach and stack.

    `mesh` is an actor mesh id (or a proc mesh id when a proc mesh row is selected), `selection`
    the admin API's selection text (`""` = all), `ranks` the ranks it selects, `procs` the
    processes (name, pid) those ranks run in, `rank` set when exactly one actor is meant.
    """

    kind: str
    mesh: str
    name: str
    selection: str
    ranks: tuple[int, ...]
    procs: tuple[tuple[str, Any], ...]
    rank: int | None = None

    def describe(self) -> str:
        """`trainers ranks 0-1 (gpus=0:2)`, `trainers rank 7 (gpus=7)` for the confirmation
        dialog."""
        ranks = telemetry.compress_ranks(self.ranks)
        where = f" ({self.selection})" if self.selection else " (all)"
        return f"{self.name} rank{'s' if len(self.ranks) != 1 else ''} {ranks}{where}"


class TargetError(ValueError):
    """The selected row designates nothing an action can apply to (the message says why)."""


def target_of(snapshot: Snapshot, row: Row | None, slice_text: str = "") -> Target:
    """The target of the selected row, narrowed by the slice text when a mesh is selected.

    Raises:
        TargetError: no row, a host or job row, or a slice that does not fit the mesh.
    """
    if row is None or row.kind in ("job", "host"):
        raise TargetError("select a mesh, proc mesh or actor first")
    index = Index(snapshot)
    if row.kind == "actor":
        mesh, actor = index.actors[row.ref]
        return mesh_target(index, mesh, [actor["rank"]], point_selection(actor.get("point")))
    if row.kind == "mesh":
        mesh = index.meshes[row.ref]
        labels, sizes = _extent(mesh)
        ranks = select_ranks(slice_text, labels, sizes)
        return mesh_target(index, mesh, ranks, normalize_selection(slice_text))
    procs = sorted((p for p in index.procs.values() if p["procs"] == row.ref),
                   key=lambda p: p["rank"])
    if not procs:
        raise TargetError(f"no procs in {row.label}")
    labels, sizes = proc_mesh_extent(procs)
    ranks = select_ranks(slice_text, labels, sizes)
    chosen = tuple((p["proc"], p.get("pid")) for p in procs if p["rank"] in ranks)
    return Target("procs", row.ref, row.label, normalize_selection(slice_text), tuple(ranks),
                  chosen)


def mesh_target(index: Index, mesh: dict[str, Any], ranks: list[int],
                selection: str) -> Target:
    """The target of `ranks` of an actor mesh (`selection` is their text for the admin API)."""
    by_rank = rank_procs(mesh)
    procs = tuple((by_rank[r], index.procs.get(by_rank[r], {}).get("pid"))
                  for r in ranks if r in by_rank)
    single = ranks[0] if len(ranks) == 1 else None
    return Target("mesh", mesh["mesh"], mesh["name"], selection, tuple(ranks), procs, single)


def _extent(mesh: Mapping[str, Any]) -> tuple[list[str], list[int]]:
    extent = mesh.get("extent") or {}
    return list(extent.get("labels", [])), list(extent.get("sizes", []))


def proc_mesh_extent(procs: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[int]]:
    """A proc mesh's extent from its procs' points (one `rank` dimension if they have none)."""
    points = [p.get("point") or {} for p in procs]
    labels = list(points[0]) if points and points[0] else []
    if not labels:
        return ["rank"], [max((p["rank"] for p in procs), default=-1) + 1]
    return labels, [max(pt.get(label, 0) for pt in points) + 1 for label in labels]


def point_selection(point: Mapping[str, int] | None) -> str:
    """The selection text naming one point: `hosts=0, gpus=3`."""
    return ", ".join(f"{label}={value}" for label, value in (point or {}).items())


def normalize_selection(text: str) -> str:
    """The slice text as the admin API takes it (`*`/`all`/blank → `""`)."""
    text = " ".join(text.split())
    return "" if text in ("", "*", "all") else text


# -- slices -----------------------------------------------------------------------------------

class SliceError(ValueError):
    """A slice that does not parse or does not fit the mesh (the message says why)."""


def select_ranks(selection: str, labels: Sequence[str], sizes: Sequence[int]) -> list[int]:
    """The row-major ranks that `hosts=0, gpus=0:4` (index, `a:b[:s]` range or `(a,b)` list per
    label; labels left out keep their whole range; blank = all) selects in the extent — the
    admin API's own reading (`monarch.admin.select_ranks`), so what the console marks is what
    `kill` and `stop` hit.

    Raises:
        SliceError: unknown label, index out of range, bad syntax, or nothing selected.
    """
    from monarch.admin import SelectionError
    from monarch.admin import select_ranks as admin_select

    try:
        return admin_select(normalize_selection(selection), list(labels), list(sizes))
    except SelectionError as exc:
        raise SliceError(str(exc)) from None


# -- rates ------------------------------------------------------------------------------------

class RateTracker:
    """Per-key rates (messages/s) from cumulative counters sampled over time, with history."""

    def __init__(self, history: int = 60) -> None:
        self._last: dict[str, tuple[float, float]] = {}
        # the newest rate of each key; history is kept for sparklines
        self.rates: dict[str, float] = {}
        self.history: dict[str, deque[float]] = {}
        self._size = history

    def update(self, now: float, counters: Mapping[str, float]) -> dict[str, float]:
        """Samples `counters` (cumulative) at `now` (seconds); returns the rates."""
        for key, value in counters.items():
            before = self._last.get(key)
            self._last[key] = (now, value)
            if before is None or now <= before[0]:
                continue
            rate = max(value - before[1], 0.0) / (now - before[0])
            self.rates[key] = rate
            self.history.setdefault(key, deque(maxlen=self._size)).append(rate)
        return self.rates


def actor_counters(snapshot: Snapshot) -> dict[str, float]:
    """messages handled (cumulative) by actor key, and by the row key of a folded mesh on a
    host (`mesh:<host>:<mesh>`: its actors' messages together)."""
    index = Index(snapshot)
    counters = {key: float(actor.get("messages") or 0)
                for key, (_, actor) in index.actors.items()}
    for mesh in index.meshes.values():
        for host, summary in (mesh.get("folded") or {}).items():
            counters[mesh_key(host, mesh["mesh"])] = float(summary.get("messages") or 0)
    return counters


def wanted_rows(snapshot: Snapshot, expanded: Mapping[str, bool]) -> frozenset[str]:
    """What of each mesh the tree shows: the mesh's id when its row is open on every host it
    runs on (or its hosts are not known yet), ``<mesh id>@<host id>`` for each host where only
    some are — by the user's choice (`expanded`) or by default (`default_expanded`: the small
    ones). The console asks the job for these rows and every other mesh folded
    (`AdminClient.topology(rows=...)`): a mesh of a thousand ranks open on one host of 128
    sends that host's 8 rows, not 1,024."""
    index = Index(snapshot)
    wanted = set()
    for mesh_id, mesh in index.meshes.items():
        hosts = mesh.get("folded") or {index.host_of(a.get("proc"))
                                       for a in mesh.get("actors", [])}
        default = default_expanded("mesh", mesh_size(mesh))
        open_on = [host for host in hosts if expanded.get(mesh_key(host, mesh_id), default)]
        if not hosts or len(open_on) == len(hosts):
            wanted.add(mesh_id)
        else:
            wanted.update(f"{mesh_id}@{host}" for host in open_on)
    return frozenset(wanted)


def breadcrumb(rows: Sequence[Row], selected: Row | None) -> str:
    """`job j1 › box › procs p1 › trainers › trainers[2]`: the path to the selected row."""
    if selected is None or selected not in rows:
        return "no selection"
    path: list[str] = []
    depth = selected.depth + 1
    for row in reversed(rows[:rows.index(selected) + 1]):
        if row.depth < depth:
            path.append(row.label)
            depth = row.depth
    return " › ".join(reversed(path))

