"""GRPO on CPU: generators as a service, a reward actor, a trainer, weights synced every step.

The policy is a small MLP that reads two digits a and b and answers one token in 0..18; the
reward is verifiable: 1 when the answer is a + b, else 0. Each step:

1. the controller draws prompts and routes them, in two halves, to the generator service (two
   replicas, `route`: least loaded), which samples a group of answers per prompt;
2. the reward actor checks every answer;
3. the trainer takes one GRPO step (advantage = reward normalized within each prompt's group)
   and publishes its weights with `monarch.weights.put_state_dict`;
4. every generator pulls them (`fanout` of `update`, each `get_state_dict` into its model).

The mean reward starts near chance (1/19) and rises; it is printed every 10 steps.

    python examples/rl_grpo.py [--steps 160] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import torch

from monarch.actor import Actor, endpoint, this_host
from monarch.weights import get_state_dict, latest_version, put_state_dict

DIGITS, ANSWERS = 10, 19
PROMPTS, GROUP = 32, 8  # prompts per step, answers sampled per prompt
REPLICAS = 2  # generator replicas (a replaced one is a new process in the same place)
WEIGHTS_KEY = "policy"


def make_policy(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(2 * DIGITS, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, ANSWERS))


def encode(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    one_hot = torch.nn.functional.one_hot
    return torch.cat([one_hot(a, DIGITS), one_hot(b, DIGITS)], dim=1).float()


class Generator(Actor):
    """Samples answers with its copy of the policy; pulls new weights on `update`."""

    def __init__(self, seed: int) -> None:
        torch.set_num_threads(1)
        self.policy = make_policy(seed)
        self.version = 0
        if latest_version(WEIGHTS_KEY).get(timeout=60) is not None:
            self.update(0)  # a replacement replica starts from the newest weights

    @endpoint
    def generate(self, a: torch.Tensor, b: torch.Tensor, group: int) -> dict:
        x = encode(a, b).repeat_interleave(group, dim=0)
        with torch.no_grad():
            answers = torch.distributions.Categorical(logits=self.policy(x)).sample()
        return {"a": a, "b": b, "answers": answers.view(len(a), group), "version": self.version,
                "pid": os.getpid()}

    @endpoint
    def update(self, version: int) -> int:
        sd = get_state_dict(WEIGHTS_KEY, into=self.policy.state_dict()).get(timeout=60)
        self.version = sd.version
        return self.version


class Reward(Actor):
    """The verifier: 1.0 for the right sum, 0.0 otherwise."""

    @endpoint
    def score(self, a: torch.Tensor, b: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
        return (answers == (a + b).unsqueeze(1)).float()


class Trainer(Actor):
    """One GRPO step per batch; publishes the new weights after each."""

    def __init__(self, seed: int, lr: float = 0.01) -> None:
        torch.set_num_threads(1)
        self.policy = make_policy(seed)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=lr)

    @endpoint
    def publish(self) -> int:
        return put_state_dict(self.policy.state_dict(), WEIGHTS_KEY).get(timeout=60)

    @endpoint
    def train(self, a: torch.Tensor, b: torch.Tensor, answers: torch.Tensor,
              rewards: torch.Tensor) -> dict:
        group = answers.shape[1]
        advantages = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True)
                                                                  + 1e-4)
        x = encode(a, b).repeat_interleave(group, dim=0)
        logp = torch.distributions.Categorical(logits=self.policy(x)).log_prob(answers.view(-1))
        loss = -(advantages.view(-1) * logp).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        version = put_state_dict(self.policy.state_dict(), WEIGHTS_KEY).get(timeout=60)
        return {"loss": loss.item(), "version": version}


async def run(steps: int, seed: int) -> dict:
    host = this_host()
    generators = await Generator.options(procs=1, num_replicas=REPLICAS, name="generators") \
        .as_service(seed)
    procs = host.spawn_procs(per_host={"procs": 2})
    trainer = procs.slice(procs=0).spawn("trainer", Trainer, seed)
    reward = procs.slice(procs=1).spawn("reward", Reward)
    version = await trainer.publish.call_one()
    await generators.update.fanout(version)  # every generator starts from the trainer's policy
    rng = torch.Generator().manual_seed(seed)
    history: list[float] = []
    replicas_used: set[int] = set()
    start = time.time()
    for step in range(steps):
        a = torch.randint(0, DIGITS, (PROMPTS,), generator=rng)
        b = torch.randint(0, DIGITS, (PROMPTS,), generator=rng)
        half = PROMPTS // 2
        batches = await asyncio.gather(
            generators.generate.route(a[:half], b[:half], GROUP),
            generators.generate.route(a[half:], b[half:], GROUP))
        replicas_used.update(batch["pid"] for batch in batches)
        answers = torch.cat([batch["answers"] for batch in batches])
        rewards = await reward.score.call_one(a, b, answers)
        result = await trainer.train.call_one(a, b, answers, rewards)
        await generators.update.fanout(result["version"])
        history.append(float(rewards.mean()))
        if (step + 1) % 10 == 0:
            window = history[-10:]
            print(f"step {step + 1:4d}  mean reward {sum(window) / len(window):.3f}  "
                  f"loss {result['loss']:+.3f}  weights v{result['version']}", flush=True)
    elapsed = time.time() - start
    await generators.shutdown()
    await procs.stop()
    k = min(10, len(history))
    return {"first": sum(history[:k]) / k, "last": sum(history[-k:]) / k, "seconds": elapsed,
            "replicas": REPLICAS, "processes": len(replicas_used), "steps": len(history)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = asyncio.run(run(args.steps, args.seed))
    replaced = out["processes"] - out["replicas"]
    print(f"mean reward {out['first']:.3f} (first 10 steps) -> {out['last']:.3f} (last 10 "
          f"steps), {out['steps']} steps in {out['seconds']:.1f} s on "
          f"{out['replicas']} generator replicas"
          + (f" ({replaced} replaced along the way)" if replaced > 0 else ""))


if __name__ == "__main__":
    main()
