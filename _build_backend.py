"""The project's PEP 517 build backend: setuptools' own, without one informational note.

pyproject maps the top-level folders `console/`, `telemetry/` and `cli/` onto `monarch.console`,
`monarch.telemetry` and `monarch.cli` (docs/DESIGN.md), so that `monarch` is the only name
installed. For such a layout an editable install (`pip install -e .`, what `.ci/install` does)
goes through an import finder, and setuptools says so on every install with an "Editable
installation" note telling to be careful with folders named like the package in the working
directory: here that folder *is* the package, so the note can never be acted on. It is the
only thing silenced; every other warning of the build still shows.
"""

from __future__ import annotations

import warnings

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - the PEP 517 hooks, unchanged

__all__ = _setuptools.__all__

warnings.filterwarnings("ignore", message="Editable installation")
