"""The package list, found rather than written by hand (a hand-written list lost
`monarch._jobs` and `monarch._workspace`, and a wheel's `monarch.job` could not import).

Everything else is in pyproject.toml. One name is installed, `monarch`: the top-level folders
`console/`, `telemetry/` and `cli/` become `monarch.console`, `monarch.telemetry` and
`monarch.cli` (docs/DESIGN.md); every folder with an `__init__.py` under these roots is a
package.
"""

from pathlib import Path

from setuptools import setup

ROOTS = {"monarch": "monarch", "monarch.console": "console",
         "monarch.telemetry": "telemetry", "monarch.cli": "cli"}


def packages() -> list[str]:
    here = Path(__file__).resolve().parent
    found = []
    for name, folder in ROOTS.items():
        root = here / folder
        for init in sorted(root.rglob("__init__.py")):
            parts = init.parent.relative_to(root).parts
            if any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            found.append(".".join((name, *parts)))
    return found


setup(packages=packages(), package_dir=ROOTS)
