"""Fixtures shared by the telemetry tests: a fresh process recorder for each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from monarch.telemetry import Recorder, reset_trace_context, set_process_recorder, set_trace_context


@pytest.fixture(autouse=True)
def recorder() -> Iterator[Recorder]:
    """A fresh process recorder with the usual limits; the previous one comes back after."""
    fresh = Recorder()
    fresh.configure({"host": "h1", "proc": "proc-a", "job": "j1"})
    previous = set_process_recorder(fresh)
    yield fresh
    set_process_recorder(previous)


@pytest.fixture(autouse=True)
def no_trace_context() -> Iterator[None]:
    """Each test starts outside any span, whatever the previous test left current."""
    token = set_trace_context(None)
    yield
    reset_trace_context(token)
