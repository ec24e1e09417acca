"""A job of 1,024 actors for the console's tmux test (issue 32): 64 procs (`hosts` 8 × `gpus` 8)
× 16 meshes. The mesh `train` runs `step` on every rank: rank 7 is stuck loading its batch,
the 63 others wait in `all_reduce` for it (a deadlocked collective, as a real job's); the 15
meshes `m01`..`m15` are called in a loop, so the console watches a busy job.

Prints `READY <job id>` once `step` was sent to every rank of `train`, `FAILED <mesh>` for a
failure (the job goes on); runs until killed.
"""

import sys
import threading
import time

import monarch.actor
from monarch.actor import Actor, SupervisionError, current_rank, endpoint, this_host

STUCK = 7


def load_batch(release: threading.Event) -> None:
    release.wait()  # the data loader never returns


def all_reduce(release: threading.Event) -> None:
    release.wait()  # waits for rank 7, which never comes


class Trainer(Actor):
    def __init__(self) -> None:
        self.release = threading.Event()

    @endpoint
    def step(self) -> None:
        if current_rank().rank == STUCK:
            load_batch(self.release)
        else:
            all_reduce(self.release)


class Worker(Actor):
    def __init__(self) -> None:
        self.n = 0

    @endpoint
    def work(self) -> int:
        self.n += 1
        return self.n


# A rank killed from the console must not end the job (Monarch's default: the client exits).
# One write per line: the hook runs on a thread per failure, and print() writes the text and
# its newline apart (two threads' lines could share one).
monarch.actor.unhandled_fault_hook = lambda failure: (
    sys.stdout.write(f"FAILED {failure.name}\n"), sys.stdout.flush())
procs = this_host().spawn_procs(per_host={"hosts": 8, "gpus": 8})
train = procs.spawn("train", Trainer)
others = [procs.spawn(f"m{i:02d}", Worker) for i in range(1, 16)]
for mesh in others:
    mesh.work.call().get(timeout=120)
train.step.broadcast()
from monarch._controller._job import current_job  # noqa: E402 - the job exists by now

print(f"READY {current_job().job_id}", flush=True)
while True:
    for mesh in others:
        try:
            mesh.work.call().get(timeout=120)
        except SupervisionError:  # a rank of it was killed: the others still answer
            pass
    time.sleep(0.5)
