"""Shared fixtures for tests that run real processes.

The job starts once per test session (this pytest process is the controller). Failures of
meshes the tests provoke on purpose are collected by a fault hook instead of ending the session
the way the default hook ends a script; tests that expect failures read `fault_log`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest


class FaultLog:
    """The MeshFailures the root received, in order, with a way to wait for the next one."""

    def __init__(self) -> None:
        self.failures: list[Any] = []
        self._cond = threading.Condition()

    def __call__(self, failure: Any) -> None:
        with self._cond:
            self.failures.append(failure)
            self._cond.notify_all()

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> Any:
        """Waits until a failure matching `predicate` arrived; returns it (or fails the test)."""
        with self._cond:
            found = self._cond.wait_for(
                lambda: next((f for f in self.failures if predicate(f)), None), timeout)
        if not found:
            pytest.fail(f"no matching failure within {timeout}s; got {self.failures}")
        return next(f for f in self.failures if predicate(f))

    def wait_count(self, predicate: Any, count: int, timeout: float = 30.0) -> list[Any]:
        """Waits until `count` failures matching `predicate` arrived; returns them."""
        with self._cond:
            self._cond.wait_for(
                lambda: len([f for f in self.failures if predicate(f)]) >= count, timeout)
            found = [f for f in self.failures if predicate(f)]
        if len(found) < count:
            pytest.fail(f"{len(found)} matching failures within {timeout}s, not {count}: "
                        f"{self.failures}")
        return found


@pytest.fixture(scope="session")
def fault_log() -> Iterator[FaultLog]:
    """Replaces the root's unhandled fault hook for the session."""
    import monarch.actor

    log = FaultLog()
    saved = monarch.actor.unhandled_fault_hook
    monarch.actor.unhandled_fault_hook = log
    yield log
    monarch.actor.unhandled_fault_hook = saved


@pytest.fixture(scope="session")
def procs(fault_log: FaultLog) -> Iterator[Any]:
    """A ProcMesh of 4 procs ({"gpus": 4}) shared by the session's tests."""
    from monarch.actor import this_host

    mesh = this_host().spawn_procs(per_host={"gpus": 4})
    yield mesh
    mesh.stop().get(timeout=30)


@pytest.fixture(scope="session")
def procs2x2(fault_log: FaultLog) -> Iterator[Any]:
    """A ProcMesh of 2x2 procs ({"hosts": 2, "gpus": 2})."""
    from monarch.actor import this_host

    mesh = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    yield mesh
    mesh.stop().get(timeout=30)
