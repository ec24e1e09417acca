"""A controller the CLI tests drive: 4 workers that print ticks, commands on stdin.

Prints `READY <job id>` once the mesh answers. Stdin commands: `pause R` (rank R calls
`breakpoint()` in `pause`; the result is printed as `PAUSED-RESULT R value`), `quit`.
Failures are printed as `FAILURE <mesh> <rank>` (the job keeps running).
"""

import sys
import threading
import time

import monarch.actor
from monarch.actor import Actor, context, endpoint, this_host

failed: set = set()


def say(text: str) -> None:
    """One line in one write (print() writes the newline separately: lines of several
    processes sharing the pipe would interleave)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def on_failure(failure):
    failed.add(failure.rank)
    say(f"FAILURE {failure.name} {failure.rank} signal={failure.signal}")


monarch.actor.unhandled_fault_hook = on_failure


class Worker(Actor):
    @endpoint
    def tick(self, n: int) -> int:
        say(f"tick {n} rank {context().actor_instance.rank.rank}")
        return n

    @endpoint
    def pause(self, x: int) -> int:
        secret = x * 2
        breakpoint()
        return secret + 1


def ticker(mesh, stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        for rank in range(4):
            if rank in failed:
                continue
            try:
                mesh.slice(gpus=rank).tick.call_one(n).get(timeout=10)
            except Exception:
                pass
        n += 1
        stop.wait(0.2)


def report(rank: int, pending) -> None:
    say(f"PAUSED-RESULT {rank} {pending.get(timeout=120)}")


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    workers = procs.spawn("workers", Worker)
    workers.tick.call(-1).get(timeout=60)
    from monarch._controller._job import current_job

    say(f"READY {current_job().job_id}")
    stop = threading.Event()
    threading.Thread(target=ticker, args=(workers, stop), daemon=True).start()
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["pause"]:
            rank = int(words[1])
            pending = workers.slice(gpus=rank).pause.call_one(rank + 10)
            threading.Thread(target=report, args=(rank, pending), daemon=True).start()
        elif words[:1] == ["quit"]:
            break
    stop.set()
    time.sleep(0.3)
    alive = [r for r in range(4) if r not in failed]
    if alive:
        procs.slice(gpus=slice(min(alive), max(alive) + 1)).stop().get(timeout=30)


if __name__ == "__main__":
    main()
