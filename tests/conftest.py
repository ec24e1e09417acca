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
from hypothesis import HealthCheck, settings

# Property tests check values, never speed: a loaded machine (CI, stress-ng) must not fail one
# for an example that took over hypothesis's default 200 ms, or for slow data generation.
settings.register_profile("monarch", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("monarch")

# Jobs keep their history (Parquet telemetry) in `<run root>/history` after they end: that is
# files left behind. The session's own job and the jobs tests start inherit this off; the tests
# of histories turn it on for jobs in a run directory of their own (tmp_path).
os.environ.setdefault("MONARCH_HISTORY", "0")


def under_ci() -> bool:
    """True when the switch `CI` is on (`.ci/run` sets it); a value that is not a switch's
    spelling is a ValueError, not silently off."""
    from monarch._wire._switch import switch

    return switch("CI", default=False)


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


CONFORMANCE = "tests/conformance/test_monarch_conformance.py::"
"""The conformance module's items; those of Monarch's tests start with `MONARCH_TESTS`."""
MONARCH_TESTS = CONFORMANCE + "test_monarch_test_passes["


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Monarch's own tests (tests/conformance) run last: their files run in pytest children
    from the session's start (`_conformance_in_the_background`), mostly waiting on Monarch's
    timeouts and sleeps, so by the time their items come the outcomes are there (they held
    the suite ~7 of its ~31 minutes when each file ran as its first item came)."""
    ours, theirs = [], []
    for item in items:
        (theirs if item.nodeid.startswith(CONFORMANCE) else ours).append(item)
    items[:] = ours + theirs


@pytest.fixture(scope="session", autouse=True)
def _conformance_in_the_background(request: pytest.FixtureRequest,
                                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Starts Monarch's test files before the session's first test, when the session will run
    any of their tests; stops what still runs at its end (an interrupted session, too, leaves
    no pytest child running)."""
    module = next((item.module for item in request.session.items  # type: ignore[attr-defined]
                   if item.nodeid.startswith(MONARCH_TESTS)), None)
    if module is not None:
        module.start(tmp_path_factory.getbasetemp())
    yield
    if module is not None:
        module.stop()


# The session's own temp directory: every temp file of the session and of the processes it
# starts (TMPDIR is inherited) lands in it, and so does the run root of its jobs. At the end it
# must hold nothing but pytest's own folder and the session job's run directory; it is then
# removed (kept, and named, when something failed). Sessions running side by side (several
# developers, a CI runner) cannot see each other's files.
_SESSION: dict[str, Any] = {}


def pytest_configure(config: pytest.Config) -> None:
    import signal
    import tempfile

    # A runner that starts the suite in the background (`bash .ci/run &` from a script) hands
    # it SIGINT ignored, and every process a test starts would inherit that: tests that end a
    # follower with SIGINT (Ctrl-C) would wait forever. Caught here, it is default again in
    # every child. (A fault ends a controller with SIGINT ignored too: test_controller_lifetime
    # starts one so, on purpose.)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if "root" in _SESSION or os.environ.get("MONARCH_TEST_TMP_OWNER"):
        return  # a pytest started by a test: it lives in its parent session's directory
    root = tempfile.mkdtemp(prefix="mts-")  # short: ipc socket paths must fit in 108 bytes
    _SESSION.update(root=root, saved={k: os.environ.get(k) for k in
                                      ("TMPDIR", "MONARCH_RUN_DIR", "MONARCH_TEST_TMP_OWNER")})
    os.environ["TMPDIR"] = root
    os.environ["MONARCH_RUN_DIR"] = os.path.join(root, "run")
    os.environ["MONARCH_TEST_TMP_OWNER"] = str(os.getpid())
    tempfile.tempdir = root


def leftovers(root: str, own_job: str | None) -> list[str]:
    """What the session left in its temp directory (pytest's folder and, in the run root, the
    session job's directory and the kept folders aside)."""
    from monarch._runtime._rundir import KEPT

    # torchinductor_USER is torch's compile cache, made by any process that steps an optimizer
    # (torch's own folder, not something a test or the product forgot)
    left = [name for name in os.listdir(root) if not name.startswith(("pytest-of-",
                                                                      "torchinductor_"))
            and name != "run"]
    run = os.path.join(root, "run")
    if os.path.isdir(run):
        left += [f"run/{name}" for name in os.listdir(run)
                 if name != own_job and name not in KEPT]
        for kept in KEPT:
            folder = os.path.join(run, kept)
            if os.path.isdir(folder):
                left += [f"run/{kept}/{name}" for name in os.listdir(folder)]
    return sorted(left)


def _head(path: str) -> str:
    """The start of a small text file (a run dir's owner, status): a leftover's story."""
    try:
        with open(path, errors="replace") as f:
            return f.read(300)
    except OSError:
        return "(a folder)" if os.path.isdir(path) else "(unreadable)"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fails the session if it left files behind; removes its temp directory."""
    import shutil
    import tempfile

    root = _SESSION.get("root")
    if root is None or os.environ.get("MONARCH_TEST_TMP_OWNER") != str(os.getpid()):
        return
    from monarch._controller._job import current_job

    job = current_job()
    left = leftovers(root, job.run_dir.name if job is not None else None)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if left:
        if reporter is not None:
            reporter.write_line(f"the test session left files behind in {root}: {left}",
                                red=True)
            for name in left:  # what each left folder holds: whose it was
                path = os.path.join(root, name)
                if os.path.isdir(path):
                    inside = {f: _head(os.path.join(path, f)) for f in sorted(os.listdir(path))}
                    reporter.write_line(f"  {name}: {inside}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    for key, value in _SESSION["saved"].items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    tempfile.tempdir = None
    if session.exitstatus == 0:
        if job is not None:
            job.shutdown()  # its run directory is in `root`: end it before removing `root`
        shutil.rmtree(root, ignore_errors=True)
    elif reporter is not None:
        reporter.write_line(f"the session's temp directory is kept: {root}")


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


@pytest.fixture
def bare_runtime(tmp_path: Any) -> Iterator[Any]:
    """A process runtime of this process in `tmp_path`, never started (no job, no thread):
    its parts (ports, sinks, held messages, the handling of what a peer sent) alone."""
    from monarch._runtime._identity import ProcessIdentity
    from monarch._runtime._process_runtime import ProcessRuntime

    identity = ProcessIdentity("job", os.urandom(32), tmp_path, "controller")
    runtime = ProcessRuntime(identity, f"ipc://{tmp_path}/ctl.sock")
    yield runtime
    runtime.close()


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
