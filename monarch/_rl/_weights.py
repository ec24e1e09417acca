"""The job's index of published state dicts (one actor in the controller process).

It keeps, per key, the newest version's manifest: for each tensor its dtype, shape, size and
the `RDMABuffer` over the publisher's snapshot of it; other values inline. Publishing a new
version drops the buffers of the one it replaces before it answers (the publisher's memory is
freed once the reads in progress end), so each key holds one snapshot's memory at a time.
"""

from __future__ import annotations

import time
from typing import Any

from .. import telemetry
from .._actors._actor import Actor
from .._actors._endpoint import endpoint

INDEX_NAME = "monarch.weights"
"""The singleton's name (`get_or_spawn_controller`)."""


class VersionReleasedError(KeyError):
    """The version asked for is gone: a newer one replaced it (only the newest is kept). Ask
    for the newest (`version=None`)."""


class WeightIndex(Actor):
    """Versions of state dicts by key (see the module docstring)."""

    def __init__(self) -> None:
        self.newest: dict[str, tuple[int, dict[str, Any]]] = {}
        self.counter: dict[str, int] = {}

    @endpoint
    def publish(self, key: str, entries: dict[str, Any]) -> int:
        """Makes `entries` the newest version of `key`; returns its number (1, 2, ...)."""
        version = self.counter.get(key, 0) + 1
        self.counter[key] = version
        old = self.newest.get(key)
        self.newest[key] = (version, entries)
        if old is not None:
            release(old[1])
        metrics = telemetry.process_recorder().metrics  # `monarch status`, SQL, Prometheus
        metrics.set(("weight_version", key), version)
        metrics.set(("weight_bytes", key), sum(e[3] for e in entries.values()
                                               if e[0] == "tensor"))
        return version

    @endpoint
    def fetch(self, key: str, version: int | None = None) -> tuple[int, dict[str, Any]]:
        """The newest version of `key` (or `version`, if it is still the newest)."""
        if key not in self.newest:
            raise KeyError(f"no state dict was put under {key!r}")
        newest, entries = self.newest[key]
        telemetry.process_recorder().metrics.inc(("weight_reads", key))
        if version is not None and version != newest:
            raise VersionReleasedError(
                f"version {version} of {key!r} is not available (the newest is {newest})")
        return newest, entries

    @endpoint
    def versions(self) -> dict[str, int]:
        """The newest version of every key."""
        return {key: version for key, (version, _) in self.newest.items()}

    @endpoint
    def delete(self, key: str) -> bool:
        """Forgets `key` and releases its buffers; False if there was none."""
        old = self.newest.pop(key, None)
        if old is not None:
            release(old[1])
        return old is not None


DROP_WAIT_S = 10.0
"""How long `release` waits, in all, for the owners of a manifest's buffers to let them go."""


def release(entries: dict[str, Any]) -> None:
    """Drops the buffers of a manifest and waits until their owners let them go, so that when
    `publish` or `delete` returns the old version's memory is released and its buffers refuse
    reads (`BufferDroppedError`). An owner that is gone counts as dropped; one that has not
    answered within `DROP_WAIT_S` finishes its drop in the background. (The drops were sent
    and not waited for: a read right after `publish` could still reach the old version, as a
    loaded machine showed.)"""
    drops = [entry[4].drop() for entry in entries.values()
             if entry[0] == "tensor" and entry[4] is not None]
    deadline = time.monotonic() + DROP_WAIT_S
    for drop in drops:
        try:
            drop.get(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            pass  # its transfer thread still drops it; the index does not wait longer
