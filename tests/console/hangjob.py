"""A job that deadlocks on purpose, as Monarch's GRPO example does: `generator.generate`
waits on `scorer.score`, which waits on `generator.weights`, queued behind `generate`.

Prints `READY <job id>` once both actors are spawned, then hangs in the call.
"""

import sys

from monarch.actor import Actor, endpoint, this_host


class Generator(Actor):
    def __init__(self):
        self.scorer = None

    @endpoint
    def meet(self, scorer):
        self.scorer = scorer

    @endpoint
    def generate(self):
        print("generating", flush=True)
        return self.scorer.score.call_one().get()

    @endpoint
    def weights(self):
        return 1


class Scorer(Actor):
    def __init__(self):
        self.generator = None

    @endpoint
    def meet(self, generator):
        self.generator = generator

    @endpoint
    def score(self):
        print("scoring", flush=True)
        return self.generator.weights.call_one().get()


procs = this_host().spawn_procs(per_host={"gpus": 1})
generator = procs.spawn("generator", Generator)
scorer = procs.spawn("scorer", Scorer)
generator.meet.call_one(scorer).get()
scorer.meet.call_one(generator).get()
from monarch._controller._job import current_job  # noqa: E402 - the job exists by now

sys.stdout.write(f"READY {current_job().job_id}\n")
sys.stdout.flush()
generator.generate.call_one().get()
