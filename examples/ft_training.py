"""Fault-tolerant data-parallel training with TorchFT on monarch (CPU, gloo).

TorchFT's Lighthouse runs inside an actor. Each replica group is a proc mesh whose actor runs a
torchft `Manager` and torchft's `DistributedDataParallel`: every step the groups form a quorum
at the Lighthouse and average their gradients across groups (gloo). The script SIGKILLs a whole
replica group a few times at random steps (each once every group has committed the newest step
in one quorum: the last replacement has healed); monarch's supervision reports each death at once
(the root's fault hook), the surviving groups carry on (the quorum shrinks, a step that was in
flight when the peer died is not committed and is redone), a new group is spawned as a new
proc mesh, heals from a live peer (torchft sends it the current weights and optimizer state)
and rejoins the quorum. The loss keeps falling throughout.

The groups are driven one call after the other each (they meet at every step's quorum, as
torchft replica groups do); the run trains at least `--steps` steps, and on until every kill
was made and every replacement has rejoined, then every group stops at the same step. A kill
always leaves groups that hold the newest committed state (the peers to heal from).

    python examples/ft_training.py [--groups 3] [--steps 60] [--kills 3] [--seed S]

Needs `pip install torchft` (it runs on CPU with gloo).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import time
from datetime import timedelta
from typing import Any

import monarch.actor
from monarch.actor import Actor, SupervisionError, endpoint, this_host

FEATURES = 16
STEP_TIMEOUT_S = 60.0  # no step call may take longer (torchft's own timeouts are 5 s)


class Lighthouse(Actor):
    """TorchFT's Lighthouse (quorum server) in an actor."""

    def __init__(self, min_replicas: int) -> None:
        os.environ.setdefault("RUST_LOG", "warn")
        from torchft.coordination import LighthouseServer

        self.server = LighthouseServer(bind="[::]:0", min_replicas=min_replicas,
                                       join_timeout_ms=500, heartbeat_timeout_ms=1000)

    @endpoint
    def address(self) -> str:
        return self.server.address()

    def __cleanup__(self, exc: Any) -> None:
        self.server.shutdown()


class ReplicaGroup(Actor):
    """One replica group: a model, a torchft Manager and DDP over the groups."""

    def __init__(self, slot: int, lighthouse: str, seed: int) -> None:
        os.environ.setdefault("RUST_LOG", "warn")  # torchft's servers log every quorum at info
        import torch
        from torch.distributed import TCPStore
        from torchft import DistributedDataParallel, Manager, ProcessGroupGloo

        torch.set_num_threads(1)
        torch.manual_seed(seed)
        self.slot = slot
        self.model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(),
                                         torch.nn.Linear(32, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.02, momentum=0.9)
        self.store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        self.manager = Manager(
            pg=ProcessGroupGloo(timeout=timedelta(seconds=5)), min_replica_size=1,
            load_state_dict=self._load, state_dict=self._state, replica_id=f"group{slot}",
            use_async_quorum=False, timeout=timedelta(seconds=5),
            quorum_timeout=timedelta(seconds=20), connect_timeout=timedelta(seconds=10),
            rank=0, world_size=1, store_addr="127.0.0.1", store_port=self.store.port,
            lighthouse_addr=lighthouse)
        self.ddp = DistributedDataParallel(self.manager, self.model)
        self.target = torch.Generator().manual_seed(1234)  # the same task for every group
        self.true_w = torch.randn(FEATURES, 1, generator=self.target)

    def _load(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optim"])

    def _state(self) -> dict:
        return {"model": self.model.state_dict(), "optim": self.optimizer.state_dict()}

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def train_step(self) -> dict:
        """One torchft step: quorum (healing if behind), forward, backward, allreduce, commit."""
        import torch
        from torchft import DistributedDataParallel

        before = self.manager.current_step()
        self.optimizer.zero_grad()
        self.manager.start_quorum()
        healed = self.manager.current_step() > before  # took a live peer's state
        step = self.manager.current_step()
        data = torch.Generator().manual_seed(1000 * self.slot + step)
        x = torch.randn(64, FEATURES, generator=data)
        y = x @ self.true_w + 0.05 * torch.randn(64, 1, generator=data)
        loss = torch.nn.functional.mse_loss(self.ddp(x), y)
        try:
            loss.backward()  # DDP's hook averages the gradients over the quorum's groups
        except Exception:
            # A peer died during this step's allreduce: the manager records the error and
            # should_commit will say no. torchft 0.2.0's DDP hook then trips on the no-op work
            # the errored manager hands it, which leaves DDP's reducer mid-backward: wrap the
            # model afresh for the next step. This step is not committed; it is redone.
            if self.manager.errored() is None:
                raise
            self.ddp = None
            self.ddp = DistributedDataParallel(self.manager, self.model)
        committed = self.manager.should_commit()
        if committed:
            self.optimizer.step()
        return {"slot": self.slot, "step": self.manager.current_step(), "committed": committed,
                "loss": loss.item(), "participants": self.manager.num_participants(),
                "healed_to": step if healed else None}

    def __cleanup__(self, exc: Any) -> None:
        self.manager.shutdown(wait=False)


class Group:
    """A replica group as the controller sees it: its proc mesh, actor, pid and generation."""

    def __init__(self, slot: int, generation: int, procs: Any, actor: Any) -> None:
        self.slot, self.generation = slot, generation
        self.procs, self.actor = procs, actor
        self.pid: int | None = None
        self.ready = False
        self.dead = False
        self.joined: int | None = None  # the first step it committed
        self.last: dict | None = None  # its newest step's result

    @property
    def name(self) -> str:
        return f"group{self.slot}" + (f"_g{self.generation}" if self.generation else "")


class Trainer:
    """The controller: drives each live group's steps, kills groups, replaces them.

    Each group is driven on its own (one `train_step` call after the other), as torchft
    replica groups run: they meet at every step's quorum, not at a barrier of ours.
    """

    def __init__(self, groups: int, steps: int, kills: int, seed: int | None) -> None:
        self.steps, self.nslots = steps, groups
        self.rng = random.Random(seed)
        self.kill_at = sorted(self.rng.sample(range(5, max(steps - 5, 6)), kills))
        self.groups: dict[int, Group] = {}
        self.failures: list[str] = []
        self.pids: list[int] = []
        self.healed: list[str] = []
        self.losses: dict[int, list[float]] = {}
        self.step = 0  # the newest committed step
        self.final: int | None = None  # every group stops once it committed this step
        self.progress = asyncio.Event()
        self.tasks: list[asyncio.Future[None]] = []
        self.seconds = 0.0

    def on_failure(self, failure: monarch.actor.MeshFailure) -> None:
        """The root's fault hook: supervision reports a dead group here."""
        reason = failure.report().strip().splitlines()[-1].strip()
        self.failures.append(f"{failure.name}: {reason}")
        print(f"supervision: {failure.name} failed ({reason})", flush=True)

    def place(self, slot: int, generation: int, lighthouse: str) -> None:
        """A new replica group in `slot`, counted (as not yet joined) from this moment on, so
        that the run cannot end before it has rejoined; its task spawns and drives it."""
        group = self.groups[slot] = Group(slot, generation, None, None)
        self.tasks.append(asyncio.ensure_future(self.spawn(group, lighthouse)))

    async def spawn(self, group: Group, lighthouse: str) -> None:
        """Starts `group` (a proc mesh of one proc); then drives it."""
        started = time.time()
        group.procs = this_host().spawn_procs(per_host={"procs": 1})
        group.actor = group.procs.spawn(group.name, ReplicaGroup, group.slot, lighthouse,
                                        group.slot)
        group.pid = await group.actor.pid.call_one()
        self.pids.append(group.pid)
        group.ready = True
        print(f"{group.name}: replica group up (pid {group.pid}, {time.time() - started:.1f} s"
              f" to start torch and its torchft Manager)", flush=True)
        await self.drive(group)

    async def drive(self, group: Group) -> None:
        """Steps one group until it dies or has committed the final step."""
        while not group.dead:
            try:
                result = await asyncio.wait_for(
                    _awaitable(group.actor.train_step.call_one()), STEP_TIMEOUT_S)
            except SupervisionError:
                return  # killed: supervision has reported it
            self.record(group, result)
            if self.final is not None and result["step"] >= self.final:
                return

    async def run(self, lighthouse: str) -> None:
        """Trains until `steps` steps are committed, every kill was made and every replacement
        has rejoined; then every group stops at the same step."""
        for slot in range(self.nslots):
            self.place(slot, 0, lighthouse)
        while self.step < self.steps or self.kill_at or self.rejoining():
            await self.progress.wait()
            self.progress.clear()
            for task in self.tasks:  # a group's call that failed otherwise ends the run
                error = task.exception() if task.done() else None
                if error is not None:
                    raise error
            if self.kill_at and self.step >= self.kill_at[0] and self.settled():
                self.kill_at.pop(0)  # live peers stay for the replacement to heal from
                self.kill(self.rng.choice(list(self.groups.values())), lighthouse)
        self.final = self.step + 2
        await asyncio.gather(*self.tasks)

    def settled(self) -> bool:
        """True when every slot's group has committed the newest step in one quorum of all.

        A kill waits for it: a kill while a replacement is still healing (or while the
        survivors are still redoing the step a dead peer broke) could leave only groups that
        have no committed state to heal from, or a replacement that formed a quorum of its own.
        """
        live = [g for g in self.groups.values() if not g.dead]
        return len(live) == self.nslots and all(
            g.joined is not None and g.last is not None and g.last["committed"]
            and g.last["step"] == self.step and g.last["participants"] == len(live)
            for g in live)

    def rejoining(self) -> bool:
        """True while a replacement group has not committed a step yet."""
        return any(not g.dead and g.joined is None for g in self.groups.values())

    def kill(self, group: Group, lighthouse: str) -> None:
        print(f"step {self.step}: SIGKILL {group.name} (pid {group.pid}) mid-step", flush=True)
        group.dead = True
        assert group.pid is not None
        os.kill(group.pid, signal.SIGKILL)
        self.place(group.slot, group.generation + 1, lighthouse)

    def record(self, group: Group, result: dict) -> None:
        group.last = result
        if result["healed_to"] is not None:
            note = f"{group.name}: healed from a live peer at step {result['healed_to']}"
            self.healed.append(note)
            print(note, flush=True)
        if result["committed"] and group.joined is None:
            group.joined = result["step"]
            if group.generation:
                print(f"{group.name}: rejoined the quorum at step {result['step']}", flush=True)
        if result["committed"]:
            self.losses.setdefault(result["step"], []).append(result["loss"])
            every = 10 if result["step"] <= self.steps else 50
            if result["step"] % every == 0 and len(self.losses[result["step"]]) == 1:
                print(f"step {result['step']:4d}  loss {result['loss']:.4f}  "
                      f"{result['participants']} groups in the quorum", flush=True)
        self.step = max(self.step, int(result["step"]))
        self.progress.set()


async def _awaitable(future: Any) -> Any:
    return await future


async def main_async(groups: int, steps: int, kills: int, seed: int | None) -> Trainer:
    trainer = Trainer(groups, steps, kills, seed)
    monarch.actor.unhandled_fault_hook = trainer.on_failure
    lighthouse_procs = this_host().spawn_procs(per_host={"procs": 1})
    lighthouse = lighthouse_procs.spawn("lighthouse", Lighthouse, 1)
    address = await lighthouse.address.call_one()
    start = time.time()
    try:
        await trainer.run(address)
    finally:
        for group in trainer.groups.values():
            if not group.dead and group.procs is not None:
                await group.procs.stop()
        await lighthouse_procs.stop()
    trainer.seconds = time.time() - start
    return trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    trainer = asyncio.run(main_async(args.groups, args.steps, args.kills, args.seed))
    committed = sorted(trainer.losses)
    missing = [s for s in range(1, args.steps + 1) if s not in trainer.losses]
    first = [sum(trainer.losses[s]) / len(trainer.losses[s]) for s in committed[:10]]
    last = [sum(trainer.losses[s]) / len(trainer.losses[s]) for s in committed[-10:]]
    print(f"committed steps 1..{committed[-1]} ({len(missing)} missing), "
          f"{len(trainer.failures)} group failures reported, "
          f"{len(trainer.healed)} groups healed from a peer")
    print(f"loss {sum(first) / len(first):.4f} (first 10 steps) -> "
          f"{sum(last) / len(last):.4f} (last 10 steps) in "
          f"{trainer.seconds:.1f} s")
    print(f"group pids: {trainer.pids}")


if __name__ == "__main__":
    main()
