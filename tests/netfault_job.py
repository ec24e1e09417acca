"""A job whose host sits behind an emulated network link (`tests/netlink.py`): a worker in a
network namespace of its own, the controller here. Run by tests/test_network_faults.py; prints
one JSON object with what each phase saw.

Phases: calls over a clean link; over 50 ms of delay and 5 % loss (correct, slower); a cut
shorter than the heartbeat window (`SILENCE_S`) while calls are in flight (they all arrive,
once each, in order); a cut longer than it (a host failure reported to the owner, and the
host's procs end themselves).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from netlink import Link  # noqa: E402
from waiting import pid_gone, wait_until  # noqa: E402

import monarch.actor  # noqa: E402
from monarch.actor import Actor, endpoint  # noqa: E402

CALLS = 40


class Counter(Actor):
    """Keeps every sequence number it was sent, in arrival order."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    @endpoint
    def take(self, seq: int) -> int:
        self.seen.append(seq)
        return seq

    @endpoint
    def seen_list(self) -> list[int]:
        return list(self.seen)

    @endpoint
    def pid(self) -> int:
        return os.getpid()


def timed(mesh: object, first: int, n: int) -> tuple[float, bool]:
    """`n` calls one after the other: (seconds, every answer right)."""
    start = time.monotonic()
    ok = all(mesh.take.call_one(first + i).get(timeout=60) == first + i  # type: ignore
             for i in range(n))
    return time.monotonic() - start, ok


def main() -> None:
    from monarch._controller._remote import attach_to_workers
    from monarch._host.worker import SILENCE_S

    failures: list[str] = []
    reported = threading.Event()

    def hook(failure: object) -> None:
        failures.append(failure.report())  # type: ignore[attr-defined]
        reported.set()

    monarch.actor.unhandled_fault_hook = hook
    secret = secrets.token_hex(16)
    out: dict = {}
    with Link(f"mnf{os.getpid() % 10000}", 1 + os.getpid() % 200) as link:
        os.environ["MONARCH_BIND_HOST"] = link.here  # where the host's procs reach us
        ready = Path(os.environ["MONARCH_RUN_DIR"]) / "worker.ready"
        worker = subprocess.Popen(link.inside([
            sys.executable, "-m", "monarch._host.worker", "--address",
            f"tcp://{link.there}:0", "--ready-file", str(ready), "--hostname", "netns-host"]),
            env=dict(os.environ, MONARCH_WORKER_SECRET=secret), stdout=subprocess.DEVNULL)
        try:
            wait_until(ready.exists, "the worker's ready file", 60)
            address = json.loads(ready.read_text())["address"]
            hosts = attach_to_workers(workers=[address], secret=secret.encode())
            mesh = hosts.spawn_procs(per_host={"gpus": 1}).spawn("counter", Counter)
            pid = mesh.pid.call_one().get(timeout=60)
            out["clean_s"], out["clean_ok"] = timed(mesh, 0, CALLS)
            link.set(delay_s=0.05, loss=0.05)
            out["degraded_s"], out["degraded_ok"] = timed(mesh, CALLS, CALLS)
            out["dropped_packets"] = link.dropped
            link.set()

            # a cut shorter than the heartbeat window, calls in flight across it
            link.set(cut=True)
            pending = [mesh.take.call_one(2 * CALLS + i) for i in range(CALLS)]
            # sleep-ok: the cut itself. Well inside the window: TCP resends what the cut
            # dropped with a backoff (0.2, 0.4, 0.8, 1.6 s...), so the silence the controller
            # sees lasts up to the next resend after the heal, and a heartbeat may have
            # been due just before the cut
            time.sleep(SILENCE_S / 5)
            link.set()
            answers = [f.get(timeout=60) for f in pending]
            out["short_cut_answers_ok"] = answers == list(range(2 * CALLS, 3 * CALLS))
            out["seen_exactly_once_in_order"] = (mesh.seen_list.call_one().get(timeout=60)
                                                 == list(range(3 * CALLS)))
            out["failures_after_short_cut"] = list(failures)

            # a cut longer than the window: the host is lost, and its procs end themselves
            link.set(cut=True)
            out["long_cut_reported"] = reported.wait(timeout=SILENCE_S * 4)
            out["long_cut_reason"] = failures[-1] if failures else ""
            out["proc_ended_itself"] = pid_gone(pid, SILENCE_S * 4)
            link.set()
        finally:
            worker.kill()
            worker.wait(timeout=30)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
