"""The grouped stacks view (`S`): every selected rank of a mesh sampled at once (the admin API's
`stacks`), ranks with identical stacks on one line, the odd ones out first; enter expands a
group to its frames, innermost last."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static, Tree

from ._format import frame_text, stack_group_text, stacks_headline
from ._overlay import Overlay


class StackGroupsScreen(Overlay):
    """`S`: the grouped stacks of one mesh (or its slice); rerun with `r`, close with `esc`.

    `fetch()` answers as `AdminClient.stacks`; the groups fill a tree (one node per group, its
    frames as leaves), the headline or the API's error sits above it.
    """

    KEYS_HINT = "⏎ expand · r sample again · esc close"

    def __init__(self, name: str, selection: str, fetch: Callable[[], dict[str, Any]]) -> None:
        where = f" ({selection})" if selection else ""
        super().__init__(f"stacks: {name}{where}", fetch, headline)

    def compose(self) -> ComposeResult:
        with Vertical(id="overlay-box"):
            yield Static(Text("running…", style="dim"), id="overlay-body")
            tree: Tree[dict[str, Any]] = Tree("groups", id="stack-groups")
            tree.show_root = False
            yield tree

    @property
    def groups_tree(self) -> Tree[dict[str, Any]]:
        return self.query_one("#stack-groups", Tree)

    def action_rerun(self) -> None:
        self.groups_tree.clear()
        super().action_rerun()

    def _done(self, result: Any, error: str | None) -> None:
        super()._done(result, error)
        tree = self.groups_tree
        tree.clear()
        for group in [] if error else result.get("groups", []):
            label = group_line(group)
            if group.get("frames"):
                node = tree.root.add(label, data=group)
                for frame in group["frames"]:
                    node.add_leaf(frame_line(frame))
            else:
                tree.root.add_leaf(label, data=group)
        tree.cursor_line = 0  # on the first group: the odd one out
        tree.focus()

    def action_scroll(self, lines: int) -> None:
        if lines > 0:
            self.groups_tree.action_cursor_down()
        else:
            self.groups_tree.action_cursor_up()

    @property
    def group_lines(self) -> list[str]:
        """The group lines shown, top to bottom (for tests and for looking)."""
        return [str(node.label) for node in self.groups_tree.root.children]


def headline(result: dict[str, Any]) -> Text:
    """`waiters (mesh id): 4 ranks, 2 distinct stacks`, the name in bold."""
    text = stacks_headline(result)
    name = str(result.get("name"))
    return Text.assemble((name, "bold"), text[len(name):])


def group_line(group: dict[str, Any]) -> Text:
    """`rank 2: hold_the_line ← work  [running work]`; an error red, an idle group dim."""
    style = "red" if group.get("error") else "" if group.get("frames") else "dim"
    return Text(stack_group_text(group), style=style)


def frame_line(frame: Sequence[Any]) -> Text:
    """`file:line in function`, the function in bold."""
    text = frame_text(frame)
    function = str(frame[2])
    return Text.assemble(text[:-len(function)], (function, "bold"))
