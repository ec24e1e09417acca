"""Fault tolerance: a rank dies mid-training; its owner handles it, respawns, and finishes.

The Trainer actor owns a mesh of workers. Midway, one worker's process dies (os._exit). The
failure reaches the Trainer's `__supervise__` (it returns True: handled, nothing escalates to
the script), the step that was in flight raises SupervisionError, and the Trainer spawns a
fresh mesh of workers and redoes the step from its last checkpoint.
"""

import os
import time

from monarch.actor import Actor, SupervisionError, current_rank, endpoint, this_host


class Worker(Actor):
    @endpoint
    def step(self, step: int, crash_at: int) -> float:
        if step == crash_at and current_rank().rank == 1:
            os._exit(1)  # the process dies, as if killed by the OOM killer
        return 1.0 / (step + 1)


class Trainer(Actor):
    def __init__(self, workers: int) -> None:
        self.size = workers
        self.failures: list[str] = []
        self.generation = 0
        self._spawn()

    def _spawn(self) -> None:
        self.generation += 1
        self.procs = this_host().spawn_procs(per_host={"gpus": self.size})
        self.workers = self.procs.spawn(f"workers_gen{self.generation}", Worker)

    def __supervise__(self, failure) -> bool:
        self.failures.append(failure.report().splitlines()[-1].strip())
        return True  # handled here: the script is not interrupted

    @endpoint
    def train(self, steps: int, crash_at: int) -> dict:
        losses = []
        step = 0
        while step < steps:
            try:
                values = self.workers.step.call(step, crash_at).get(timeout=60)
            except SupervisionError as error:
                print(f"step {step}: {str(error).splitlines()[-1].strip()}; respawning")
                self._spawn()
                crash_at = -1  # the new workers are healthy
                continue
            losses.append(sum(values.values()) / self.size)
            step += 1
        return {"steps": len(losses), "final_loss": round(losses[-1], 4),
                "generations": self.generation}

    @endpoint
    def supervised(self) -> list:
        """Failures handled by __supervise__ so far."""
        return self.failures


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    trainer = procs.spawn("trainer", Trainer, 4)
    result = trainer.train.call_one(12, 5).get()
    print(f"finished {result['steps']} steps, final loss {result['final_loss']}, "
          f"{result['generations'] - 1} recovery")
    # __supervise__ runs between the Trainer's messages, and the failure may reach it after
    # `train` returned (the call saw the death first): ask until it was handled.
    deadline = time.monotonic() + 60
    handled = trainer.supervised.call_one().get()
    while not handled and time.monotonic() < deadline:
        time.sleep(0.1)
        handled = trainer.supervised.call_one().get()
    print("handled in __supervise__:", handled)
    procs.stop().get()


if __name__ == "__main__":
    main()
