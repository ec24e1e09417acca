"""A script that calls a mesh in a loop and catches every KeyboardInterrupt, as a notebook user
pressing Ctrl-C and running the next cell does. Run by tests/test_interrupts.py, which sends
the SIGINTs: prints `ready`, then `caught N` after each; a line on stdin ends the loop, then
20 calls must answer (`ok`)."""

from __future__ import annotations

import signal
import sys
import threading
import time

from monarch.actor import Actor, endpoint, this_host


class Echo(Actor):
    @endpoint
    def echo(self, x: int) -> int:
        print("echo", x)  # the lines travel too
        return x


def one(mesh, i: int) -> None:  # a broadcast, a call to all, calls to each: every send path
    if i % 3 == 0:
        mesh.echo.broadcast(i)
    elif i % 3 == 1:
        mesh.echo.call(i).get(timeout=30)
    else:
        for f in [mesh.slice(gpus=g).echo.call_one(i) for g in range(4)]:
            f.get(timeout=30)


def ack(caught: int) -> None:
    sys.stdout.write(f"caught {caught}\n")  # one write: actors' lines come in between
    sys.stdout.flush()


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    mesh = procs.spawn("echo", Echo)
    mesh.echo.call(0).get(timeout=30)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    print("ready", flush=True)
    caught = 0
    i = 0
    while True:
        try:
            try:
                if stop.is_set():
                    break
                i += 1
                one(mesh, i)
                time.sleep(0)  # a C call: an interrupt that came as one() returned lands here
            except KeyboardInterrupt:
                caught += 1
                ack(caught)
        except KeyboardInterrupt:  # the next came while this one was acknowledged (the GIL
            caught += 1  # was busy elsewhere): counted, acknowledged with the count
            ack(caught)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for j in range(20):
        assert mesh.echo.call(j).get(timeout=30).item(gpus=3) == j
    procs.stop().get(timeout=30)
    sys.stdout.write(f"ok {caught} {i}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
