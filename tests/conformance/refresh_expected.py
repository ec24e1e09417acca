"""Re-derives expected.txt: runs torchmonarch 0.7.0's test files under torchmonarch itself.

    python tests/conformance/refresh_expected.py [--ref /opt/ref/venv/bin/python] [file.py ...]

Needs a virtual environment with torchmonarch 0.7.0 (and pytest, pytest-asyncio,
pytest-timeout). The files run with Monarch's own conftest, from a folder of their own (never
this repository: Monarch's procs would import our `monarch`). Writes expected.txt with every
test that passed; review the diff before committing it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import monarch_suite as suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", default="/opt/ref/venv/bin/python")
    parser.add_argument("files", nargs="*", help="Monarch test files (default: all test_*.py)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="monarch-ref-tests-"))
    try:
        with zipfile.ZipFile(suite.wheel()) as archive:
            for member in archive.namelist():
                if member.startswith(("tests/", "benches/")) and not member.endswith("/"):
                    target = work / member
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(archive.read(member))
        tests = work / "tests"
        (tests / "pytest.ini").write_text(suite.PYTEST_INI)
        files = args.files or sorted(p.name for p in tests.glob("test_*.py"))
        passing: list[str] = []
        for name in files:
            report = work / f"{name}.xml"
            subprocess.run([args.ref, "-m", "pytest", *suite.PYTEST_OPTIONS,
                            f"--junitxml={report}", name], cwd=tests, check=False,
                           timeout=1800)
            if report.exists():
                outcomes = suite.parse_junit(report)
                passing += [t for t, o in outcomes.items() if o.status == "passed"]
        lines = (suite.HERE / "expected.txt").read_text().splitlines()
        head = [line for line in lines if line.startswith("#")]
        (suite.HERE / "expected.txt").write_text("\n".join(head + sorted(passing)) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
