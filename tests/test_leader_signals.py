"""A signal's exception (KeyboardInterrupt, a SIGTERM handler's SystemExit) that lands in a
thread waiting on a future never loses the loop's baton, wherever it lands: right after the
wait took the baton (before the thread led with it), or as the thread starts to lead. The
next call still answers, and the interrupted wait returns at once.

A CI run met the first: a script's SIGTERM handler fired just as `get` returned the baton;
giving up then waited for a baton it had already taken, and the script hung."""

from __future__ import annotations

import queue
import threading
import time
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from monarch._runtime import _process_runtime
from monarch._runtime._agent_calls import current_runtime
from monarch._runtime._leader import BATON
from monarch.actor import Actor, endpoint, this_host

pytestmark = pytest.mark.timeout(120)


class Echo(Actor):
    @endpoint
    def echo(self, x: int) -> int:
        return x


def _in_thread(fn: Callable[[], Any],
               armed: dict[str, Any] | None = None) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - the injected signal, looked at below
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    if armed is not None:
        armed["thread"] = thread  # before it runs: the injection fires in this thread only
    thread.start()
    return thread, out


def _interrupted_calls(mesh: Any, armed: dict[str, Any], tries: int = 40) -> int:
    """Calls `mesh` from a fresh thread (`armed["thread"]`) until the injection fired a few
    times; after each, the wait ended at once and another thread's call answers."""
    fired = 0
    lead = current_runtime().leadership
    for i in range(tries):
        # the I/O thread leads (it takes a parked baton after a few ms): the call's wait then
        # gets the baton from its queue, the path the signal lands after
        deadline = time.monotonic() + 5
        while lead._holder is not lead.io_queue and time.monotonic() < deadline:
            time.sleep(0.001)
        armed["fire"] = True
        thread, out = _in_thread(lambda: mesh.echo.call_one(i).get(timeout=10), armed)
        thread.join(15)
        assert not thread.is_alive(), "the interrupted wait hung (it waited for its own baton)"
        if isinstance(out[0], KeyboardInterrupt):
            fired += 1
        else:
            assert out == [i], out
        after, got = _in_thread(lambda: mesh.echo.call_one(-i).get(timeout=10))
        after.join(15)
        assert got == [-i], f"the next call did not answer: the baton was lost ({got})"
        if fired >= 3:
            break
    return fired


@pytest.fixture(scope="module")
def mesh() -> Any:
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    yield procs.spawn("echo", Echo)
    procs.stop().get(timeout=30)


def test_a_signal_right_after_the_wait_took_the_baton(mesh: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    armed: dict[str, Any] = {"fire": False, "thread": None}

    class SignalAfterBaton(queue.SimpleQueue):  # type: ignore[type-arg]
        def get(self, *args: Any, **kwargs: Any) -> Any:
            item = super().get(*args, **kwargs)
            if item is BATON and armed["fire"] and threading.current_thread() is armed["thread"]:
                armed["fire"] = False
                raise KeyboardInterrupt  # as the eval loop's signal check does after a call
            return item

    monkeypatch.setattr(_process_runtime, "queue",
                        SimpleNamespace(SimpleQueue=SignalAfterBaton, Empty=queue.Empty))
    assert _interrupted_calls(mesh, armed) >= 3


def test_a_signal_as_the_thread_starts_to_lead(mesh: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    armed: dict[str, Any] = {"fire": False, "thread": None}
    lead = _process_runtime.ProcessRuntime.lead

    def signal_first(self: Any, *args: Any, **kwargs: Any) -> bool:
        if armed["fire"] and threading.current_thread() is armed["thread"]:
            armed["fire"] = False
            raise KeyboardInterrupt  # the baton is held: taken parked, or from the queue
        return lead(self, *args, **kwargs)

    monkeypatch.setattr(_process_runtime.ProcessRuntime, "lead", signal_first)
    assert _interrupted_calls(mesh, armed) >= 3
