"""torchmonarch 0.7.0's own test files, run against pymonarch.

The wheel (`pip download --no-deps torchmonarch==0.7.0`, cached in `<repo>/.whl/`) ships its
tests; we extract the test folder alone (never its `monarch` package) and run a file of it with
pytest in a child process whose `PYTHONPATH` puts `shim/` first: its `sitecustomize` maps
Monarch's private names onto our public objects in every process of the run (controller, zygote,
procs). Results come back as a JUnit XML report, one outcome per test id.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Collection

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REQUIREMENT = "torchmonarch==0.7.0"
CACHE = Path(os.environ.get("MONARCH_CONFORMANCE_CACHE", ROOT / ".whl"))
TESTS = CACHE / "torchmonarch-0.7.0-tests"
SHIM = HERE / "shim"
# pytest options of Monarch's own project (its async tests rely on auto mode)
PYTEST_INI = """[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""
ONLY_VARIABLE = "MONARCH_CONFORMANCE_ONLY"  # a file of the test ids to run (one per line)
PYTEST_OPTIONS = ["-p", "no:cacheprovider", "--timeout", "120", "-q", "-rN"]


@dataclass(frozen=True)
class Outcome:
    """How one test ended: passed, failed, error or skipped, and what it said."""

    status: str
    message: str = ""


def wheel() -> Path:
    """The torchmonarch 0.7.0 wheel, downloaded once into the cache."""
    found = sorted(CACHE.glob("torchmonarch-0.7.0-*.whl"))
    if found:
        return found[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", REQUIREMENT,
                    "-d", str(CACHE)], check=True, timeout=900)
    return sorted(CACHE.glob("torchmonarch-0.7.0-*.whl"))[0]


def tests_dir() -> Path:
    """Monarch's test folder, extracted from the wheel (once), with our conftest instead of
    its own (which loads plugins of Monarch's build and CI)."""
    marker = TESTS / ".extracted"
    if not marker.exists():
        shutil.rmtree(TESTS, ignore_errors=True)
        with zipfile.ZipFile(wheel()) as archive:
            for member in archive.namelist():
                if member.startswith("tests/") and not member.endswith("/"):
                    target = TESTS / member.removeprefix("tests/")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(archive.read(member))
        (TESTS / "conftest.py").unlink(missing_ok=True)
        marker.write_text(REQUIREMENT)
    shutil.copy(HERE / "monarch_conftest.py", TESTS / "conftest.py")
    (TESTS / "pytest.ini").write_text(PYTEST_INI)  # its own rootdir, not our repository's
    return TESTS


RUNNING: set[subprocess.Popen[bytes]] = set()
"""The pytest children running a file now (several run at once: see `run_files`)."""


def stop_all() -> None:
    """Kills the pytest children still running (a session that ends early leaves none)."""
    for proc in list(RUNNING):
        proc.kill()


def run_file(name: str, report_dir: Path, python: str = sys.executable,
             timeout: float = 1500.0, only: Collection[str] | None = None,
             folder: Path | None = None) -> dict[str, Outcome]:
    """Runs Monarch's test file `name` (e.g. `test_python_actors.py`) against the `monarch`
    that `python` imports; its outcome per test id (`file.py::test_x[param]`). With `only`,
    the file's other tests are deselected (they do not run). `folder` is `tests_dir()`, once
    extracted (files run at once share it)."""
    folder = tests_dir() if folder is None else folder
    report = report_dir / f"{name}.xml"
    run_root = report_dir / f"{name}.run"  # its jobs' run directories, apart from ours
    # its own temp directory: Monarch's tests (and torch's compiler caches) leave files in theirs
    tmp = report_dir / f"{name}.tmp"
    tmp.mkdir(exist_ok=True)
    env = dict(os.environ, MONARCH_RUN_DIR=str(run_root), TMPDIR=str(tmp),
               PYTHONPATH=os.pathsep.join(
        filter(None, [str(SHIM), str(folder), os.environ.get("PYTHONPATH")])))
    env.pop("CI", None)  # Monarch's tests read CI to pick their own CI behaviour
    if only is not None:  # read by monarch_conftest.py
        wanted = report_dir / f"{name}.only"
        wanted.write_text("".join(f"{test_id}\n" for test_id in only))
        env[ONLY_VARIABLE] = str(wanted)
    with open(report_dir / f"{name}.log", "w") as log:
        proc = subprocess.Popen([python, "-m", "pytest", *PYTEST_OPTIONS,
                                 f"--junitxml={report}", name], cwd=folder, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        RUNNING.add(proc)
        try:
            proc.wait(timeout)
        finally:  # past its timeout, or when the session stops it (stop_all)
            RUNNING.discard(proc)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if not report.exists():
        raise RuntimeError(f"{name}: pytest exited {proc.returncode} without a report; see "
                           f"{report_dir / (name + '.log')}")
    return parse_junit(report)


def parse_junit(path: Path) -> dict[str, Outcome]:
    """Test id -> outcome, from a pytest JUnit XML report."""
    outcomes = {}
    for case in ET.parse(path).iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        module, _, klass = classname.partition(".")
        test_id = f"{module}.py::" + (f"{klass}::" if klass else "") + name
        status, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                status = {"failure": "failed"}.get(child.tag, child.tag)
                message = (child.get("message") or "") + "\n" + (child.text or "")
                break
        outcomes[test_id] = Outcome(status, message.strip())
    return outcomes


def load_list(path: Path) -> dict[str, str]:
    """`id  # reason` lines (blank lines and whole-line comments ignored) -> {id: reason}."""
    entries = {}
    for line in path.read_text().splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        test_id, _, reason = text.partition("#")
        entries[test_id.strip()] = reason.strip()
    return entries
