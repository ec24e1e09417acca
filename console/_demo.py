"""The demo workload `monarch demo` runs: an RL-style job with several meshes to look at.

    python -m monarch.console._demo [--control DIR] [--loggers N] [--run-for SECONDS]

Meshes: `trainers` (4 procs), `generators` and `rewards` (sharing 2 procs), `inspector` (1
proc); with `--loggers N`, N `chatty` actors (meshes of 8 on one proc mesh of 8) print lines
at `--log-rate` each; with `--grid N` (`monarch demo`: 64), `workers`, a `dp × tp` mesh of N
ranks stepping on their own, each setting the gauge `step`, one of them (`laggard_of(N)`)
slower than the rest: the console's grid (`v`, then `M`) shows it lagging, its grouped stacks
(`S`) show it in `slow_batch`.
Every step the controller trains, generates and scores on the live ranks; every 5 steps the
generators pull the trainers' weights (over `monarch.rdma` when it is there, so the console's
throughput view moves). Failures are handled the way a fault-tolerant script does: the root's
fault hook records them and the loop goes on with the survivors.

On demand (a file created in the control directory, as the console's demo keys do): `fail`
makes `trainers[3]` raise in a broadcast (a supervision event with a traceback), `breakpoint`
makes `inspector[0]` stop at a `breakpoint()`, `stop` ends the job.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from monarch.actor import Actor, current_rank, endpoint, this_host

try:  # the data plane, when this installation has it
    from monarch.rdma import RDMABuffer
except ImportError:  # pragma: no cover - depends on the installation
    RDMABuffer = None  # type: ignore[assignment,misc]

WEIGHTS = 4 << 20
"""Bytes of 'weights' the generators pull from a trainer every 5 steps."""


class Trainer(Actor):
    def __init__(self) -> None:
        self.rank = current_rank().rank
        self.weights = bytearray(os.urandom(1024) * (WEIGHTS // 1024))
        self.loss = 2.0 + self.rank * 0.1

    @endpoint
    def train(self, step: int) -> float:
        time.sleep(0.01 * (1 + self.rank))
        self.loss *= 0.98
        print("syncing gradients")
        print(f"step {step} loss {self.loss:.4f}")
        return self.loss

    @endpoint
    def weights_handle(self) -> Any:
        self.weights[0] = (self.weights[0] + 1) % 256
        if RDMABuffer is not None:
            return RDMABuffer(memoryview(self.weights))
        return bytes(self.weights[:1024])

    @endpoint
    def crash(self, step: int) -> None:
        raise RuntimeError(f"injected failure at step {step}: loss became NaN")


class Generator(Actor):
    def __init__(self) -> None:
        self.local = bytearray(WEIGHTS)
        self.version = 0

    @endpoint
    def generate(self, step: int) -> int:
        tokens = 100 + 7 * step % 50
        print(f"generated {tokens} tokens (weights v{self.version})")
        return tokens

    @endpoint
    def sync(self, handle: Any) -> int:
        if hasattr(handle, "read_into"):
            handle.read_into(memoryview(self.local)).get()
        self.version += 1
        print(f"weights updated to v{self.version}")
        return self.version


class Reward(Actor):
    @endpoint
    def score(self, tokens: int) -> float:
        return (tokens % 13) / 13.0


class Inspector(Actor):
    def __init__(self) -> None:
        self.seen = 0

    @endpoint
    def peek(self, step: int) -> int:
        """Called every step: `b` on inspector[0] makes it stop here."""
        self.seen += 1
        return self.seen

    @endpoint
    def inspect(self, step: int) -> int:
        secret = step * 7
        self.seen += 1
        breakpoint()  # the demo's breakpoint: attach from the console with `a`
        print(f"inspector resumed: secret={secret}")
        return secret


class Chatty(Actor):
    @endpoint
    async def chatter(self, seconds: float, per_s: float) -> int:
        import asyncio

        rank, count = current_rank().rank, 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            count += 1
            print(f"chatty rank {rank} line {count}")
            await asyncio.sleep(1.0 / per_s)
        return count


def batch(seconds: float) -> None:
    """One step's work (a span of its own: the console's timeline shows it)."""
    from monarch.telemetry import span

    with span("batch"):
        time.sleep(seconds)


def slow_batch(seconds: float) -> None:
    """The laggard's batch: half again as long as everyone else's."""
    from monarch.telemetry import span

    with span("slow_batch"):
        time.sleep(seconds * 1.5)


class Worker(Actor):
    """A rank of the `workers` grid: steps at its own pace and sets the gauge `step`."""

    def __init__(self, laggard: int) -> None:
        from monarch.telemetry import get_meter

        self.rank = current_rank().rank
        self.laggard = self.rank == laggard
        self.steps = 0
        self.gauge = get_meter().create_gauge("step", description="steps this rank has done")

    @endpoint
    def train_steps(self, steps: int, seconds: float, start_at: float = 0.0) -> int:
        """`steps` steps of `seconds` each (from `start_at`, epoch seconds: the first call
        starts every rank together, as a job in step does); returns the steps done so far."""
        time.sleep(max(start_at - time.time(), 0.0))
        for _ in range(steps):
            if self.laggard:
                slow_batch(seconds)
            else:
                batch(seconds)
            self.steps += 1
            self.gauge.set(self.steps, {"rank": str(self.rank)})
        return self.steps


def laggard_of(ranks: int) -> int:
    """The rank of the grid that lags (35 of 64: somewhere in the middle)."""
    return (ranks // 2 + 3) % ranks


def grid_shape(ranks: int) -> dict[str, int]:
    """`dp × tp` for `ranks` workers (tp 8 where it divides them)."""
    tp = 8 if ranks % 8 == 0 else ranks
    return {"dp": ranks // tp, "tp": tp}


class Demo:
    """The controller's loop: the meshes, the live ranks, the calls in flight."""

    def __init__(self, control: Path | None, loggers: int, log_rate: float,
                 grid: int = 0) -> None:
        self.control = control
        self.grid = grid
        self.failed: set[tuple[str, int]] = set()
        self.pending: dict[tuple[str, int], Any] = {}
        self.meshes: dict[str, tuple[Any, int]] = {}
        self.inspecting: Any = None
        self.stopping = False
        self.loggers, self.log_rate = loggers, log_rate
        self.proc_meshes: list[Any] = []
        self.stepping: dict[int, Any] = {}
        """The grid's calls in flight by rank (each a few seconds of steps)."""

    def on_failure(self, failure: Any) -> None:
        """The root's fault hook: note the failure, keep going with the survivors."""
        self.failed.add((failure.name, failure.rank if failure.rank is not None else -1))
        reason = (failure.reason or "").strip().splitlines()
        print(f"supervision: {failure.name}[{failure.rank}] failed: "
              f"{reason[-1] if reason else '?'}", file=sys.stderr, flush=True)

    def spawn(self) -> None:
        host = this_host()
        trainer_procs = host.spawn_procs(per_host={"gpus": 4})
        rollout_procs = host.spawn_procs(per_host={"gpus": 2})
        inspect_procs = host.spawn_procs(per_host={"gpus": 1})
        self.proc_meshes += [trainer_procs, rollout_procs, inspect_procs]
        self._add("trainers", trainer_procs.spawn("trainers", Trainer), 4)
        self._add("generators", rollout_procs.spawn("generators", Generator), 2)
        self._add("rewards", rollout_procs.spawn("rewards", Reward), 2)
        self._add("inspector", inspect_procs.spawn("inspector", Inspector), 1)
        if self.loggers:  # 8 actor meshes per proc mesh of 8 procs: 64 actors, 8 processes
            per = min(self.loggers, 8)
            chatty_procs = host.spawn_procs(per_host={"gpus": per})
            self.proc_meshes.append(chatty_procs)
            for group in range((self.loggers + per - 1) // per):
                self._add(f"chatty{group}", chatty_procs.spawn(f"chatty{group}", Chatty), per)
        if self.grid:
            grid_procs = host.spawn_procs(per_host=grid_shape(self.grid))
            self.proc_meshes.append(grid_procs)
            self.workers = grid_procs.spawn("workers", Worker, laggard_of(self.grid))
            self._add("workers", self.workers, self.grid)

    def _add(self, name: str, mesh: Any, size: int) -> None:
        self.meshes[name] = (mesh, size)

    def live(self, name: str) -> list[int]:
        mesh, size = self.meshes[name]
        return [r for r in range(size) if (name, r) not in self.failed
                and (name, -1) not in self.failed]

    def submit(self, name: str, method: str, *args: Any) -> None:
        """Calls `method` on every live rank of `name` that has no call in flight."""
        mesh, _ = self.meshes[name]
        for rank in self.live(name):
            if (name, rank) not in self.pending:
                self.pending[(name, rank)] = getattr(mesh.slice(gpus=rank), method).call_one(
                    *args)

    def settle(self, wait: float) -> dict[tuple[str, int], Any]:
        """Waits up to `wait` s for the calls in flight; returns the results that came."""
        deadline = time.monotonic() + wait
        results = {}
        for key, future in list(self.pending.items()):
            try:
                results[key] = future.get(timeout=max(deadline - time.monotonic(), 0.001))
            except TimeoutError:
                continue  # a paused or slow actor: its call stays in flight
            except Exception as exc:  # noqa: BLE001 - a failed rank: the loop goes on
                if type(exc).__name__ == "SupervisionError":
                    self.failed.add(key)  # failed or stopped: call it no more
                print(f"{key[0]}[{key[1]}]: {type(exc).__name__}: "
                      f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
                      file=sys.stderr, flush=True)
            del self.pending[key]
        return results

    def step(self, step: int) -> None:
        if self.grid:
            self.step_workers()
        self.submit("trainers", "train", step)
        self.submit("generators", "generate", step)
        self.submit("rewards", "score", 100 + step)
        self.submit("inspector", "peek", step)
        results = self.settle(1.0)
        losses = [v for (name, _), v in results.items() if name == "trainers"]
        if losses:
            print(f"controller: step {step} mean loss {sum(losses) / len(losses):.4f} "
                  f"({len(losses)} trainers)", flush=True)
        if step % 5 == 0:
            self.sync_weights()
        self.poll_control(step)

    def sync_weights(self) -> None:
        live = self.live("trainers")
        if not live or ("trainers", live[0]) in self.pending:
            return
        trainers, _ = self.meshes["trainers"]
        try:
            handle = trainers.slice(gpus=live[0]).weights_handle.call_one().get(timeout=5)
        except Exception as exc:  # noqa: BLE001 - the trainer failed meanwhile
            print(f"weight sync skipped: {type(exc).__name__}", file=sys.stderr)
            return
        self.submit("generators", "sync", handle)

    def poll_control(self, step: int) -> None:
        if self.control is None:
            return
        for name in ("fail", "breakpoint", "stop"):
            flag = self.control / name
            if flag.exists():
                flag.unlink()
                getattr(self, f"on_{name}")(step)

    def on_fail(self, step: int) -> None:
        if 3 in self.live("trainers"):
            print(f"controller: injecting a failure into trainers[3] at step {step}", flush=True)
            self.meshes["trainers"][0].slice(gpus=3).crash.broadcast(step)

    def on_breakpoint(self, step: int) -> None:
        if self.inspecting is None or self.inspecting.done():
            print(f"controller: inspector[0] will stop at a breakpoint (step {step})", flush=True)
            self.inspecting = self.meshes["inspector"][0].inspect.call_one(step)

    def on_stop(self, step: int) -> None:
        self.stopping = True

    def on_sigterm(self, *_: Any) -> None:
        """The first SIGTERM stops the loop (and the procs); a second one ends at once (the
        procs follow: they die with their controller)."""
        if self.stopping:
            os._exit(143)
        self.stopping = True

    def step_workers(self) -> None:
        """Gives every live rank of the grid its next 10 steps once its last ones are done (a
        call of 2 s, 3 s for the laggard: handlers end well before they count as stalled);
        the first calls start together."""
        start_at = time.time() + 2.0 if not self.stepping else 0.0
        shape = grid_shape(self.grid)
        for rank in self.live("workers"):
            call = self.stepping.get(rank)
            if call is not None and not call.done():
                continue
            if call is not None and call.exception(timeout=0) is not None:
                self.failed.add(("workers", rank))  # killed or stopped: step it no more
                continue
            point = {"dp": rank // shape["tp"], "tp": rank % shape["tp"]}
            self.stepping[rank] = self.workers.slice(**point).train_steps.call_one(
                10, 0.2, start_at)

    def shutdown(self) -> None:
        """Stops every proc (a paused or busy actor does not hold the job up for long)."""
        stops = [procs.stop() for procs in self.proc_meshes]
        for stop in stops:
            try:
                stop.get(timeout=15)
            except Exception as exc:  # noqa: BLE001 - already gone, or did not stop in time
                print(f"demo: stop: {type(exc).__name__}: {exc}", file=sys.stderr)

    def chatter(self, seconds: float) -> None:
        for name in [n for n in self.meshes if n.startswith("chatty")]:
            mesh, _ = self.meshes[name]
            self.pending[(name, -2)] = mesh.chatter.call(seconds, self.log_rate)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--control", type=Path, help="directory watched for fail/breakpoint/stop")
    parser.add_argument("--loggers", type=int, default=0, help="chatty actors printing lines")
    parser.add_argument("--log-rate", type=float, default=10.0, help="lines/s per chatty actor")
    parser.add_argument("--run-for", type=float, default=0.0, help="seconds (0: until stopped)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between steps")
    parser.add_argument("--grid", type=int, default=0,
                        help="ranks of the `workers` mesh (dp x tp), one of them lagging")
    args = parser.parse_args(argv)
    if args.grid < 0 or args.grid == 1:
        parser.error("--grid takes 0 (no grid) or 2 ranks or more (one of them lags)")
    import monarch.actor

    demo = Demo(args.control, args.loggers, args.log_rate, args.grid)
    monarch.actor.unhandled_fault_hook = demo.on_failure
    signal.signal(signal.SIGTERM, demo.on_sigterm)
    demo.spawn()
    if args.loggers:
        demo.chatter(args.run_for or 24 * 3600.0)
    print(f"demo: running ({', '.join(demo.meshes)}); pid {os.getpid()}", flush=True)
    started, step = time.monotonic(), 0
    try:
        while not demo.stopping and not (args.run_for and
                                         time.monotonic() - started > args.run_for):
            step += 1
            begun = time.monotonic()
            demo.step(step)
            time.sleep(max(args.interval - (time.monotonic() - begun), 0.0))
    except KeyboardInterrupt:
        pass
    print(f"demo: done after {step} steps; stopping the procs", flush=True)
    demo.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
