"""Shared fixtures for tests that run real processes.

The job starts once per test session (this pytest process is the controller). Failures of
meshes the tests provoke on purpose are collected by a fault hook instead of ending the session
the way the default hook ends a script; tests that expect failures read `fault_log`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

# Jobs keep their history (Parquet telemetry) in `<run root>/history` after they end: that is
# files left behind. The session's own job and the jobs tests start inherit this off; the tests
# of histories turn it on for jobs in a run directory of their own (tmp_path).
os.environ.setdefault("MONARCH_HISTORY", "0")


def under_ci() -> bool:
    """True when `CI` is set to a true value (`.ci/run` sets it)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes", "on")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    """Under CI a skipped test fails: every real peer (Slurm, Prometheus, tmux, py-spy,
    IPython) is installed by `.ci/install`, so a skip means a test that silently did not run."""
    outcome = yield
    _skip_fails_under_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """The same for a whole module skipped while collected (`pytest.importorskip`)."""
    outcome = yield
    _skip_fails_under_ci(outcome.get_result())


def _skip_fails_under_ci(report: Any) -> None:
    if report.skipped and under_ci() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which counts as a failure: {reason}"


# What the project and its tests put in the temp directory: all of it must be gone when the
# session ends (the run root itself stays; only the session's own job may still be in it).
LEFTOVER_PREFIXES = ("monarch-", "ct-", "ctmp-")


def _temp_entries() -> set[str]:
    import tempfile

    return {name for name in os.listdir(tempfile.gettempdir())
            if name.startswith(LEFTOVER_PREFIXES) or name.endswith(".sock")}


def _run_root_entries() -> set[str]:
    from monarch._rundir import run_root_path

    root = run_root_path()
    return set(os.listdir(root)) if root.is_dir() else set()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE] = (_temp_entries(), _run_root_entries())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fails the session if it left files behind in the temp directory or the run root."""
    before = session.config.stash.get(_BEFORE, None)
    if before is None or exitstatus not in (0, 1):
        return
    from monarch._controller._job import current_job
    from monarch._rundir import run_root_path

    job = current_job()
    own = {job.run_dir.name} if job is not None else set()
    root_name = run_root_path().name
    left = sorted(_temp_entries() - before[0] - {root_name})
    left += [f"{run_root_path()}/{n}" for n in sorted(_run_root_entries() - before[1] - own)]
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"the test session left files behind: {left}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[tuple[set[str], set[str]]]()


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
