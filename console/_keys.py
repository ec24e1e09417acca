"""The console's keys (k9s/htop habits): one table that makes the app's BINDINGS, the footer
and the help."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class Key:
    """One key binding: Textual key names (comma-separated), the app action, its help text."""

    keys: str
    action: str
    description: str
    group: str
    footer: str = ""
    """The footer's short label ("" keeps the key out of the footer)."""


KEYS: tuple[Key, ...] = (
    Key("j,down", "cursor_down", "next row", "move"),
    Key("up", "cursor_up", "previous row (k is kill, as in htop)", "move"),
    Key("g,home", "cursor_top", "first row", "move"),
    Key("G,end", "cursor_bottom", "last row", "move"),
    Key("enter,right,left", "toggle_row", "expand / collapse the row", "move"),
    Key("tab", "focus_next", "next pane", "move", "panes"),
    Key("e", "next_failure", "jump to the next failed actor (its root cause in the detail pane)",
        "move", "failures"),
    Key("l", "focus_logs", "focus the logs", "move"),
    Key("v", "grid", "the selected mesh as its grid: one cell per rank, by a measure", "select",
        "grid"),
    Key("t", "timeline", "the selected mesh's (or actor's) last seconds of spans as bars, one "
        "lane per rank (+/- zoom)", "inspect", "timeline"),
    Key("colon", "command", "command mode: :meshes :procs :actors :services :weights "
        ":tensors :transfers :spans :jobs :allocations, :grid :stacks :timeline :logs :sql "
        ":save :tree, or a slice of the selected mesh (hosts=0, gpus=0:4)", "select", "cmd"),
    Key("escape", "clear", "clear the slice and the log filter", "select"),
    Key("slash", "search", "filter the logs: a regular expression, !text inverts", "logs",
        "filter"),
    Key("m", "logs_follow_selection", "logs of the selected mesh/rank only (toggle)", "logs"),
    Key("f", "follow", "follow the newest logs (toggle)", "logs"),
    Key("u", "fold", "fold identical lines across ranks (toggle)", "logs"),
    Key("k,ctrl+k", "kill", "kill the selection (SIGKILL, after confirmation)", "act", "kill"),
    Key("s", "stop", "stop the selection gracefully (after confirmation)", "act", "stop"),
    Key("a", "attach", "attach pdb to the paused actor (detach: `detach` or Ctrl-D)", "debug",
        "attach"),
    Key("b", "break_next", "break the selected actor at its next message", "debug", "break"),
    Key("C", "continue_all", "continue every paused actor", "debug"),
    Key("p", "stack", "py-spy stack of the selected proc", "inspect", "py-spy"),
    Key("S", "stack_groups", "every rank's stack (mesh or slice), grouped, odd ones first",
        "inspect", "stacks"),
    Key("d", "diagnose", "diagnostics: ping every proc", "inspect", "diag"),
    Key("Q", "query", "query the telemetry with SQL (DataFusion)", "inspect", "sql"),
    Key("r", "refresh", "refresh now", "inspect"),
    Key("H", "history", "open the history of the job that ended", "inspect"),
    Key("ctrl+s", "save_screen", "save the screen to a text file (:save PATH)", "app"),
    Key("question_mark", "help", "this help", "app", "help"),
    Key("q,ctrl+c", "quit", "quit", "app", "quit"),
)
"""Every key of the console (k9s/htop habits); the app's BINDINGS and the help are made of it."""


GRID_KEYS: tuple[Key, ...] = (
    Key("escape", "back", "back to the tree", "grid", "back"),
    Key("up,j,down,left,right", "", "move between cells (j is down)", "grid"),
    Key("space", "mark", "mark / unmark the cell", "grid", "mark"),
    Key("colon", "slice", "mark a slice of cells (dp=0:2, tp=3)", "grid", "slice"),
    Key("x", "unmark", "unmark every cell", "grid", "unmark"),
    Key("m", "measure", "next measure: state, queue, handler time, messages/s, metric", "grid",
        "measure"),
    Key("M", "metric", "colour by the next metric of the ranks (a user gauge such as step); "
        "‹ marks a laggard, ! a stall", "grid", "metric"),
    Key("k", "act('kill')", "kill the marked cells (or the cursor's)", "grid", "kill"),
    Key("s", "act('stop')", "stop the marked cells", "grid", "stop"),
    Key("b", "act('break_next')", "break the cell's actor at its next message", "grid",
        "break"),
    Key("a", "act('attach')", "attach pdb to the paused actor among the cells", "grid",
        "attach"),
    Key("p", "act('stack')", "py-spy stack of the cell's proc", "grid", "py-spy"),
    Key("S", "act('stack_groups')", "the marked cells' stacks, grouped", "grid", "stacks"),
)
"""The keys of the grid view (`v`); the action keys act on its marked cells."""


def key_for(action: str) -> Key:
    """The binding of an action."""
    return next(k for k in KEYS if k.action == action)


def display_key(keys: str) -> str:
    """`slash` → `/`, `question_mark` → `?`, `ctrl+k` → `^k` (for the footer and the help)."""
    names = {"slash": "/", "question_mark": "?", "colon": ":", "escape": "esc",
             "down": "↓", "up": "↑", "right": "→", "left": "←", "enter": "⏎"}
    shown = [names.get(k, k.replace("ctrl+", "^")) for k in keys.split(",")]
    return "/".join(shown)
