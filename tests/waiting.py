"""Waiting in tests: on the event itself, with a deadline, never a bare sleep.

A test that sleeps and then asserts races the machine: under load the event comes later than
the sleep. Every wait here polls a condition until it holds or a deadline passes, and then fails
saying what did not happen. `test_contracts.test_no_sleep_in_test_bodies` keeps sleeps out of
test functions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from monarch._runtime._pids import pid_alive

T = TypeVar("T")


Description = str | Callable[[], str]
"""What a wait waits for, in words; a function is called when the wait fails (to show the
latest state: a screen, a log)."""


def wait_until(condition: Callable[[], T], what: Description = "", timeout: float = 30.0,
               interval: float = 0.05) -> T:
    """Polls `condition()` until it returns something truthy, and returns that; raises
    AssertionError naming `what` if `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, condition)
        time.sleep(interval)


async def wait_until_async(condition: Callable[[], T], what: Description = "",
                           timeout: float = 30.0,
                           interval: float = 0.05,
                           pause: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> T:
    """`wait_until` inside a coroutine: between polls it awaits `pause(interval)` instead of
    blocking, so the event loop (and an app under Pilot: pass `pilot.pause`) keeps running."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, condition)
        await pause(interval)


def _timed_out(timeout: float, what: Description, condition: Any) -> AssertionError:
    said = what() if callable(what) else what
    return AssertionError(f"not within {timeout:g}s: {said or condition}")


def alive(pid: int) -> bool:
    """True while a process with this pid exists and is not a zombie (the project's one check,
    which also holds when the process is reaped between its steps)."""
    return pid_alive(pid)


def wait_gone(*pids: int, timeout: float = 30.0) -> None:
    """Waits until none of `pids` is alive (zombies count as gone); fails naming the rest."""
    wait_until(lambda: not [p for p in pids if alive(p)], f"processes {list(pids)} to exit",
               timeout)


def pid_gone(pid: int, timeout: float = 15.0) -> bool:
    """Waits until `pid` is gone; False (not an exception) if it is still there at the end."""
    try:
        wait_gone(pid, timeout=timeout)
    except AssertionError:
        return False
    return True

