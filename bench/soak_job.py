"""The job that `bench/soak.py` runs and watches: three workloads under a chaos loop.

- **rl**: the RL example's shape (`examples/rl_grpo.py`'s actors): a generator service of two
  replicas behind `route`, a reward actor, a trainer that publishes its weights every step and
  the generators that pull them (`fanout`).
- **ft**: fault-tolerant training (`examples/ft_training.py`'s actors): a TorchFT Lighthouse
  and replica groups, each group on a host of a `ProcessJob`; a group that dies is replaced on
  its host (a dead host worker is started anew by `job.state()`).
- **counters**: a mesh of 4 actors that print a line and open a user span per call, each with
  the actor's token and a number; the reply says which number it was. What was answered must
  be in the history at the end (the harness checks; what an actor emitted in a call that never
  answered may be there too, once).

The chaos loop, every `--every` seconds (random within), SIGKILLs a counters proc, a
generator replica or a ProcessJob host worker, or SIGSTOPs a host worker past the heartbeat
(`SILENCE_S`) and then SIGCONTs it. Every call has a deadline: one that passes it is a hang.

Prints JSON lines on stdout: ``{"pids": ...}`` when processes of note change, ``{"fault":
...}`` per fault, ``{"progress": ...}`` every 10 s and ``{"summary": ...}`` at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))  # the examples' actors, imported by name in procs

import monarch.actor  # noqa: E402
from monarch.actor import Actor, SupervisionError, endpoint, this_host  # noqa: E402
from monarch.telemetry import span  # noqa: E402

DEADLINE_S = 90.0
"""No call may take longer (a SIGSTOPped host holds its calls for `SILENCE_S` and more);
`--deadline` sets it."""


COUNTER_PAUSE_S = 0.01
"""Between two calls of the counters (~400 lines and spans a second in all): a history of an
hour stays well under its bound, so every one of them can be counted at the end."""


def _last_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[-1].strip() if lines else type(exc).__name__


def emit(**item: Any) -> None:
    """One JSON line, in one write: the procs' lines share this stdout, and print() writes
    its text and its newline apart."""
    sys.stdout.write(json.dumps(item) + "\n")
    sys.stdout.flush()


class Counter(Actor):
    """Prints a line and opens a span per call, numbered; answers the number."""

    def __init__(self) -> None:
        self.token = os.urandom(4).hex()
        self.n = 0

    @endpoint
    def tick(self) -> tuple[str, int, int]:
        self.n += 1
        with span(f"soak-span {self.token} {self.n}"):
            print(f"soak-line {self.token} {self.n}", flush=True)
        return self.token, self.n, os.getpid()


class Sentinel(Actor):
    """Never killed: the proc whose memory the harness follows."""

    @endpoint
    def pid(self) -> int:
        return os.getpid()


class Soak:
    """The three workloads, the chaos loop and what they counted."""

    def __init__(self, minutes: float, every: tuple[float, float], seed: int,
                 kinds: tuple[str, ...] = ("proc", "replica", "host", "pause")) -> None:
        self.kinds = kinds
        self.started = time.monotonic()
        self.end = self.started + minutes * 60
        self.every = every
        self.rng = random.Random(seed)
        self.acked: dict[str, int] = {}  # counter token -> the highest number answered
        self.counts = {"rl_steps": 0, "rl_routes": 0, "ft_steps": 0, "ft_replaced": 0, "ft_step_errors": 0,
                       "counter_calls": 0, "counter_respawns": 0, "hangs": 0, "errors": 0}
        self.faults: list[dict[str, Any]] = []
        self.generator_pids: set[int] = set()
        self.counter_pids: list[int] = []
        self.ft_job: Any = None
        self.failures: deque[str] = deque(maxlen=50)

    def running(self) -> bool:
        return time.monotonic() < self.end

    async def call(self, future: Any) -> Any:
        """Awaits a call; past `DEADLINE_S` it is a hang (counted, then raised)."""
        async def wait() -> Any:
            return await future
        try:
            return await asyncio.wait_for(wait(), DEADLINE_S)
        except asyncio.TimeoutError:
            self.counts["hangs"] += 1
            raise

    # -- counters ------------------------------------------------------------------------------
    async def counters(self) -> None:
        while self.running():
            procs = this_host().spawn_procs(per_host={"gpus": 4})
            mesh = procs.spawn("counters", Counter)
            try:
                while self.running():
                    values = await self.call(mesh.tick.call())
                    self.counter_pids = []
                    for token, n, pid in values.values():
                        self.acked[token] = max(self.acked.get(token, 0), n)
                        self.counter_pids.append(pid)
                    self.counts["counter_calls"] += 1
                    await asyncio.sleep(COUNTER_PAUSE_S)
            except SupervisionError:
                self.counts["counter_respawns"] += 1
            finally:
                await self.call(procs.stop())

    # -- rl --------------------------------------------------------------------------------------
    async def rl(self) -> None:
        import torch
        from rl_grpo import DIGITS, GROUP, Generator, Reward, Trainer

        generators = await Generator.options(procs=1, num_replicas=2, name="generators") \
            .as_service(0)
        procs = this_host().spawn_procs(per_host={"procs": 2})
        trainer = procs.slice(procs=0).spawn("trainer", Trainer, 0)
        reward = procs.slice(procs=1).spawn("reward", Reward)
        await self.call(generators.update.fanout(await self.call(trainer.publish.call_one())))
        rng = torch.Generator().manual_seed(0)
        try:
            while self.running():
                a = torch.randint(0, DIGITS, (16,), generator=rng)
                b = torch.randint(0, DIGITS, (16,), generator=rng)
                batches = await asyncio.gather(
                    self.call(generators.generate.route(a[:8], b[:8], GROUP)),
                    self.call(generators.generate.route(a[8:], b[8:], GROUP)))
                self.counts["rl_routes"] += 2
                self.generator_pids = {batch["pid"] for batch in batches}
                answers = torch.cat([batch["answers"] for batch in batches])
                rewards = await self.call(reward.score.call_one(a, b, answers))
                try:
                    result = await self.call(trainer.train.call_one(a, b, answers, rewards))
                except Exception:
                    emit(stacks=_stacks_now(("trainer", "reward")))  # where it was stuck
                    raise
                await self.call(generators.update.fanout(result["version"]))
                self.counts["rl_steps"] += 1
        finally:
            await self.call(generators.shutdown())
            await self.call(procs.stop())

    # -- ft --------------------------------------------------------------------------------------
    async def ft(self, groups: int = 2) -> None:
        from ft_training import Lighthouse

        from monarch.job import ProcessJob

        self.ft_job = ProcessJob({"ft": groups})
        state = self.ft_job.state(cached_path=None)
        lighthouse_procs = this_host().spawn_procs(per_host={"procs": 1})
        lighthouse = lighthouse_procs.spawn("lighthouse", Lighthouse, 1)
        address = await self.call(lighthouse.address.call_one())
        try:
            await asyncio.gather(*(self.ft_group(slot, state.ft, address)
                                   for slot in range(groups)))
        finally:
            await self.call(lighthouse_procs.stop())
            self.ft_job.kill()

    async def ft_group(self, slot: int, hosts: Any, lighthouse: str) -> None:
        from ft_training import ReplicaGroup

        generation = 0
        while self.running():
            procs = hosts.slice(hosts=slot).spawn_procs(per_host={"procs": 1})
            group = procs.spawn(f"group{slot}_g{generation}", ReplicaGroup, slot, lighthouse, slot)
            try:
                while self.running():
                    try:
                        result = await self.call(group.train_step.call_one())
                    except monarch.actor.ActorError as exc:  # torchft's own timeout: a
                        self.counts["ft_step_errors"] += 1  # peer died mid-quorum; redo
                        self.note_failure(f"ft group{slot}: {_last_line(exc)}")
                        continue
                    self.counts["ft_steps"] += bool(result["committed"])
                await self.call(procs.stop())
                return
            except SupervisionError as exc:  # its proc or its host died: replace the group
                self.counts["ft_replaced"] += 1
                self.note_failure(f"ft group{slot}: {_last_line(exc)}")
            generation += 1
            hosts = await asyncio.to_thread(lambda: self.ft_job.state(cached_path=None).ft)

    # -- chaos -----------------------------------------------------------------------------------
    async def chaos(self) -> None:
        await asyncio.sleep(self.rng.uniform(*self.every))
        while self.running():
            kind = self.rng.choice(self.kinds)
            pid = self.victim(kind)
            if pid is not None:
                self.faults.append({"kind": kind, "pid": pid, "t": time.time()})
                emit(fault={"kind": kind, "pid": pid})
                try:
                    if kind == "pause":
                        from monarch._host.worker import SILENCE_S

                        os.kill(pid, signal.SIGSTOP)
                        await asyncio.sleep(SILENCE_S + 2)
                        os.kill(pid, signal.SIGCONT)
                    else:
                        os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            await asyncio.sleep(self.rng.uniform(*self.every))

    def victim(self, kind: str) -> int | None:
        if kind == "proc":
            return self.rng.choice(self.counter_pids) if self.counter_pids else None
        if kind == "replica":
            return self.rng.choice(sorted(self.generator_pids)) if self.generator_pids else None
        workers = [s.pid for s in (self.ft_job._host_to_pid.values() if self.ft_job else ())
                   if _alive(s.pid)]
        return self.rng.choice(workers) if workers else None

    def note_failure(self, text: str) -> None:
        self.failures.append(text)

    async def progress(self) -> None:
        from monarch._controller._job import current_job

        census = os.environ.get("SOAK_CENSUS") == "1"
        tick = 0
        while self.running():
            await asyncio.sleep(10)
            tick += 1
            stats = current_job().store.statistics()
            emit(progress=dict(self.counts, faults=len(self.faults),
                               store_mb=round(sum(stats.held_bytes.values()) / 1e6, 1)))
            if census and tick % 6 == 0:
                emit(census=_census(stats))

    async def said(self, name: str, workload: Any) -> None:
        """Runs a workload; one that ends early by an error says so at once (its end is
        counted at the end): a long run's log shows when and why, not only that."""
        try:
            await workload
        except BaseException as exc:
            emit(workload_error={"workload": name, "minute": round(
                (time.monotonic() - self.started) / 60, 1), "error": f"{type(exc).__name__}: "
                f"{exc}"[-2000:]})
            raise

    async def run(self) -> None:
        monarch.actor.unhandled_fault_hook = lambda failure: self.note_failure(failure.name)
        from monarch._controller._job import current_job

        sentinel = this_host().spawn_procs(per_host={"procs": 1})
        emit(job={"job_id": current_job().job_id, "pid": os.getpid(),
                  "survivor": await self.call(sentinel.spawn("sentinel", Sentinel)
                                              .pid.call_one())})
        loops = [self.said("counters", self.counters()), self.said("rl", self.rl()),
                 self.said("ft", self.ft()), self.chaos(), self.progress()]
        results = await asyncio.gather(*loops, return_exceptions=True)
        await self.call(sentinel.stop())
        errors = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
        self.counts["errors"] += len(errors)
        emit(summary={"counts": self.counts, "acked": self.acked, "faults": self.faults,
                      "errors": errors, "failures": list(self.failures)[-20:]})


def _stacks_now(meshes: tuple[str, ...]) -> dict[str, str]:
    """py-spy dumps of the controller and of the procs of `meshes` (a workload failed: where
    was everything?)."""
    from monarch._controller._admin_actions import py_spy_dump
    from monarch._controller._job import current_job

    job = current_job()
    out = {"controller": _dump(py_spy_dump, os.getpid())}
    for mesh in job.supervisor.meshes.values():
        if mesh.name in meshes:
            for rank, proc in mesh.ranks.items():
                record = job.supervisor.procs.get(proc)
                if record is not None:
                    out[f"{mesh.name}[{rank}] {proc}"] = _dump(py_spy_dump, record.pid)
    return out


def _dump(py_spy_dump: Any, pid: Any) -> str:
    try:
        return py_spy_dump(pid)
    except Exception as exc:  # noqa: BLE001 - the dump is a diagnostic, never the failure
        return f"no dump: {exc}"


def _census(stats: Any) -> dict[str, Any]:
    """What the controller holds, for finding a slow growth (SOAK_CENSUS=1: once a minute,
    ~0.5 s with the GIL held): the store's parts in bytes and the most numerous object types."""
    import collections
    import gc

    import threading

    types = collections.Counter(type(o).__name__ for o in gc.get_objects())
    threads = collections.Counter(t.name.rstrip("0123456789_-") for t in threading.enumerate())
    out = {"held": {k: round(v / 1e6, 2) for k, v in stats.held_bytes.items()},
           "objects": sum(types.values()), "top": dict(types.most_common(15)),
           "threads": dict(threads)}
    if "pyarrow" in sys.modules:  # Arrow's own pool (mimalloc): outside glibc's malloc_trim
        pool = sys.modules["pyarrow"].default_memory_pool()
        out["arrow_mb"] = {"now": round(pool.bytes_allocated() / 1e6, 1),
                           "peak": round(pool.max_memory() / 1e6, 1)}
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--every", type=float, nargs=2, default=(20.0, 40.0))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deadline", type=float, default=DEADLINE_S)
    parser.add_argument("--faults", default="proc,replica,host,pause",
                        help="the kinds of fault to draw from, comma separated")
    args = parser.parse_args()
    globals()["DEADLINE_S"] = args.deadline
    asyncio.run(Soak(args.minutes, tuple(args.every), args.seed,
                     tuple(args.faults.split(","))).run())


if __name__ == "__main__":
    main()
