"""`:` command mode (k9s's): a resource or a view by name, with completion.

`:meshes`, `:procs`, `:actors`, `:services`, `:weights`, `:tensors`, `:transfers`, `:spans`,
`:jobs`, `:allocations` open a resource table; `:tree` goes back to the tree, `:grid`,
`:stacks` and `:timeline` open the selected mesh's, `:logs`
focuses the logs, `:sql` the query pane, `:slice gpus=0:2` slices the selected mesh (a bare
`gpus=0:2` does too), `:save` writes the screen to a text file, `:help`, `:quit`. Singular
names and a few k9s habits (`:svc`, `:q`) are accepted. Pure: `parse` says what to run.
"""

from __future__ import annotations

from ._resources import RESOURCES

COMMANDS: dict[str, str] = {
    "meshes": "the actor meshes, one row each",
    "procs": "the procs, one row each",
    "actors": "every actor",
    "services": "the service replicas (health, load)",
    "weights": "the weight versions published (monarch.weights) and their reads",
    "tensors": "the tensor engines: their workers, ops sent, remote tensors alive",
    "transfers": "data-plane throughput by link, mesh and kind",
    "spans": "the newest spans",
    "jobs": "the jobs running on this machine",
    "allocations": "the allocations of monarch.job on record (hosts, state, controllers)",
    "tree": "back to the tree",
    "grid": "the selected mesh as its grid",
    "stacks": "every rank's stack of the selected mesh, grouped",
    "timeline": "the selected mesh's spans as bars on a time axis",
    "logs": "focus the logs",
    "sql": "query the telemetry with SQL",
    "slice": "slice the selected mesh: slice gpus=0:2",
    "save": "save the screen to a text file",
    "help": "every key",
    "quit": "leave the console",
}
"""Every command, with what it does (the completion offers them in this order)."""
ALIASES = {"mesh": "meshes", "proc": "procs", "actor": "actors", "service": "services",
           "svc": "services", "weight": "weights", "tensor": "tensors", "transfer": "transfers",
           "span": "spans", "job": "jobs", "allocation": "allocations", "alloc": "allocations",
           "log": "logs", "query": "sql", "q": "quit", "q!": "quit", "stack": "stacks"}


class CommandError(ValueError):
    """Text that is neither a command nor a slice (the message lists the commands)."""


def parse(text: str) -> tuple[str, str]:
    """(command, argument) of what was typed after `:`; a selection alone is a slice.

    Raises:
        CommandError: an unknown word.
    """
    text = text.strip().lstrip(":").strip()
    word, _, rest = text.partition(" ")
    name = ALIASES.get(word.lower(), word.lower())
    if name in COMMANDS:
        return name, rest.strip()
    if "=" in text or text in ("", "*", "all"):
        return "slice", text
    raise CommandError(f"unknown command {word!r}: one of {', '.join(COMMANDS)} "
                       "(or a slice such as gpus=0:2)")


def is_resource(name: str) -> bool:
    """Whether `name` opens a resource table."""
    return name in RESOURCES
