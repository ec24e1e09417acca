"""Fixtures shared by the telemetry tests: a fresh process recorder for each test, and `drain`."""

from __future__ import annotations

from collections.abc import Callable, Iterator

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


def _drain(recorder: Recorder) -> list:
    """Everything `recorder` holds, as wire data; asserts there was something."""
    wire = recorder.drain(10**6)
    assert wire is not None, "the recorder held nothing"
    return wire


@pytest.fixture
def drain() -> Callable[[Recorder], list]:
    """`drain(recorder)`: everything the recorder holds, as wire data (asserting there was
    something)."""
    return _drain
