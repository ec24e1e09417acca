"""`monarch top`: the Textual console of a running job.

Layout: a two-line header (job, uptime, health, paused actors, refresh rate; then the selection
or the newest error), the topology tree (left) beside the detail pane and the transfer
throughput (right), the logs beside the recent spans (bottom), the slice and search inputs
(hidden until `:` or `/`), and the footer with the key hints. Data comes from a `Feed` (poll and
log threads over the admin client); the screen takes it on a timer and asks the pure model
(`_model`) what to show.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple, TextIO

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer

from . import REFRESH_S
from . import _ending as ending
from . import _keys as keys
from . import _logmodel as logmodel
from . import _model as model
from ._attach import attach
from ._confirm import ConfirmScreen
from ._describe import describe
from ._detail import DetailPane
from ._diagnostics import DiagnosticsOverlay
from ._command import CommandError, is_resource, parse
from ._command_input import CommandInput
from ._feed import Client, Feed
from ._grid_view import GridScreen
from ._header import JobHeader
from ._help import HelpScreen
from ._logs import LogPane
from ._query_pane import QueryPane
from ._resource_view import ResourceScreen
from ._screen_text import screen_text
from ._search_input import SearchInput
from ._spans import SpanPane
from ._stack import StackOverlay
from ._stack_groups import StackGroupsScreen
from ._throughput import ThroughputPane
from ._timeline_view import TimelineScreen
from ._tree import MeshTree

TICK_S = 0.1
EVERY_ACTOR = frozenset({"actors"})
"""The resource views that list every actor (the job then sends no mesh folded)."""
"""How often the screen takes new data from the feed."""
LOG_RENDER_S = 0.25
"""The log pane re-renders at most this often (4 Hz) however fast lines arrive."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConsoleStatistics:
    """How the console keeps up: screen updates per second (a new snapshot or new log lines
    drawn), the timer's lag behind its schedule (how long the UI was busy), logs received."""

    updates_per_s: float
    log_renders_per_s: float
    snapshots_per_s: float
    tick_lag_ms_p50: float
    tick_lag_ms_p99: float
    tick_lag_ms_max: float
    log_records: int
    log_lines_shown: int


class _Tick(NamedTuple):
    at: float
    lag: float
    snapshot: bool
    logs: bool


_APP_ACTIONS = frozenset(k.action for k in keys.KEYS)

GC_GEN0 = 50_000
"""Allocations between two young collections in `monarch top` (Python's default: 700)."""


def quiet_gc() -> None:
    """Tunes the garbage collector of a process that runs the console (`MonarchTop.run`:
    `monarch top`, `monarch demo`; not the tests, which use `run_test`): what is alive now
    (the imported modules, Textual's and Rich's tables) is frozen out of every later
    collection, and young collections come less often. Each poll of a 1,024-actor job parses
    ~400 KB of JSON into dicts: the console ran ten full collections in 20 s, up to 212 ms
    each, and a key pressed meanwhile waited for them (`bench/console_scale.py` counts them)."""
    import gc

    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, GC_GEN0), gen1, gen2)


class MonarchTop(App[None]):
    """The console. `client` is a `monarch.admin.AdminClient` (or anything with its methods).

    Args:
        client: the admin client of the job to show.
        refresh: seconds between polls of the admin API.
        attach_io: (stdin, stdout) for pdb sessions instead of the real terminal (tests).
        feed: a ready `Feed` (default: one over `client`).
        read_only: refuse kill, stop, break and attach (`monarch top --read-only`).
    """

    TITLE = "monarch top"
    CSS_PATH = "app.tcss"
    BINDINGS = [Binding(k.keys, k.action, k.footer or k.description, show=bool(k.footer),
                        key_display=keys.display_key(k.keys).split("/")[0])
                for k in keys.KEYS]

    EVERYWHERE = frozenset({"help", "quit", "save_screen", "refresh", "command"})
    """The app's actions that stay on while another screen (the grid, a table, the timeline) is
    on top; the others act on the tree's selection behind it, so they are off and out of the
    footer there (the grid's own `k` was shown twice)."""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.EVERYWHERE or len(self.screen_stack) <= 1 \
                or action not in _APP_ACTIONS:
            return True
        return False  # hidden and off while another screen is on top (None would dim them)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the app in this terminal, its garbage collector tuned first (`quiet_gc`)."""
        quiet_gc()
        return super().run(*args, **kwargs)

    def __init__(self, client: Client, *, refresh: float = REFRESH_S,
                 attach_io: tuple[TextIO, TextIO] | None = None,
                 feed: Feed | None = None, read_only: bool = False) -> None:
        super().__init__()
        self.read_only_mode = read_only
        self.client = client
        self.refresh_s = refresh
        self.attach_io = attach_io
        self.feed = feed or Feed(client, interval=refresh)
        self.snapshot = model.Snapshot()
        self.rates = model.RateTracker()
        self.expanded: dict[str, bool] = {}
        self.logs = logmodel.LogBuffer()
        self.search = ""
        self.logs_by_selection = False
        self.fold = True
        self.slice: tuple[str, str] | None = None
        """(row key of the sliced mesh, slice text) while a slice is applied."""
        self.marked: set[str] = set()
        self.results: list[tuple[str, Any]] = []
        """(action, result or error text) of every action, oldest first."""
        self._ticks: deque[_Tick] = deque(maxlen=3000)  # the last 5 minutes of ticks
        self._last_tick = 0.0
        self._tree_stale = False  # a snapshot came while a view hid the tree
        self._log_rendered = (0.0, -1, "")
        self._error: str | None = None
        self._seen_sessions: set[Any] = set()
        self._rows_key: tuple[Any, ...] = ()
        self.ended: dict[str, Any] | None = None
        """How the job ended, once its admin API stopped answering and its controller is
        gone (state, exit code, reason); None while it runs."""

    # -- layout ----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield JobHeader(id="header")
        with Horizontal(id="upper"):
            yield MeshTree(id="tree")
            with Vertical(id="side"):
                yield DetailPane(id="detail")
                yield ThroughputPane(id="throughput")
        with Horizontal(id="lower"):
            yield LogPane(id="logs")
            yield SpanPane(id="spans")
        yield CommandInput(id="command")
        yield SearchInput(id="search")
        yield Footer()

    def on_mount(self) -> None:
        # the main screen's widgets, kept: `query_one` searches the active screen, which is an
        # overlay while one is open
        main = self.screen
        self.mesh_tree = main.query_one(MeshTree)
        self.job_header = main.query_one(JobHeader)
        self.detail_pane = main.query_one(DetailPane)
        self.log_pane = main.query_one(LogPane)
        self.span_pane = main.query_one(SpanPane)
        self.throughput_pane = main.query_one(ThroughputPane)
        self.command_input = main.query_one(CommandInput)
        self.search_input = main.query_one(SearchInput)
        self.mesh_tree.focus()
        self.feed.start()
        self._last_tick = time.monotonic()
        self.set_interval(TICK_S, self._tick)
        self._render_header()

    def on_unmount(self) -> None:
        self.feed.stop()

    # -- taking data -----------------------------------------------------------------------
    def _tick(self) -> None:
        if not self.is_running:
            return
        started = time.monotonic()
        lag = max(started - self._last_tick - TICK_S, 0.0)
        self._last_tick = started
        snap = self.feed.take()
        if snap is not None:
            self.apply(snap)
        elif self._tree_stale and len(self.screen_stack) <= 1:
            self._render_tree()
        self._ask_rows()
        self.logs.extend(self.feed.take_logs())
        rendered = self._render_logs()
        self._ticks.append(_Tick(started, lag, snap is not None, rendered))
        if snap is not None:
            self._render_header()

    def _ask_rows(self) -> None:
        """Tells the feed which meshes' actors to fetch (issue 32: at a thousand actors the
        job sends the others folded, a summary by host): those the tree shows open, the
        grid's or timeline's mesh, every one under the `:actors` view. Polls again at once
        when that changed (a mesh just opened shows its actors within one request)."""
        if self.snapshot.topology is None:
            return  # every actor until the job's meshes are known
        screens = tuple(self.screen_stack)
        key = (id(self.snapshot), tuple(self.expanded.items()), tuple(map(id, screens)))
        if key == self._rows_key:
            return
        self._rows_key = key
        wanted: frozenset[str] | None = model.wanted_rows(self.snapshot, self.expanded)
        for screen in screens:
            if isinstance(screen, (GridScreen, TimelineScreen)):
                wanted = wanted | {screen.mesh_id}  # type: ignore[operator]
            elif isinstance(screen, ResourceScreen) and screen.kind in EVERY_ACTOR:
                wanted = None
                break
        if wanted != self.feed.rows:
            self.feed.rows = wanted
            self.feed.poke()

    def apply(self, snap: model.Snapshot) -> None:
        """Shows a new snapshot (keeps the last good topology when this poll failed; says so
        when that is because the job ended)."""
        self._error = snap.error
        if snap.topology is None or snap.job is None:
            if snap.error and self.ended is None and self.snapshot.job:
                self.ended = ending.job_ended(self.snapshot.job)
                if self.ended is not None:
                    self.notify(f"job {self.snapshot.job.get('job_id')} ended "
                                f"({self.ended['state']}); press H for its history",
                                title="job ended", severity="warning", timeout=15)
            snap = dataclasses.replace(self.snapshot, error=snap.error)
        self.snapshot = snap
        self.rates.update(snap.taken_at or time.monotonic(), model.actor_counters(snap))
        self._refresh_marked()
        if len(self.screen_stack) <= 1:
            self._render_tree()
        else:  # hidden under a view: rebuilt when it shows again (a thousand rows a poll)
            self._tree_stale = True
        self.span_pane.show(snap.spans)
        self.throughput_pane.show(snap.transfers)
        self._announce_sessions(snap.sessions)
        screen = self.screen
        # a view pushed but not composed yet (a poll between the key and its mount), or one
        # being closed, has nothing to draw on
        if isinstance(screen, (GridScreen, ResourceScreen, TimelineScreen)) and \
                screen.is_mounted and screen.is_attached:
            screen.show()

    def _render_tree(self) -> None:
        self._tree_stale = False
        rows = model.build_rows(self.snapshot, self.expanded, self.rates.rates, self.marked)
        self.mesh_tree.show(rows)
        self._render_detail()

    def _render_detail(self) -> None:
        row = self.mesh_tree.selected
        focus = None
        if row is not None and row.kind == "actor":
            found = model.Index(self.snapshot).actors.get(row.ref)
            focus = (found[0]["mesh"], found[1]["rank"]) if found else None
        if focus != self.feed.focus:
            self.feed.focus = focus
            self.feed.poke()
        self.detail_pane.show(describe(row, self.snapshot, self.rates.rates))

    def _render_logs(self, force: bool = False) -> bool:
        flt = self._log_filter()
        key = (self.logs.version, flt.describe() + str(self.fold))
        now = time.monotonic()
        if not force and (key == self._log_rendered[1:] or now - self._log_rendered[0]
                          < LOG_RENDER_S):
            return False
        self._log_rendered = (now, *key)
        pane = self.log_pane
        status = " · ".join(x for x in (flt.describe(), "" if pane.follow else "paused",
                                        "" if self.fold else "unfolded") if x)
        pane.show(self.logs.lines(flt, self.fold, limit=400), f"({status})" if status else "")
        return True

    def _log_filter(self) -> logmodel.LogFilter:
        if self.logs_by_selection:
            return logmodel.filter_for(self.mesh_tree.selected, self.snapshot, self.search)
        return logmodel.LogFilter(self.search)

    def _render_header(self) -> None:
        crumb = self._crumb()
        paused = len(self.snapshot.sessions)
        self.job_header.show(self.snapshot.job, paused=paused, refresh_s=self.refresh_s,
                             fps=self.statistics().updates_per_s, crumb=crumb,
                             error=self._error, ended=self.ended)

    def _crumb(self) -> str:
        parts = [model.breadcrumb(self.mesh_tree.rows_shown, self.mesh_tree.selected)]
        if self.slice is not None:
            key, text = self.slice
            parts.append(f"slice {text or 'all'} → {len(self.marked)} rank(s) marked ◆")
        return " › ".join(parts)

    def _announce_sessions(self, sessions: list[dict[str, Any]]) -> None:
        for info in sessions:
            if info.get("id") not in self._seen_sessions:
                self._seen_sessions.add(info.get("id"))
                self.notify(f"{info.get('actor_name')}[{info.get('rank')}] paused in pdb at "
                            f"{info.get('function')}:{info.get('lineno')} — select it, press a",
                            title="breakpoint", timeout=8)

    def statistics(self, window_s: float = 10.0) -> ConsoleStatistics:
        """How the screen kept up over the last `window_s` seconds."""
        ticks = [t for t in self._ticks if t.at >= time.monotonic() - window_s]
        span = max(ticks[-1].at - ticks[0].at + TICK_S, TICK_S) if ticks else 1.0
        lags = sorted(t.lag * 1000 for t in ticks) or [0.0]
        return ConsoleStatistics(
            updates_per_s=sum(t.snapshot or t.logs for t in ticks) / span,
            log_renders_per_s=sum(t.logs for t in ticks) / span,
            snapshots_per_s=sum(t.snapshot for t in ticks) / span,
            tick_lag_ms_p50=lags[len(lags) // 2], tick_lag_ms_p99=lags[int(len(lags) * .99)],
            tick_lag_ms_max=lags[-1], log_records=self.logs.received,
            log_lines_shown=len(self.log_pane.shown_lines))

    # -- tree events -----------------------------------------------------------------------
    def on_mesh_tree_selected(self, event: MeshTree.Selected) -> None:
        self._render_detail()
        self._render_header()
        if self.logs_by_selection:
            self._render_logs(force=True)

    def on_mesh_tree_toggled(self, event: MeshTree.Toggled) -> None:
        row = event.row
        self.expanded[row.key] = not row.expanded if event.expand is None else event.expand
        self._render_tree()

    # -- moving ----------------------------------------------------------------------------
    def action_cursor_down(self) -> None:
        self.mesh_tree.focus()
        self.mesh_tree.action_cursor_down()

    def action_cursor_up(self) -> None:
        self.mesh_tree.focus()
        self.mesh_tree.action_cursor_up()

    def action_next_failure(self) -> None:
        """Jumps to the next failed actor (after the cursor, round to the first), opening the
        rows above it; its root cause is in the detail pane."""
        failed = model.failed_actors(self.snapshot)
        if not failed:
            self.notify("no failed actor", title="failures")
            return
        keys = [row.key for row, _ in failed]
        current = self.mesh_tree.selected
        here = current.key if current is not None else ""
        at = (keys.index(here) + 1) % len(failed) if here in keys else 0
        row, above = failed[at]
        for key in above:
            self.expanded[key] = True
        self._render_tree()
        self.mesh_tree.focus()
        self.mesh_tree.select_key(row.key)
        self.notify(f"{row.label}: {row.note}", title=f"failure {at + 1} of {len(failed)}")

    def action_cursor_top(self) -> None:
        self.mesh_tree.focus()
        self.mesh_tree.move_cursor(row=0)

    def action_cursor_bottom(self) -> None:
        self.mesh_tree.focus()
        self.mesh_tree.move_cursor(row=max(len(self.mesh_tree.rows_shown) - 1, 0))

    def action_toggle_row(self) -> None:
        self.mesh_tree.action_toggle_row()

    def action_focus_logs(self) -> None:
        self.log_pane.focus()

    # -- command mode, slice and search ----------------------------------------------------
    def action_command(self) -> None:
        """`:`: a command or a slice of the selected row (its slice is there to edit); on a
        view with a command input of its own (a resource table, the timeline), that one."""
        row = self.mesh_tree.selected
        box = self._command_box()
        box.border_title = f": {row.label}" if row is not None else ":"
        box.value = self.slice[1] if self.slice and row and self.slice[0] == row.key else ""
        box.add_class("shown")
        box.focus()

    def on_command_input_applied(self, event: CommandInput.Applied) -> None:
        if self.run_command(event.text):
            self._close_input(CommandInput)

    def on_command_input_cancelled(self, event: CommandInput.Cancelled) -> None:
        self._close_input(CommandInput)

    def run_command(self, text: str) -> bool:
        """Runs what was typed after `:` (see `_command`); False (and why) when it cannot be:
        the input then stays open to fix it."""
        try:
            name, arg = parse(text)
        except CommandError as exc:
            self.notify(str(exc), title="command", severity="error")
            return False
        if name == "slice":
            return self.apply_slice(arg)
        if arg and name != "save":
            self.notify(f":{name} takes no argument", title="command", severity="error")
            return False
        if is_resource(name):
            self._close_input(CommandInput)
            while len(self.screen_stack) > 1:  # a resource replaces any view open
                self.pop_screen()
            self.push_screen(ResourceScreen(name))
            return True
        actions = {"tree": self._to_tree, "grid": self.action_grid,
                   "timeline": self.action_timeline,
                   "stacks": self.action_stack_groups, "logs": self.action_focus_logs,
                   "sql": self.action_query, "help": self.action_help, "quit": self.exit,
                   "save": lambda: self.save_screen(arg or None)}
        self._close_input(CommandInput)
        actions[name]()
        return True

    def _to_tree(self) -> None:
        while len(self.screen_stack) > 1:
            self.pop_screen()
        self.mesh_tree.focus()

    def action_save_screen(self) -> None:
        self.save_screen()

    def save_screen(self, path: str | None = None) -> str | None:
        """Writes the screen as text to `path` (default `monarch-top-<job>-<time>.txt` here);
        returns the path written, None (and why) when it could not be."""
        import os

        job = (self.snapshot.job or {}).get("job_id", "job")
        path = path or f"monarch-top-{job}-{time.strftime('%Y%m%d-%H%M%S')}.txt"
        try:
            with open(path, "w") as out:
                out.write(screen_text(self))
        except OSError as exc:
            self.notify(f"could not save the screen: {exc}", title="save", severity="error")
            return None
        self.notify(f"screen saved to {os.path.abspath(path)}", title="save")
        return path

    def reveal(self, kind: str, ref: str) -> bool:
        """Selects the tree's node of `kind` and `ref` (a mesh id, proc mesh, actor key),
        opening the rows above it; False when the tree has no such node."""
        rows = model.build_rows(self.snapshot, {**self.expanded, **{
            r.key: True for r in model.build_rows(self.snapshot, {}) if r.expandable}})
        found = next((r for r in rows if r.kind == kind and r.ref == ref), None)
        if found is None:
            self.notify(f"{kind} {ref} is not in the tree now", severity="warning")
            return False
        at = rows.index(found)
        depth = found.depth
        for row in reversed(rows[:at]):  # its ancestors: each shallower row above it
            if row.depth < depth:
                self.expanded[row.key] = True
                depth = row.depth
        self._render_tree()
        shown = next(i for i, r in enumerate(self.mesh_tree.rows_shown) if r.key == found.key)
        self.mesh_tree.focus()
        self.mesh_tree.move_cursor(row=shown)
        return True

    def apply_slice(self, text: str) -> bool:
        """Selects the ranks `text` picks in the selected mesh; False (and a warning) if it does
        not fit."""
        row = self.mesh_tree.selected
        if row is None or row.kind not in ("mesh", "procs"):
            self.notify("select a mesh (or proc mesh) row to slice it", severity="warning")
            return False
        try:
            target = model.target_of(self.snapshot, row, text)
        except (model.SliceError, model.TargetError) as exc:
            self.notify(str(exc), title="slice", severity="error")
            return False
        assert row is not None
        self.slice = (row.key, text)
        self._refresh_marked()
        self._render_tree()
        self._render_header()
        self.notify(f"selected {target.describe()}", title="slice")
        return True

    def _refresh_marked(self) -> None:
        self.marked = set()
        if self.slice is None:
            return
        key, text = self.slice
        row = next((r for r in model.build_rows(self.snapshot, self.expanded) if r.key == key),
                   None)
        if row is None or row.kind != "mesh":
            return
        try:
            target = model.target_of(self.snapshot, row, text)
        except (model.SliceError, model.TargetError):
            return
        self.marked = {model.actor_key(target.mesh, r) for r in target.ranks}

    def action_search(self) -> None:
        box = self.search_input
        box.value = self.search
        box.add_class("shown")
        box.focus()

    def on_search_input_searched(self, event: SearchInput.Searched) -> None:
        self.search = event.text
        self._render_logs(force=True)
        if event.done:
            self._close_input(SearchInput)

    def _command_box(self) -> CommandInput:
        """The command input of the screen shown (the tree's, unless the view has one)."""
        found = self.screen.query(CommandInput)
        return found.first() if found else self.command_input

    def _close_input(self, kind: type) -> None:
        if kind is CommandInput and self.screen is not self.screen_stack[0]:
            box = self._command_box()
            box.remove_class("shown")
            if box is not self.command_input:
                self.screen.focus_next()  # back to the view's table or body
                return
        self.screen_stack[0].query_one(kind).remove_class("shown")
        self.mesh_tree.focus()

    def action_clear(self) -> None:
        self.slice, self.marked, self.search = None, set(), ""
        self._render_tree()
        self._render_logs(force=True)
        self._render_header()

    def action_logs_follow_selection(self) -> None:
        self.logs_by_selection = not self.logs_by_selection
        self._render_logs(force=True)

    def action_follow(self) -> None:
        self.log_pane.set_follow(not self.log_pane.follow)
        self._render_logs(force=True)

    def action_fold(self) -> None:
        self.fold = not self.fold
        self._render_logs(force=True)

    # -- acting on the selection -----------------------------------------------------------
    def target(self) -> model.Target:
        """What `k`, `s`, `b`, `p` apply to: the selected row, narrowed by its slice."""
        row = self.mesh_tree.selected
        text = self.slice[1] if self.slice and row and self.slice[0] == row.key else ""
        return model.target_of(self.snapshot, row, text)

    def _target_or_warn(self) -> model.Target | None:
        try:
            return self.target()
        except (model.TargetError, model.SliceError) as exc:
            self.notify(str(exc), severity="warning")
            return None

    def read_only(self) -> str | None:
        """Why actions are refused here (--read-only, an ended job), or None when they run."""
        if self.read_only_mode:
            return "read-only console (monarch top --read-only): kill, stop, break and " \
                   "attach are off"
        if self.has_ended():
            job = (self.snapshot.job or {}).get("job_id", "")
            return f"job {job} has ended: its console is read-only"
        return None

    def has_ended(self) -> bool:
        """The job shown has ended (its admin API is gone, or this is its history)."""
        state = (self.snapshot.job or {}).get("state", "running")
        return self.ended is not None or state != "running"

    def _refused(self) -> bool:
        why = self.read_only()
        if why is not None:
            self.notify(why, severity="warning")
        return why is not None

    def action_history(self) -> None:
        """Opens the ended job's history in place of its (gone) admin API."""
        if self.ended is None:
            self.notify("the job is running: `monarch top --job ID` opens a history",
                        severity="warning")
            return
        try:
            client = ending.history_client((self.snapshot.job or {}).get("job_id", ""))
        except FileNotFoundError as exc:
            self.notify(str(exc), title="history", severity="error")
            return
        self.feed.stop()
        self.client, self.ended, self._error = client, None, None
        self.feed = Feed(client, interval=self.refresh_s)
        self.feed.start()
        self.feed.poke()

    GUARDED = ("kill", "stop", "break_next", "continue_all", "attach")
    """The actions a read-only console refuses."""

    def act(self, name: str, target: model.Target | None = None) -> None:
        """Runs the action `name` (kill, stop, break_next, attach, stack, stack_groups) on
        `target`: by default the tree's selection narrowed by its slice; the grid passes the
        cells it marks."""
        if name in self.GUARDED and self._refused():
            return
        target = target or self._target_or_warn()
        if target is not None:
            getattr(self, f"_act_{name}")(target)

    def action_kill(self) -> None:
        self.act("kill")

    def action_stop(self) -> None:
        self.act("stop")

    def action_break_next(self) -> None:
        self.act("break_next")

    def action_stack(self) -> None:
        self.act("stack")

    def action_stack_groups(self) -> None:
        """A selected actor row stands for all ranks of its mesh here."""
        row, target = self.mesh_tree.selected, self._target_or_warn()
        if target is not None and row is not None and row.kind == "actor":
            target = dataclasses.replace(target, selection="")
        if target is not None:
            self.act("stack_groups", target)

    def action_attach(self) -> None:
        if not self._refused():
            self._attach_session(self.session_for_selection())

    def action_grid(self) -> None:
        """The selected mesh (or the selected actor's) as its grid."""
        row = self.mesh_tree.selected
        mesh = None
        if row is not None and row.kind == "mesh":
            mesh = row.ref
        elif row is not None and row.kind == "actor":
            mesh = model.Index(self.snapshot).actors[row.ref][0]["mesh"]
        if mesh is None:
            self.notify("select an actor mesh (or one of its actors) to see its grid",
                        severity="warning")
            return
        self.push_screen(GridScreen(mesh))

    def action_timeline(self) -> None:
        """The selected mesh's spans (or the selected actor's) as bars on a time axis."""
        row = self.mesh_tree.selected
        if row is not None and row.kind == "mesh":
            self.push_screen(TimelineScreen(row.ref))
        elif row is not None and row.kind == "actor":
            mesh, actor = model.Index(self.snapshot).actors[row.ref]
            self.push_screen(TimelineScreen(mesh["mesh"], actor["rank"]))
        else:
            self.notify("select an actor mesh (or an actor) to see its timeline",
                        severity="warning")

    def _act_kill(self, target: model.Target) -> None:
        self._confirm_then(target, "kill", "Kill", "SIGKILL to",
                           lambda t: self.client.kill(t.mesh, t.selection))  # type: ignore

    def _act_stop(self, target: model.Target) -> None:
        self._confirm_then(target, "stop", "Stop", "graceful stop of",
                           lambda t: self.client.stop(t.mesh, t.selection))  # type: ignore

    def _confirm_then(self, target: model.Target, name: str, verb: str, what: str,
                      act: Callable[[model.Target], Any]) -> None:
        procs = ", ".join(f"{p} (pid {pid})" for p, pid in target.procs[:8])
        more = f" and {len(target.procs) - 8} more" if len(target.procs) > 8 else ""
        question = f"{verb} {target.describe()}?"
        detail = f"{what} {len(target.procs)} process(es): {procs}{more}"

        def answered(yes: bool | None) -> None:
            if yes:
                self._run_action(name, lambda: act(target))

        self.push_screen(ConfirmScreen(question, detail), answered)

    def _act_break_next(self, target: model.Target) -> None:
        if target.rank is None:
            self.notify("select one actor (or slice one rank) to break into", severity="warning")
            return
        rank = target.rank
        self._run_action("break_next",
                         lambda: self.client.break_next(target.mesh, rank))  # type: ignore

    def action_continue_all(self) -> None:
        if self._refused():
            return
        self._run_action("continue_all", self.client.continue_all)  # type: ignore

    def _act_stack(self, target: model.Target) -> None:
        if not target.procs:
            return
        proc, pid = target.procs[0]
        self.push_screen(StackOverlay(proc, pid, lambda: self.client.stack(proc)))  # type: ignore

    def _act_stack_groups(self, target: model.Target) -> None:
        """The target's ranks grouped by what they run now (a selected actor row: all ranks
        of its mesh); only a live job has stacks to take."""
        stacks = getattr(self.client, "stacks", None)  # a history client has none
        why = (f"job {(self.snapshot.job or {}).get('job_id', '')} has ended"
               if self.has_ended() else None if stacks else "this console shows a history")
        if why is not None or stacks is None:
            self.notify(f"stacks need a live job ({why})", title="stacks", severity="warning")
            return
        mesh, selection = target.mesh, target.selection
        self.push_screen(StackGroupsScreen(target.name, selection,
                                           lambda: stacks(mesh, selection)))

    def action_diagnose(self) -> None:
        self.push_screen(DiagnosticsOverlay(self.client.diagnose))  # type: ignore

    def action_query(self) -> None:
        run = getattr(self.client, "query", None)
        if run is None:
            self.notify("this client cannot run SQL", severity="warning")
            return
        self.push_screen(QueryPane(run))

    def action_refresh(self) -> None:
        self.feed.poke()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    @work(thread=True, group="actions")
    def _run_action(self, name: str, call: Callable[[], Any]) -> None:
        try:
            result, error = call(), None
        except Exception as exc:  # noqa: BLE001 - shown to the user
            result, error = None, f"{type(exc).__name__}: {exc}"
        self.call_from_thread(self._action_done, name, result, error)

    def _action_done(self, name: str, result: Any, error: str | None) -> None:
        self.results.append((name, error if error else result))
        self.feed.poke()
        if error:
            self.notify(error, title=name, severity="error", timeout=10)
        else:
            self.notify(summarize(name, result), title=name)

    # -- debugger --------------------------------------------------------------------------
    def session_for_selection(self) -> dict[str, Any] | None:
        """The paused session of the selected actor (or the only one under the selected row,
        or the job's only session)."""
        index = model.Index(self.snapshot)
        row = self.mesh_tree.selected
        sessions = self.snapshot.sessions
        if row is not None and row.kind == "actor" and row.key in index.sessions:
            return index.sessions[row.key]
        if row is not None and row.kind == "mesh":
            inside = [s for s in sessions if (index.session_key(s) or "").startswith(
                f"actor:{row.ref}:")]
            if len(inside) == 1:
                return inside[0]
        return sessions[0] if len(sessions) == 1 else None

    def _act_attach(self, target: model.Target) -> None:
        """The paused session among the target's ranks (the grid's cells)."""
        keys = {model.actor_key(target.mesh, r) for r in target.ranks}
        found = [s for k, s in model.Index(self.snapshot).sessions.items() if k in keys]
        if len(found) > 1:
            self.notify(f"{len(found)} paused actors here: select one", severity="warning")
            return
        self._attach_session(found[0] if found else None)

    def _attach_session(self, session: dict[str, Any] | None) -> None:
        if session is None:
            count = len(self.snapshot.sessions)
            self.notify("no paused actor here" + (f"; {count} paused: select one" if count else
                        "; press b to break an actor at its next message"), severity="warning")
            return
        if self.attach_io is not None:
            ended = attach(self.client, session, *self.attach_io)  # type: ignore[arg-type]
        else:
            with self.suspend():
                ended = attach(self.client, session, sys.stdin, sys.stdout)  # type: ignore
        self.results.append(("attach", "ended" if ended else "detached"))
        self.feed.poke()
        self.refresh()


def summarize(name: str, result: Any) -> str:
    """One line about an action's result."""
    if not isinstance(result, dict):
        return f"{name}: {result}"
    if name == "kill":
        pids = ", ".join(str(k.get("pid")) for k in result.get("killed", []))
        return f"sent {result.get('signal', 'SIGKILL')} to pid(s) {pids or 'none'}"
    if name == "stop":
        return f"stopped {len(result.get('stopped', []))} proc(s)" + (
            "" if result.get("done", True) else " (still exiting)")
    if name == "break_next":
        who = result.get("name") or result.get("mesh")  # the name it has everywhere else
        return f"{who}[{result.get('rank')}] breaks at its next message"
    return f"{name}: done"
