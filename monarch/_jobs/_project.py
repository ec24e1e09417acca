"""The project's job: the spec `monarch apply` records, and `hosts_from_config`.

`monarch apply job.py` (or `monarch apply pkg.module.job`) saves where the job is defined in
`.monarch/default/spec` and applies it; `load_current_job()` reads it back, so later commands
(`monarch exec`, `hosts_from_config`) use the project's job without naming it again.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

from ._trait import JobTrait

SPEC_FILE = Path(".monarch") / "default" / "spec"
"""Where the current job's spec (a file path or `module.attr`) is recorded."""


def import_job(spec: str) -> JobTrait:
    """The JobTrait defined by `spec`: a Python file (its `job`, or its only JobTrait) or a
    dotted `module.attr`. A file's `if __name__ == "__main__":` block does not run."""
    if spec.endswith(".py") or os.path.isfile(spec):
        path = Path(spec).resolve()
        module_spec = importlib.util.spec_from_file_location(f"_monarch_job_{path.stem}", path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f"cannot import {spec}")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return _the_job(module, spec)
    if "." not in spec:
        raise ValueError(f"a job is a file (job.py) or 'module.attr', not {spec!r}")
    module_name, attr = spec.rsplit(".", 1)
    job = getattr(importlib.import_module(module_name), attr, None)
    if job is None:
        raise AttributeError(f"Module '{module_name}' has no '{attr}' attribute")
    if not isinstance(job, JobTrait):
        raise TypeError(f"'{spec}' must be a JobTrait, got {type(job).__name__}")
    return job


def _the_job(module: Any, spec: str) -> JobTrait:
    named = getattr(module, "job", None)
    if isinstance(named, JobTrait):
        return named
    jobs = [v for v in vars(module).values() if isinstance(v, JobTrait)]
    if len(jobs) != 1:
        raise LookupError(f"{spec} defines {len(jobs)} jobs: name the one to apply `job`")
    return jobs[0]


def set_current_job(module_path: str) -> None:
    """Records `module_path` (a job file or `module.attr`) as this project's job."""
    if module_path.endswith(".py") or os.path.isfile(module_path):
        module_path = str(Path(module_path).resolve())
    SPEC_FILE.parent.mkdir(parents=True, exist_ok=True)
    SPEC_FILE.write_text(module_path)


def load_current_job() -> JobTrait:
    """A fresh job object of this project's recorded spec (`.state()` then reuses the
    allocation cached in `.monarch/job_state.pkl` when it is alive).

    Raises:
        FileNotFoundError: no spec was recorded here (`monarch apply JOB` records one).
    """
    try:
        spec = SPEC_FILE.read_text().strip()
    except FileNotFoundError:
        raise FileNotFoundError(f"No spec found at {SPEC_FILE}. Run 'monarch apply <job.py>' "
                                "first.") from None
    return import_job(spec)


def hosts_from_config(name: str) -> Any:
    """The host mesh `name` of this project's job (the one `monarch apply` recorded), so the
    same code runs on whatever the project is configured for; without one, two local host
    workers (a ProcessJob, ended when this process exits)."""
    try:
        job = load_current_job()
    except FileNotFoundError:
        from ._process import ProcessJob

        job = ProcessJob({name: 2})
        state = job.state(cached_path=None)
        atexit.register(job.kill)
        return getattr(state, name)
    return getattr(job.state(), name)
