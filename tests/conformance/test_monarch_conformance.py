"""Conformance: torchmonarch 0.7.0's own tests, run against pymonarch.

Every test of Monarch's suite that passes on torchmonarch 0.7.0 (expected.txt) must pass here,
except those excluded with a reason (excluded.txt: tests that can only pass inside Monarch's
Rust runtime, or that pin its private internals). Each of Monarch's test files runs once, in a
pytest child process (see monarch_suite.py); each of its tests is one item here.
"""

from __future__ import annotations

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

_results: dict[str, dict[str, suite.Outcome]] = {}


def results_of(file: str, report_dir: Path) -> dict[str, suite.Outcome]:
    """The outcomes of one of Monarch's test files (run once per session)."""
    if file not in _results:  # only the tests required of it: the others need not run
        _results[file] = suite.run_file(file, report_dir, only=[
            t for t in REQUIRED if t.split("::")[0] == file])
    return _results[file]


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
