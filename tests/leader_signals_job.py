"""The job of tests/test_leader_signals.py, in a process of its own: a controller whose loop
only the I/O thread leads when idle (the test session's controller has local actors whose idle
threads lead, and a follower then never receives the baton). `argv[1]` names the scenario;
prints `fired N` (how many interrupts landed where the scenario puts them)."""

from __future__ import annotations

import queue
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any, Callable

from monarch._runtime import _process_runtime
from monarch._runtime._agent_calls import current_runtime
from monarch._runtime._leader import BATON
from monarch.actor import Actor, endpoint, this_host


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
        if thread.is_alive():
            sys.exit("the interrupted wait hung (it waited for its own baton)")
        if isinstance(out[0], KeyboardInterrupt):
            fired += 1
        elif out != [i]:
            sys.exit(f"the interrupted call answered {out}")
        after, got = _in_thread(lambda: mesh.echo.call_one(-i).get(timeout=10))
        after.join(15)
        if got != [-i]:
            sys.exit(f"the next call did not answer: the baton was lost ({got})")
        if fired >= 3:
            break
    return fired


def after_baton(mesh: Any) -> int:
    armed: dict[str, Any] = {"fire": False, "thread": None}

    class SignalAfterBaton(queue.SimpleQueue):  # type: ignore[type-arg]
        def get(self, *args: Any, **kwargs: Any) -> Any:
            item = super().get(*args, **kwargs)
            if item is BATON and armed["fire"] and threading.current_thread() is armed["thread"]:
                armed["fire"] = False
                raise KeyboardInterrupt  # as the eval loop's signal check does after a call
            return item

    _process_runtime.queue = SimpleNamespace(  # type: ignore[assignment]
        SimpleQueue=SignalAfterBaton, Empty=queue.Empty)
    return _interrupted_calls(mesh, armed)


def starting_to_lead(mesh: Any) -> int:
    armed: dict[str, Any] = {"fire": False, "thread": None}
    lead = _process_runtime.ProcessRuntime.lead

    def signal_first(self: Any, *args: Any, **kwargs: Any) -> bool:
        if armed["fire"] and threading.current_thread() is armed["thread"]:
            armed["fire"] = False
            raise KeyboardInterrupt  # the baton is held: taken parked, or from the queue
        return lead(self, *args, **kwargs)

    _process_runtime.ProcessRuntime.lead = signal_first  # type: ignore[method-assign]
    return _interrupted_calls(mesh, armed)


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    mesh = procs.spawn("echo", Echo)
    mesh.echo.call_one(0).get(timeout=30)
    fired = {"after_baton": after_baton, "starting_to_lead": starting_to_lead}[sys.argv[1]](mesh)
    procs.stop().get(timeout=30)
    print("fired", fired, flush=True)


if __name__ == "__main__":
    main()
