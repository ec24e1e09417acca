"""Conformance: torchmonarch 0.7.0's own tests, run against pymonarch.

Every test of Monarch's suite that passes on torchmonarch 0.7.0 (expected.txt) must pass here,
except those excluded with a reason (excluded.txt: tests that can only pass inside Monarch's
Rust runtime, or that pin its private internals). Each of Monarch's test files runs once, in a
pytest child process (see monarch_suite.py), two files at a time, from the session's start (in
the background of the rest of the suite); each of its tests is one item here, run last.
"""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

import monarch_suite as suite

EXPECTED = list(suite.load_list(suite.HERE / "expected.txt"))
EXCLUDED = suite.load_list(suite.HERE / "excluded.txt")


def excluded(test_id: str) -> bool:
    """Listed by its id, by its function (every parameter of it), or by its file."""
    return any(key in EXCLUDED for key in (test_id, test_id.split("[")[0],
                                          test_id.split("::")[0]))


REQUIRED = [t for t in EXPECTED if not excluded(t)]

JOBS = int(os.environ.get("MONARCH_CONFORMANCE_JOBS", "2"))
"""Files run at once. Monarch's tests mostly wait (on timeouts, sleeps, children starting):
two at a time take about half the wall time on a 2-core machine, at a third of a core each."""

_runs: dict[str, Future[dict[str, suite.Outcome]]] = {}


def _by_size(files: set[str]) -> list[str]:
    """The files with the most required tests first (they run longest)."""
    count = Counter(t.split("::")[0] for t in REQUIRED)
    return sorted(files, key=lambda f: (-count[f], f))


def start(report_dir: Path) -> None:
    """Starts every file, `JOBS` at a time, largest first, each once per session (reports in
    `report_dir`). The session calls it before its first test (tests/conftest.py), so the
    files run while the rest of the suite does, and this module's items run last."""
    if _runs:
        return
    folder = suite.tests_dir()
    pool = ThreadPoolExecutor(JOBS, thread_name_prefix="conformance")
    for name in _by_size({t.split("::")[0] for t in REQUIRED}):
        _runs[name] = pool.submit(suite.run_file, name, report_dir, folder=folder, only=[
            t for t in REQUIRED if t.split("::")[0] == name])
    pool.shutdown(wait=False)


def results_of(file: str, report_dir: Path) -> dict[str, suite.Outcome]:
    """The outcomes of one of Monarch's test files (started now if they were not yet)."""
    start(report_dir)
    return _runs[file].result()


def stop() -> None:
    """Cancels the files not started and kills the pytest children still running (the
    session's end calls it, tests/conftest.py)."""
    for run in _runs.values():
        run.cancel()
    suite.stop_all()


@pytest.mark.timeout(2400)  # the first test of a file runs the whole file
@pytest.mark.parametrize("test_id", REQUIRED)
def test_monarch_test_passes(test_id: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    file = test_id.split("::")[0]
    outcome = results_of(file, tmp_path_factory.getbasetemp())
    found = outcome.get(test_id)
    assert found is not None, f"{test_id} did not run (see {file}.log in the session's tmp dir)"
    assert found.status == "passed", f"{found.status}:\n{found.message}"


def test_every_exclusion_has_a_reason_and_names_a_test_of_monarch() -> None:
    files = {t.split("::")[0] for t in EXPECTED}
    for entry, reason in EXCLUDED.items():
        assert reason, f"{entry}: an exclusion needs its reason"
        known = (entry in EXPECTED or entry in files or entry.endswith(".py")
                 or any(t.startswith(entry + "[") for t in EXPECTED))
        assert known, f"{entry} is not a test of Monarch that passes on torchmonarch 0.7.0"
