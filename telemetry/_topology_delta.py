"""Changed-since answers of the admin topology.

A console polls the topology twice a second; at 1,024 actors the whole of it is ~400 KB of JSON,
nearly all of which the console already holds, and parsing it was most of the console's poll.
So the controller keeps the last few topologies it served (`Versions`), each under a version
the answer carries; a request that names a version still kept gets only what changed since it
(`changes`), and the client puts the whole back together (`apply`). A version no longer kept
(or none) gets the whole topology: the topology is the same either way, only the bytes differ.

In a changed-since answer (it has `since`; `hosts` and `meshes` change form, the other keys
come whole):

- a host or mesh equal to the one of `since` is `{"id": ID, "same": true}` (`"mesh"` for a
  mesh);
- one whose procs (actors) are the same ones in the same order (and that lost no key) comes
  as its id, its own keys that differ, and `changed`: the procs (actors) that differ, each as
  its key (`proc`, `rank`) and the fields that differ (or whole, with `whole`, when its fields
  themselves differ);
- any other comes whole.

The client must hold `since` unchanged: `apply` shares every part that did not change.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import OrderedDict
from typing import Any

KEEP = 4
"""Topologies a controller keeps to answer changed-since (one per console polling, or so)."""
KEEP_S = 60.0
"""Seconds a kept topology may serve as `since` (a console polls every 0.5-2 s)."""

# (list key, id key, child list key, child id key) of the parts a changed-since answer shrinks
_PARTS = (("hosts", "id", "procs", "proc"), ("meshes", "mesh", "actors", "rank"))


class DeltaError(ValueError):
    """A changed-since answer does not fit the topology given as `since` (it was changed,
    or is not the one asked from): ask again without `since`."""


class Versions:
    """The topologies a controller served lately, by version (thread-safe)."""

    def __init__(self, keep: int = KEEP, keep_s: float = KEEP_S) -> None:
        self.keep, self.keep_s = keep, keep_s
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()  # by _lock
        self._prefix = f"{os.getpid():x}.{time.time_ns() & 0xFFFFFF:x}."
        self._count = itertools.count(1)

    def answer(self, topology: dict[str, Any], since: str | None) -> dict[str, Any]:
        """`topology` with its new version, or only what changed since `since` when kept."""
        now = time.monotonic()
        with self._lock:
            version = f"{self._prefix}{next(self._count)}"
            old = self._kept.get(since) if since else None
            if old is not None and now - old[0] > self.keep_s:
                old = None
            self._kept[version] = (now, topology)
            while len(self._kept) > self.keep:
                self._kept.popitem(last=False)
        topology["version"] = version
        if old is None:
            return topology
        return {**changes(topology, old[1]), "version": version, "since": since}


def changes(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """`new` as a changed-since answer from `old` (see the module's docstring)."""
    out = dict(new)
    for name, ident, children, key in _PARTS:
        before = {part[ident]: part for part in old.get(name, ())}
        out[name] = [_part(part, before.get(part[ident]), ident, children, key)
                     for part in new.get(name, ())]
    return out


def apply(answer: dict[str, Any], since: dict[str, Any]) -> dict[str, Any]:
    """The whole topology from a changed-since `answer` and the `since` it was asked from.

    Raises:
        DeltaError: the answer does not fit `since`.
    """
    if answer.get("since") != since.get("version"):
        raise DeltaError(f"the answer is from version {answer.get('since')!r}, "
                         f"the topology given is {since.get('version')!r}")
    out = {k: v for k, v in answer.items() if k != "since"}
    for name, ident, children, key in _PARTS:
        before = {part[ident]: part for part in since.get(name, ())}
        out[name] = [_rebuilt(part, before, ident, children, key)
                     for part in answer.get(name, ())]
    return out


def _part(new: dict[str, Any], old: dict[str, Any] | None, ident: str, children: str,
          key: str) -> dict[str, Any]:
    if old is None:
        return new
    if new == old:
        return {ident: new[ident], "same": True}
    rows, old_rows = new.get(children), old.get(children)
    if rows is None or old_rows is None or len(rows) != len(old_rows) or any(
            r[key] != o[key] for r, o in zip(rows, old_rows)) or old.keys() - new.keys():
        return new
    # a folded mesh's rank → proc pairs (1,024 of them) do not change from poll to poll
    out = {k: v for k, v in new.items() if k != children and (k not in old or old[k] != v)}
    out[ident] = new[ident]
    out["changed"] = [_row(r, o, key) for r, o in zip(rows, old_rows) if r != o]
    return out


def _row(new: dict[str, Any], old: dict[str, Any], key: str) -> dict[str, Any]:
    if new.keys() != old.keys():
        return {**new, "whole": True}
    return {key: new[key], **{k: v for k, v in new.items() if old[k] != v}}


def _rebuilt(part: dict[str, Any], before: dict[str, dict[str, Any]], ident: str,
             children: str, key: str) -> dict[str, Any]:
    if not part.get("same") and "changed" not in part:
        return part
    old = before.get(part[ident])
    if old is None or children not in old:
        raise DeltaError(f"the answer changes {ident} {part[ident]!r}, which the topology "
                         "given does not hold")
    if part.get("same"):
        return old
    rows = list(old[children])
    at = {row[key]: i for i, row in enumerate(rows)}
    merged = {k: v for k, v in old.items() if k != children}
    merged.update(part)
    for change in part["changed"]:
        i = at.get(change[key])
        if i is None:
            raise DeltaError(f"the answer changes {key} {change[key]!r} of {ident} "
                             f"{part[ident]!r}, which the topology given does not hold")
        rows[i] = ({k: v for k, v in change.items() if k != "whole"} if change.get("whole")
                   else {**rows[i], **change})
    merged.pop("changed")
    merged[children] = rows
    return merged
