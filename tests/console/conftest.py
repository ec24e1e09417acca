"""Fixtures of the console's tests: a real running job (the demo workload, a subprocess
controller) reached through the admin API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from demojob import DemoJob


@pytest.fixture(scope="module")
def demo_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoJob]:
    """A demo job shared by one test module (tests that kill or stop use their own)."""
    job = DemoJob(tmp_path_factory.mktemp("demo"))
    try:
        job.wait_ready()
        yield job
    finally:
        job.stop()


@pytest.fixture
def fresh_job(tmp_path: Path) -> Iterator[DemoJob]:
    """A demo job of its own (for kill and stop, which change it for good)."""
    job = DemoJob(tmp_path)
    try:
        job.wait_ready()
        yield job
    finally:
        job.stop()
