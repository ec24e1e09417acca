"""Speed benchmark of the public `monarch.actor` API (MISSION §8).

The same file runs unchanged under torchmonarch 0.7.0 and under pymonarch: it imports nothing but
`monarch.actor` (plus torch and the standard library), so whichever `monarch` the interpreter finds
is the one measured. `bench/run.py` runs it under both and compares.

Output: one JSON object on one line of stdout, metric name -> number, the unit in the name
(`_us`, `_s`, `_per_s`, `_MBps` = 1e6 bytes/s, `_GBps` = 1e9 bytes/s). Two extra keys start with
an underscore: `_meta` (what ran) and `_errors` (bench name -> error text, for benches that failed;
the others still report). Diagnostics go to stderr.

    python bench/bench_api.py [--quick] [--only spawn,call_one,...] [--list]

Adding a row: write a function `def bench_x(rig: Rig) -> dict[str, float]` below the others and
register it with `@bench("x")`; it gets the shared 4-actor mesh through `rig`, sizes its loops
with `rig.n(full, quick)` and bounds its time with `rig.budget_s` (see `timed_loop`). A row not
written yet can be registered with `planned=True` (listed, never run).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


def _leave_project_checkout() -> None:
    """Run from a neutral directory when the cwd holds another `monarch` package.

    Monarch starts its procs with `python -m ...`, which puts the cwd first on `sys.path`: run
    from this repository's root, the reference's procs would import our `monarch`. Only the cwd
    changes; the controller keeps the `monarch` it already found.
    """
    if os.path.isdir(os.path.join(os.getcwd(), "monarch")):
        import monarch

        if not os.path.abspath(monarch.__file__).startswith(os.getcwd() + os.sep):
            os.chdir(tempfile.gettempdir())


from monarch.actor import Actor, endpoint, this_host

_leave_project_checkout()

KiB = 1024
MiB = 1024 * KiB
GPUS = 4
CALL_TIMEOUT_S = 60.0  # one .get() never waits longer; a hung call fails its bench, not the run


# ---------------------------------------------------------------------------------------------
# The measured actor: sync endpoints, the most common kind.


class BenchActor(Actor):
    """Does as little as possible, so the runtime's cost is what gets measured."""

    @endpoint
    def noop(self) -> None:
        return None

    @endpoint
    def nbytes(self, data: Any) -> int:
        """One-way transfers: only the size comes back."""
        return data.nbytes if hasattr(data, "nbytes") else len(data)

    @endpoint
    def echo(self, data: Any) -> Any:
        return data

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def say(self, n: int) -> None:
        """A log line per call (the job's logs flow to the controller as it runs)."""
        print(f"bench line {n}", flush=True)


# ---------------------------------------------------------------------------------------------
# The rig: the shared mesh and the loop helpers every bench uses.


@dataclass
class Rig:
    """What a bench gets: the 4-actor mesh, its size-1 slice, and the run's size settings."""

    quick: bool
    budget_s: float  # soft time bound of one bench's measuring loop
    procs: Any = None
    mesh: Any = None
    one: Any = None
    spawn_s: float | None = None  # set by the spawn that created the mesh

    def n(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def ensure_mesh(self) -> None:
        """Spawns the procs and actors, timing spawn_procs + spawn + first call answer."""
        start = time.perf_counter()
        self.procs = this_host().spawn_procs(per_host={"gpus": GPUS})
        self.mesh = self.procs.spawn("bench", BenchActor)
        self.mesh.noop.call().get(timeout=CALL_TIMEOUT_S)
        self.spawn_s = time.perf_counter() - start
        self.one = self.mesh.slice(gpus=0)

    def stop(self) -> None:
        if self.procs is not None:
            procs, self.procs, self.mesh, self.one = self.procs, None, None, None
            procs.stop().get(timeout=30)


def timed_loop(fn: Callable[[], object], n: int, budget_s: float) -> list[float]:
    """Runs `fn` up to `n` times, stopping early once `budget_s` has passed; seconds per call."""
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    for _ in range(n):
        start = time.perf_counter()
        fn()
        end = time.perf_counter()
        times.append(end - start)
        if end > deadline:
            break
    return times


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The table of benches. Order matters: `spawn` first, so it times a cold spawn.


@dataclass(frozen=True)
class BenchSpec:
    name: str
    fn: Callable[[Rig], dict[str, float]]
    planned: bool  # an extension point not written yet: listed, never run
    child: bool = False  # measured in another row's child processes: runs only when named
    big: bool = False  # a job of a thousand actors (minutes, GBs): runs only when named

    @property
    def doc(self) -> str:
        return (self.fn.__doc__ or "").strip().splitlines()[0]


BENCHES: dict[str, BenchSpec] = {}


def bench(name: str, *, planned: bool = False, child: bool = False,
          big: bool = False) -> Callable:
    def register(fn: Callable[[Rig], dict[str, float]]) -> Callable[[Rig], dict[str, float]]:
        BENCHES[name] = BenchSpec(name, fn, planned, child, big)
        return fn

    return register


@bench("spawn")
def bench_spawn(rig: Rig) -> dict[str, float]:
    """spawn_procs(gpus=4) + spawn + first call() answer, cold, in seconds (timed by main)."""
    return {"spawn_4procs_first_answer_s": rig.spawn_s}


@bench("call_one")
def bench_call_one(rig: Rig) -> dict[str, float]:
    """Noop call_one round trip on a size-1 slice, after warm-up: p50 and p99 in µs."""

    def call() -> None:
        rig.one.noop.call_one().get(timeout=CALL_TIMEOUT_S)

    timed_loop(call, rig.n(200, 20), rig.budget_s)
    times = timed_loop(call, rig.n(2000, 200), rig.budget_s)
    return {
        "call_one_p50_us": statistics.median(times) * 1e6,
        "call_one_p99_us": percentile(times, 99) * 1e6,
    }


# The machine's floor for one round trip between two processes, measured in the same run as
# call_one: a kernel socket (two process wake-ups), and zmq + msgpack as our transport uses
# them (zmq's I/O threads add four thread wake-ups per round trip). Child echo servers are
# plain Python started with subprocess; the zmq row needs pyzmq and msgpack (ours has them).

_ECHO_SOCKET = """
import socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
while True:
    data = sock.recv(256)
    if not data:
        break
    sock.sendall(data)
"""

_ECHO_ZMQ = """
import sys, msgpack, zmq
ctx = zmq.Context()
inbox, outbox = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
inbox.bind(sys.argv[1])
outbox.connect(sys.argv[2])
while True:
    msg = msgpack.unpackb(inbox.recv())
    if msg is None:
        break
    outbox.send(msgpack.packb([0, msg[1], 0]))
"""


def _floor_socket(rig: Rig) -> float:
    import socket

    mine, theirs = socket.socketpair()
    child = subprocess.Popen([sys.executable, "-c", _ECHO_SOCKET, str(theirs.fileno())],
                             pass_fds=(theirs.fileno(),))
    theirs.close()
    try:
        def call() -> None:
            mine.sendall(b"x" * 48)
            mine.recv(256)

        timed_loop(call, rig.n(200, 20), rig.budget_s)
        return statistics.median(timed_loop(call, rig.n(2000, 200), rig.budget_s))
    finally:
        mine.close()
        child.wait(timeout=CALL_TIMEOUT_S)


def _floor_zmq(rig: Rig) -> float | None:
    try:
        import msgpack
        import zmq
    except ImportError:
        return None
    folder = tempfile.mkdtemp(prefix="floor-")
    there, back = f"ipc://{folder}/there", f"ipc://{folder}/back"
    ctx = zmq.Context()
    outbox, inbox = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    inbox.bind(back)
    child = subprocess.Popen([sys.executable, "-c", _ECHO_ZMQ, there, back])
    outbox.connect(there)
    poller = zmq.Poller()
    poller.register(inbox, zmq.POLLIN)
    try:
        def call() -> None:
            outbox.send(msgpack.packb([1, 7, "noop", None]))
            if not poller.poll(CALL_TIMEOUT_S * 1000):
                raise TimeoutError("the zmq echo child did not answer")
            msgpack.unpackb(inbox.recv())

        timed_loop(call, rig.n(200, 20), rig.budget_s)
        return statistics.median(timed_loop(call, rig.n(2000, 200), rig.budget_s))
    finally:
        outbox.send(msgpack.packb(None))
        child.wait(timeout=CALL_TIMEOUT_S)
        ctx.destroy(linger=0)
        shutil.rmtree(folder, ignore_errors=True)


@bench("floor")
def bench_floor(rig: Rig) -> dict[str, float]:
    """Round trip between two plain Python processes, p50 in µs: a socketpair, and zmq PUSH/PULL
    over ipc with msgpack (where pyzmq and msgpack import). The machine's scale for call_one."""
    rows = {"rpc_floor_socketpair_p50_us": _floor_socket(rig) * 1e6}
    zmq_s = _floor_zmq(rig)
    if zmq_s is not None:
        rows["rpc_floor_zmq_p50_us"] = zmq_s * 1e6
    return rows


@bench("call4")
def bench_call4(rig: Rig) -> dict[str, float]:
    """Noop call() on all 4 actors until every answer is in: p50 and p99 in µs."""

    def call() -> None:
        rig.mesh.noop.call().get(timeout=CALL_TIMEOUT_S)

    timed_loop(call, rig.n(100, 10), rig.budget_s)
    times = timed_loop(call, rig.n(1000, 100), rig.budget_s)
    return {
        "call_4actors_p50_us": statistics.median(times) * 1e6,
        "call_4actors_p99_us": percentile(times, 99) * 1e6,
    }


@bench("pipelined")
def bench_pipelined(rig: Rig) -> dict[str, float]:
    """K call_one futures issued back to back, then all got: calls per second (median burst)."""
    k = rig.n(1000, 200)

    def burst() -> None:
        futures = [rig.one.noop.call_one() for _ in range(k)]
        for fut in futures:
            fut.get(timeout=CALL_TIMEOUT_S)

    burst()  # warm-up
    times = timed_loop(burst, rig.n(5, 2), rig.budget_s)
    return {"pipelined_call_one_per_s": k / statistics.median(times)}


@bench("broadcast")
def bench_broadcast(rig: Rig) -> dict[str, float]:
    """N broadcasts to 4 actors, drained by one call(): casts per second (median burst)."""
    n = rig.n(2000, 200)

    def burst() -> None:
        for _ in range(n):
            rig.mesh.noop.broadcast()
        rig.mesh.noop.call().get(timeout=CALL_TIMEOUT_S)  # FIFO per actor: arrives last

    burst()  # warm-up
    times = timed_loop(burst, rig.n(5, 2), rig.budget_s)
    return {"broadcast_4actors_casts_per_s": n / statistics.median(times)}


def _call_one(ep: Any, payload: Any) -> None:
    ep.call_one(payload).get(timeout=CALL_TIMEOUT_S)


def transfer_rates(rig: Rig, payload: Any, size: int, label: str, scale: float) -> dict[str, float]:
    """One-way (`nbytes`) and echo round trips of `payload` on the size-1 slice.

    Rate = payload size / median round-trip time, for both; an echo moves the payload twice.
    """
    rows: dict[str, float] = {}
    unit = "MBps" if scale == 1e6 else "GBps"
    iters = rig.n(200, 20) if size <= MiB else rig.n(8, 2)
    for kind, ep in (("oneway", rig.one.nbytes), ("echo", rig.one.echo)):
        call = functools.partial(_call_one, ep, payload)
        # warm-up: a payload of many MiB is slow its first two times on either side (the
        # allocator and the page cache settle: 64 MiB took 80-240 ms, then 20-30 ms here)
        timed_loop(call, max(1 if size <= MiB else 3, iters // 10), rig.budget_s)
        times = timed_loop(call, iters, rig.budget_s)
        rows[f"{label}_{kind}_{unit}"] = size / statistics.median(times) / scale
    return rows


@bench("bytes")
def bench_bytes(rig: Rig) -> dict[str, float]:
    """bytes of 1 KiB, 1 MiB, 64 MiB one-way and echo: MB/s (1 KiB) and GB/s."""
    rows: dict[str, float] = {}
    for size, label, scale in ((KiB, "1KiB", 1e6), (MiB, "1MiB", 1e9), (64 * MiB, "64MiB", 1e9)):
        rows.update(transfer_rates(rig, os.urandom(size), size, f"bytes_{label}", scale))
    return rows


@bench("tensor")
def bench_tensor(rig: Rig) -> dict[str, float]:
    """64 MiB float32 CPU torch tensor one-way and echo: GB/s."""
    import torch

    tensor = torch.rand(16 * MiB, dtype=torch.float32)
    return transfer_rates(rig, tensor, 64 * MiB, "tensor_64MiB", 1e9)


# ---------------------------------------------------------------------------------------------
# Rows that kill or reconfigure things use their own procs (spawned in the bench, stopped in a
# `finally`), never `rig.mesh`, which the other rows share. A row not written yet can be
# registered with `planned=True`: listed by --list, never run.


class DeathVictim(Actor):
    @endpoint
    def ok(self) -> int:
        return 1

    @endpoint
    def die(self) -> None:
        os._exit(1)


class DeathOwner(Actor):
    """Owns a 1-proc mesh; times how its death reaches a pending call and __supervise__."""

    def __init__(self) -> None:
        self.supervised_at = None
        self.procs = this_host().spawn_procs(per_host={"gpus": 1})
        self.victim = self.procs.spawn("victim", DeathVictim)
        self.victim.ok.call_one().get(timeout=CALL_TIMEOUT_S)

    def __supervise__(self, failure: object) -> bool:
        if self.supervised_at is None:
            self.supervised_at = time.time()
        return True

    @endpoint
    def kill(self) -> list:
        killed_at = time.time()
        self.victim.die.broadcast()
        try:
            self.victim.ok.call_one().get(timeout=CALL_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - the error is the point
            pass
        return [killed_at, time.time()]

    @endpoint
    def supervised(self) -> object:
        return self.supervised_at


@bench("death")
def bench_death(rig: Rig) -> dict[str, float]:
    """Proc death -> pending call's error and -> owner's __supervise__: death_to_*_ms."""
    import monarch.actor

    monarch.actor.unhandled_fault_hook = lambda failure: None  # failures here are expected
    to_error, to_supervise = [], []
    for _ in range(rig.n(3, 1)):
        procs = this_host().spawn_procs(per_host={"gpus": 1})
        owner = procs.spawn("death_owner", DeathOwner)
        killed_at, errored_at = owner.kill.call_one().get(timeout=CALL_TIMEOUT_S)
        deadline = time.time() + CALL_TIMEOUT_S
        supervised_at = None
        while supervised_at is None and time.time() < deadline:
            supervised_at = owner.supervised.call_one().get(timeout=CALL_TIMEOUT_S)
            if supervised_at is None:
                time.sleep(0.005)
        to_error.append((errored_at - killed_at) * 1e3)
        if supervised_at is not None:
            to_supervise.append((supervised_at - killed_at) * 1e3)
        procs.stop().get(timeout=30)
    out = {"death_to_error_ms": statistics.median(to_error)}
    if to_supervise:
        out["death_to_supervise_ms"] = statistics.median(to_supervise)
    return out


BLOCK_CALLS = 1000
"""call_one calls per block of the telemetry row (~0.15 s)."""


@bench("call_one_blocks", child=True)
def bench_call_one_blocks(rig: Rig) -> dict[str, float]:
    """Noop call_one p50 of blocks of calls asked for on stdin: the telemetry row's child."""

    def call() -> None:
        rig.one.noop.call_one().get(timeout=CALL_TIMEOUT_S)

    warm_until = time.perf_counter() + (0.2 if rig.quick else 1.0)
    while time.perf_counter() < warm_until:  # past the job's start: imports, first passes
        call()
    print("ready", flush=True)
    blocks = 0
    for line in sys.stdin:  # a number of calls per line; 0 or the end: done
        count = int(line)
        if count <= 0:
            break
        times = timed_loop(call, count, rig.budget_s)
        print(statistics.median(times) * 1e6, flush=True)
        blocks += 1
    return {"call_one_blocks": blocks}


class _Side:
    """One child job of the telemetry row, answering blocks of calls on request."""

    def __init__(self, flag: str, quick: bool) -> None:
        args = [sys.executable, os.path.abspath(__file__), "--only", "call_one_blocks"]
        if quick:
            args.append("--quick")
        self.errors = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errors, text=True,
                                     env=dict(os.environ, MONARCH_TELEMETRY=flag))

    def line(self, timeout: float) -> str:
        import select

        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        text = self.proc.stdout.readline() if ready else ""
        if not text:
            self.errors.seek(0)
            raise RuntimeError(f"the telemetry row's child said nothing in {timeout} s: "
                               f"{self.errors.read()[-2000:]}")
        return text.strip()

    def block(self, count: int) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{count}\n")
        self.proc.stdin.flush()
        return float(self.line(CALL_TIMEOUT_S))

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write("0\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.errors.close()


@bench("telemetry")
def bench_telemetry(rig: Rig) -> dict[str, float]:
    """call_one p50 with telemetry on vs off (pymonarch's MONARCH_TELEMETRY): overhead_pct.

    The switch is read when a job starts, so each side is a child job of this script
    (`call_one_blocks`), both alive at once and both past their start (imports, the first
    history pass). They take turns: a block of calls on one, then on the other, in
    alternating order, 40 times. This VM's speed drifts by 10-30 % over seconds, which
    separate runs of each side mistake for telemetry; two blocks back to back see the same
    drift. The overhead is the median of the pairs' differences; the p50 rows each side's
    median. Skipped for implementations without the switch.
    """
    if not (_distribution_version() or "").startswith("pymonarch"):
        log("telemetry: only pymonarch has a telemetry switch; skipped")
        return {}
    sides: dict[str, _Side] = {}
    p50: dict[str, list[float]] = {"1": [], "0": []}
    try:
        for flag in ("1", "0"):  # in the try: a side that failed to start stops the other
            sides[flag] = _Side(flag, rig.quick)
        for side in sides.values():
            side.line(CALL_TIMEOUT_S * 2)  # "ready"
        for block in range(rig.n(40, 4)):
            for flag in (("1", "0") if block % 2 == 0 else ("0", "1")):
                p50[flag].append(sides[flag].block(rig.n(BLOCK_CALLS, 200)))
    finally:
        for side in sides.values():
            side.close()
    overheads = [(on - off) / off * 100.0 for on, off in zip(p50["1"], p50["0"])]
    return {"call_one_p50_telemetry_on_us": statistics.median(p50["1"]),
            "call_one_p50_telemetry_off_us": statistics.median(p50["0"]),
            "telemetry_overhead_pct": statistics.median(overheads)}


class RdmaOwner(Actor):
    """Owns the buffers of the data-plane rows: one touched uint8 tensor per size."""

    def __init__(self) -> None:
        self.tensors: dict[int, Any] = {}

    @endpoint
    def buffer(self, nbytes: int) -> Any:
        import torch

        from monarch.rdma import RDMABuffer

        tensor = self.tensors.setdefault(nbytes, torch.ones(nbytes, dtype=torch.uint8))
        return RDMABuffer(tensor)


@contextlib.contextmanager
def rdma_transport(transport: str | None) -> Iterator[None]:
    """Forces pymonarch's data-plane path in this process (the initiator picks it); Monarch
    ignores the variable (its only backend on a CPU-only host is TCP anyway)."""
    saved = os.environ.get("MONARCH_RDMA_TRANSPORT")
    if transport is not None:
        os.environ["MONARCH_RDMA_TRANSPORT"] = transport
    try:
        yield
    finally:
        os.environ.pop("MONARCH_RDMA_TRANSPORT", None)
        if saved is not None:
            os.environ["MONARCH_RDMA_TRANSPORT"] = saved


def memcpy_rates(rig: Rig) -> dict[str, float]:
    """One-thread memcpy (ctypes.memmove) between two touched tensors of this process."""
    import ctypes

    import torch

    rows = {}
    for size, label in ((MiB, "1MiB"), (256 * MiB, "256MiB")):
        src, dst = torch.ones(size, dtype=torch.uint8), torch.zeros(size, dtype=torch.uint8)
        iters = rig.n(200, 20) if size <= MiB else rig.n(10, 3)
        copy = functools.partial(ctypes.memmove, dst.data_ptr(), src.data_ptr(), size)
        timed_loop(copy, max(1, iters // 10), rig.budget_s)
        rows[f"memcpy_{label}_GBps"] = size / statistics.median(
            timed_loop(copy, iters, rig.budget_s)) / 1e9
    return rows


@bench("rdma")
def bench_rdma(rig: Rig) -> dict[str, float]:
    """RDMABuffer read_into/write_from, 1 MiB and 256 MiB, controller <-> one proc: GB/s.

    `rdma_{read,write}_*`: the default path between two processes on one host;
    `rdma_tcp_*`: the cross-host path (TCP) forced on loopback; `memcpy_*`: the same sizes
    copied inside one process, for scale. The buffer is owned by a proc; the controller reads
    into / writes from a touched tensor of the same size (warm-up transfers not counted).
    """
    import torch

    rows = memcpy_rates(rig)
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        owner = procs.spawn("rdma_owner", RdmaOwner)
        for prefix, transport in (("rdma", None), ("rdma_tcp", "tcp")):
            with rdma_transport(transport):
                for size, label in ((MiB, "1MiB"), (256 * MiB, "256MiB")):
                    buffer = owner.buffer.call_one(size).get(timeout=CALL_TIMEOUT_S)
                    local = torch.ones(size, dtype=torch.uint8)
                    iters = rig.n(100, 10) if size <= MiB else rig.n(6, 2)
                    for op in ("read", "write"):
                        move = buffer.read_into if op == "read" else buffer.write_from
                        call = functools.partial(_transfer, move, local)
                        timed_loop(call, max(1, iters // 5), rig.budget_s)  # warm-up
                        times = timed_loop(call, iters, rig.budget_s)
                        rows[f"{prefix}_{op}_{label}_GBps"] = size / statistics.median(times) / 1e9
                    buffer.drop().get(timeout=CALL_TIMEOUT_S)
    finally:
        procs.stop().get(timeout=30)
    return rows


def _transfer(move: Callable[..., Any], local: Any) -> None:
    move(local, timeout=60).get(timeout=CALL_TIMEOUT_S)


WEIGHTS_TENSORS = 8  # the bench's state dict: 8 float32 tensors of 32 MiB


def _weights_state_dict(nbytes: int, fill: float) -> dict[str, Any]:
    import torch

    n = nbytes // WEIGHTS_TENSORS // 4
    return {f"layer{i}.weight": torch.full((n,), fill) for i in range(WEIGHTS_TENSORS)}


class WeightsTrainer(Actor):
    """Publishes its state dict with `monarch.weights.put_state_dict`."""

    def __init__(self, nbytes: int) -> None:
        self.state = _weights_state_dict(nbytes, 1.0)

    @endpoint
    def put(self) -> int:
        from monarch.weights import put_state_dict

        return put_state_dict(self.state, "bench").get(timeout=CALL_TIMEOUT_S)


class WeightsGenerator(Actor):
    """Reads the trainer's state dict into its own tensors; answers its read time."""

    def __init__(self, nbytes: int) -> None:
        self.state = _weights_state_dict(nbytes, 0.0)

    @endpoint
    def get(self) -> float:
        from monarch.weights import get_state_dict

        start = time.perf_counter()
        get_state_dict("bench", into=self.state).get(timeout=CALL_TIMEOUT_S)
        return time.perf_counter() - start


@bench("weights")
def bench_weights(rig: Rig) -> dict[str, float]:
    """Weight sync (monarch.weights) of a 256 MiB state dict, 1 trainer -> 4 generators: GB/s.

    `weights_sync_256MiB_4gen_GBps`: the bytes the 4 generators receive (4 x 256 MiB) over the
    time from the trainer's `put_state_dict` call to the last generator's `get_state_dict`
    answer; `weights_get_256MiB_GBps`: one generator's read rate (median over them and the
    rounds, reads running 4 at once); `memcpy_*`: one-thread memcpy, for scale. pymonarch only.
    """
    if not (_distribution_version() or "").startswith("pymonarch"):
        log("weights: monarch.weights is pymonarch's; skipped")
        return {}
    size = 256 * MiB
    rows = memcpy_rates(rig)
    procs = this_host().spawn_procs(per_host={"gpus": 5})
    try:
        trainer = procs.slice(gpus=0).spawn("weights_trainer", WeightsTrainer, size)
        generators = procs.slice(gpus=slice(1, 5)).spawn("weights_generators", WeightsGenerator,
                                                          size)
        syncs, reads = [], []
        for round_ in range(1 + rig.n(4, 1)):  # the first round is a warm-up
            start = time.perf_counter()
            trainer.put.call_one().get(timeout=CALL_TIMEOUT_S)
            got = generators.get.call().get(timeout=CALL_TIMEOUT_S)
            elapsed = time.perf_counter() - start
            if round_:
                syncs.append(4 * size / elapsed / 1e9)
                reads += [size / seconds / 1e9 for _, seconds in got.items()]
        rows["weights_sync_256MiB_4gen_GBps"] = statistics.median(syncs)
        rows["weights_get_256MiB_GBps"] = statistics.median(reads)
    finally:
        procs.stop().get(timeout=30)
    return rows


class GlooRank(Actor):
    """One rank of the baseline: torch.distributed with gloo, called directly."""

    @endpoint
    def allreduce_s(self, path: str, rank: int, size: int, nbytes: int, iters: int) -> list:
        import datetime

        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo", store=dist.FileStore(path, size), rank=rank,
                                world_size=size, timeout=datetime.timedelta(seconds=120))
        try:
            tensor = torch.ones(nbytes // 4)
            dist.all_reduce(tensor)  # warm-up: connections, buffers
            times = []
            for _ in range(iters):
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(tensor)
                times.append(time.perf_counter() - start)
            return times
        finally:
            dist.destroy_process_group()


@bench("tensors")
def bench_tensors(rig: Rig) -> dict[str, float]:
    """The tensor engine (`procs.activate()`): a chain of small ops (ops/s, recorded and run),
    and a 64 MiB float32 `reduce_("gpus", "sum")` over the 4 procs (GB/s), beside
    `torch.distributed` gloo all_reduce of 64 MiB called directly from 4 actors."""
    import torch

    import monarch

    rows: dict[str, float] = {}
    with rig.procs.activate():
        x = torch.ones(4)
        monarch.inspect(x)  # the engine's workers are up

        def chain(n: int) -> None:
            y = x
            for _ in range(n):
                y = y + 1
            monarch.inspect(y)

        chain(rig.n(500, 200))  # warm-up: signatures cached, batches flowing
        n = rig.n(20000, 3000)
        rows["tensor_chain_ops_per_s"] = n / statistics.median(
            timed_loop(functools.partial(chain, n), rig.n(3, 1), rig.budget_s))
        if (_distribution_version() or "").startswith("pymonarch"):
            big = torch.ones(64 * MiB // 4)

            def reduce() -> None:
                big.reduce_("gpus", "sum")
                monarch.inspect(big[:1])

            reduce()  # warm-up: the process group of the 4 procs
            rows["tensor_reduce_64MiB_4procs_GBps"] = 64 * MiB / statistics.median(
                timed_loop(reduce, rig.n(5, 2), rig.budget_s)) / 1e9
        else:
            log("tensors: Monarch's tensor engine reduces only CUDA tensors; reduce row skipped")
    rows["gloo_allreduce_64MiB_4procs_GBps"] = _gloo_allreduce(rig, 64 * MiB)
    return rows


def _gloo_allreduce(rig: Rig, nbytes: int) -> float:
    """64 MiB all_reduce GB/s of torch.distributed gloo on 4 fresh procs (slowest rank)."""
    import shutil

    folder = tempfile.mkdtemp(prefix="bench-gloo-")
    procs = this_host().spawn_procs(per_host={"gpus": GPUS})
    try:
        ranks = procs.spawn("gloo_rank", GlooRank)
        futures = [ranks.slice(gpus=r).allreduce_s.call_one(
            os.path.join(folder, "store"), r, GPUS, nbytes, rig.n(5, 2)) for r in range(GPUS)]
        per_rank = [f.get(timeout=CALL_TIMEOUT_S * 3) for f in futures]
    finally:
        procs.stop().get(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
    slowest = [max(times) for times in zip(*per_rank)]
    return nbytes / statistics.median(slowest) / 1e9


# ---------------------------------------------------------------------------------------------
# How the costs grow with the mesh: 4 (the shared mesh), 16 and 32 actors (one per proc), and 64
# actors (four meshes on the 16 procs, called together). The 4-actor figures of `call4` and
# `broadcast` are the baseline; run.py prints each figure's growth from 4 to 64.


class _Group:
    """Several actor meshes called as one: `call` issues every mesh's call, then gets them."""

    def __init__(self, meshes: list[Any]) -> None:
        self.meshes = meshes

    def call(self) -> None:
        futures = [mesh.noop.call() for mesh in self.meshes]
        for fut in futures:
            fut.get(timeout=CALL_TIMEOUT_S)

    def call_printing(self) -> None:
        """A call to every actor, each printing a line."""
        futures = [mesh.say.call(0) for mesh in self.meshes]
        for fut in futures:
            fut.get(timeout=CALL_TIMEOUT_S)

    def broadcast(self) -> None:
        for mesh in self.meshes:
            mesh.noop.broadcast()


def _scale_rows(rig: Rig, group: _Group, actors: int) -> dict[str, float]:
    """call p50, casts per second and controller CPU seconds per 1,000 casts on `actors`."""
    suffix = f"{actors}actors"
    return {**_call_rows(rig, group, suffix), **_burst_rows(rig, group, suffix)}


def _call_rows(rig: Rig, group: _Group, suffix: str) -> dict[str, float]:
    """The p50 of a round: one `call` to each mesh of `group`, every answer in."""
    timed_loop(group.call, rig.n(50, 10), rig.budget_s)
    times = timed_loop(group.call, rig.n(300, 50), rig.budget_s)
    return {f"call_{suffix}_p50_us": statistics.median(times) * 1e6}


def _burst_rows(rig: Rig, group: _Group, suffix: str) -> dict[str, float]:
    """Broadcast rounds per second and the controller's CPU seconds per 1,000 of them."""
    n = rig.n(1000, 200)

    def burst() -> None:
        for _ in range(n):
            group.broadcast()
        group.call()  # FIFO per actor: answers after every cast was handled

    burst()  # warm-up
    walls, cpus = [], []
    for _ in range(rig.n(3, 1)):
        cpu, wall = time.process_time(), time.perf_counter()
        burst()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {
        f"broadcast_{suffix}_casts_per_s": n / statistics.median(walls),
        f"controller_cpu_s_per_1k_casts_{suffix}": statistics.median(cpus) / n * 1000,
    }


def _spawn_timed(procs_count: int) -> tuple[Any, Any, float]:
    """spawn_procs + spawn + first call() answer on `procs_count` procs, in seconds."""
    start = time.perf_counter()
    procs = this_host().spawn_procs(per_host={"gpus": procs_count})
    mesh = procs.spawn("scale", BenchActor)
    mesh.noop.call().get(timeout=CALL_TIMEOUT_S * 2)
    return procs, mesh, time.perf_counter() - start


@bench("scale")
def bench_scale(rig: Rig) -> dict[str, float]:
    """Spawn of 16/32 procs; call, casts/s and controller CPU per 1k casts on 4/16/32/64 actors."""
    rows = _scale_rows(rig, _Group([rig.mesh]), GPUS)
    rows.pop(f"call_{GPUS}actors_p50_us")  # the call4 row measures it, with more iterations
    rows.pop(f"broadcast_{GPUS}actors_casts_per_s")  # and the broadcast row this one
    for count in (16, 32):
        procs, mesh, spawn_s = _spawn_timed(count)
        try:
            rows[f"spawn_{count}procs_first_answer_s"] = spawn_s
            rows.update(_scale_rows(rig, _Group([mesh]), count))
            if count == 16:  # 64 actors: four meshes of 16, four actors per proc
                more = [procs.spawn(f"scale{i}", BenchActor) for i in range(1, 4)]
                for extra in more:
                    extra.noop.call().get(timeout=CALL_TIMEOUT_S)
                rows.update(_scale_rows(rig, _Group([mesh, *more]), 4 * count))
        finally:
            procs.stop().get(timeout=60)
    return rows


def _rss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of `pids` so far (Linux /proc; ticks of 1/100 s)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _settle(pids: list[int], quiet_pct: float = 30.0, longest_s: float = 20.0) -> float:
    """Waits until this process and `pids` together use under `quiet_pct` % of a core over
    half a second (the work a row left behind, such as its telemetry, is done), at most
    `longest_s`; returns the seconds waited. Either side gets the same wait (Monarch's 64 idle
    procs take ~13 % of a core here)."""
    start = time.perf_counter()
    while time.perf_counter() - start < longest_s:
        cpu, wall = _cpu_s([os.getpid(), *pids]), time.perf_counter()
        time.sleep(0.5)
        if 100 * (_cpu_s([os.getpid(), *pids]) - cpu) / (time.perf_counter() - wall) < quiet_pct:
            break
    waited = time.perf_counter() - start
    log(f"settled in {waited:.1f} s")
    return waited


@bench("scale1k", big=True)
def bench_scale1k(rig: Rig) -> dict[str, float]:
    """64 procs x 16 meshes: spawn, calls at 256 and 1,024 actors, a call with every actor
    printing a line, memory, idle CPU, casts (bursts), then one proc SIGKILLed: ms to a call's
    error and to the client's fault hook.

    The bursts come after the rounds: Monarch's side did not always finish them here (its
    telemetry queue overflowed at 1,000 casts x 1,024 actors and the answer after them took
    over `CALL_TIMEOUT_S`), and a side that fails one keeps the rows measured before it."""
    rows: dict[str, float] = {}
    start = time.perf_counter()
    procs = this_host().spawn_procs(per_host={"gpus": 64})
    try:
        meshes = [procs.spawn(f"k{i}", BenchActor) for i in range(16)]
        for mesh in meshes:
            mesh.noop.call().get(timeout=CALL_TIMEOUT_S * 4)
        rows["spawn_64procs_16meshes_first_answer_s"] = time.perf_counter() - start
        pids = sorted(set(meshes[0].pid.call().get(timeout=CALL_TIMEOUT_S).values()))
        groups = ((256, _Group(meshes[:4])), (1024, _Group(meshes)))
        for count, group in groups:
            rows.update(_call_rows(rig, group, f"{count}actors"))
        printing = _Group(meshes)
        _settle(pids)  # the rounds' telemetry is taken in: the row measures printing alone
        timed_loop(printing.call_printing, rig.n(20, 5), rig.budget_s)
        rows["call_1024actors_printing_p50_us"] = statistics.median(
            timed_loop(printing.call_printing, rig.n(100, 20), rig.budget_s)) * 1e6
        rows["controller_rss_MB_1024actors"] = _rss_mb()
        rows["proc_rss_MB_1024actors"] = statistics.median(_rss_mb(p) for p in pids)
        time.sleep(2.0)  # the last calls' work is over: idle from here
        cpu, wall = _cpu_s(pids), time.perf_counter()
        time.sleep(rig.n(10, 5))
        rows["idle_64procs_cpu_pct_of_a_core"] = \
            100 * (_cpu_s(pids) - cpu) / (time.perf_counter() - wall)
        for count, group in groups:
            try:
                rows.update(_burst_rows(rig, group, f"{count}actors"))
            except TimeoutError:
                log(f"scale1k: the casts to {count} actors were not all handled within "
                    f"{CALL_TIMEOUT_S:g} s: their rows and the death rows are left out")
                return rows
        rows.update(_death_at_scale(meshes, pids))
    finally:
        try:
            procs.stop().get(timeout=120)
        except Exception as exc:  # noqa: BLE001 - a proc was killed on purpose
            log(f"scale1k: stopping the procs after the kill: {type(exc).__name__}: {exc}")
    return rows


@bench("scale1k_hosts", big=True)
def bench_scale1k_hosts(rig: Rig) -> dict[str, float]:
    """1,024 actors over 16 hosts: a `ProcessJob` of 16 host processes x 4 procs x 16 meshes
    (issue 33's second shape): spawn to every first answer, a round, broadcasts and the
    controller's CPU, as `scale1k` measures them on one host."""
    from monarch.job import ProcessJob

    start = time.perf_counter()
    job = ProcessJob({"hosts": 16})
    try:
        procs = job.state(cached_path=None).hosts.spawn_procs(per_host={"gpus": 4})
        try:
            meshes = [procs.spawn(f"h{i}", BenchActor) for i in range(16)]
            for mesh in meshes:
                mesh.noop.call().get(timeout=CALL_TIMEOUT_S * 4)
            rows = {"spawn_16hosts_64procs_16meshes_first_answer_s":
                    time.perf_counter() - start}
            rows.update(_call_rows(rig, _Group(meshes), "1024actors_16hosts"))
            try:
                rows.update(_burst_rows(rig, _Group(meshes), "1024actors_16hosts"))
            except Exception as exc:  # the rows so far stand; the failure is reported
                raise PartialRows(rows, exc) from exc
            return rows
        finally:
            procs.stop().get(timeout=120)
    finally:
        job.kill()


def _death_at_scale(meshes: list[Any], pids: list[int]) -> dict[str, float]:
    """SIGKILL one of the 64 procs under 1,024 actors: ms to a call's error on the mesh that
    ran there, and to the client's fault hook (the owner's supervision of its meshes)."""
    import monarch.actor

    hooked: list[float] = []
    monarch.actor.unhandled_fault_hook = lambda failure: hooked.append(time.time())
    killed_at = time.time()
    os.kill(pids[len(pids) // 2], signal.SIGKILL)
    try:
        meshes[0].noop.call().get(timeout=CALL_TIMEOUT_S)
        return {}  # the call answered: no error to time
    except Exception:  # noqa: BLE001 - the error is the point
        errored_at = time.time()
    rows = {"death_to_error_ms_1024actors": (errored_at - killed_at) * 1e3}
    deadline = time.time() + CALL_TIMEOUT_S
    while not hooked and time.time() < deadline:
        time.sleep(0.005)
    if hooked:
        rows["death_to_fault_hook_ms_1024actors"] = (hooked[0] - killed_at) * 1e3
    return rows


# ---------------------------------------------------------------------------------------------
# Running: each bench isolated (its failure is recorded, the rest go on), a watchdog over the
# whole run, procs always stopped.


class Terminated(BaseException):
    """SIGTERM arrived: unwinds to the cleanup in `main`."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated("SIGTERM")


class Watchdog:
    """Last resort: when the run overstays, print what was measured, try to stop the procs for
    a few seconds (from this thread: the main one is stuck), and leave at once."""

    def __init__(self, result: dict[str, Any], cleanup: Callable[[], None]) -> None:
        self._result = result
        self._cleanup = cleanup
        self._timer: threading.Timer | None = None

    def arm(self, seconds: float, why: str, *, cleanup: bool = True) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = threading.Timer(seconds, self._fire, args=(why, cleanup))
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, why: str, cleanup: bool) -> None:
        log(f"watchdog: {why}; exiting")
        self._result["_errors"]["watchdog"] = why
        emit(self._result)
        if cleanup:
            stopper = threading.Thread(target=self._cleanup, daemon=True)
            stopper.start()
            stopper.join(10.0)
        os._exit(3)


class PartialRows(Exception):
    """A bench that failed part-way: the rows it measured before, and the error."""

    def __init__(self, rows: dict[str, float], error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.rows = rows


def run_one(spec: BenchSpec, rig: Rig, result: dict[str, Any]) -> None:
    if spec.planned:
        log(f"{spec.name}: planned, not written yet; skipped")
        return
    start = time.perf_counter()
    try:
        rows = spec.fn(rig)
    except PartialRows as exc:  # what it measured stands; the failure is an error
        result.update(exc.rows)
        result["_errors"][spec.name] = str(exc)
        log(f"{spec.name}: FAILED after {sorted(exc.rows)}\n{traceback.format_exc()}")
        return
    except Exception as exc:  # noqa: BLE001 - a failed row must not sink the others
        result["_errors"][spec.name] = f"{type(exc).__name__}: {exc}"
        log(f"{spec.name}: FAILED\n{traceback.format_exc()}")
        return
    result.update(rows)
    shown = ", ".join(f"{k}={v:.4g}" for k, v in rows.items())
    log(f"{spec.name} ({time.perf_counter() - start:.1f}s): {shown}")


def selected(only: str | None) -> list[BenchSpec]:
    if not only:
        return [spec for spec in BENCHES.values()
                if not (spec.planned or spec.child or spec.big)]
    names = [name.strip() for name in only.split(",") if name.strip()]
    unknown = [name for name in names if name not in BENCHES]
    if unknown:
        raise SystemExit(f"unknown bench {unknown}; known: {', '.join(BENCHES)}")
    return [BENCHES[name] for name in BENCHES if name in names]


_emitted = threading.Lock()  # held forever once the result is out: it is printed exactly once


def emit(result: dict[str, Any]) -> None:
    if _emitted.acquire(blocking=False):
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small iteration counts (smoke)")
    parser.add_argument("--only", help="comma-separated bench names (see --list)")
    parser.add_argument("--list", action="store_true", help="list the benches and exit")
    parser.add_argument("--deadline", type=float, help="seconds for the whole run (watchdog)")
    return parser.parse_args(argv)


def list_benches() -> None:
    for spec in BENCHES.values():
        tag = "(planned) " if spec.planned else "(a child's) " if spec.child else ""
        print(f"{spec.name:10} {tag}{spec.doc}")


def _distribution_version() -> str | None:
    from importlib import metadata

    for dist in ("torchmonarch", "pymonarch"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            pass
    return None


def meta(quick: bool) -> dict[str, Any]:
    from importlib import metadata

    import monarch

    try:
        torch_version: str | None = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    return {
        "monarch": os.path.dirname(os.path.abspath(monarch.__file__)),
        "version": _distribution_version(),
        "python": sys.version.split()[0],
        "torch": torch_version,
        "quick": quick,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        list_benches()
        return 0
    specs = selected(args.only)
    rig = Rig(quick=args.quick, budget_s=3.0 if args.quick else 20.0)
    result: dict[str, Any] = {"_meta": meta(args.quick), "_errors": {}}
    watchdog = Watchdog(result, lambda: stop_quietly(rig, result))
    watchdog.arm(args.deadline or (180.0 if args.quick else 900.0), "run deadline passed")
    signal.signal(signal.SIGTERM, _on_sigterm)
    start = time.perf_counter()
    try:
        rig.ensure_mesh()  # first thing, so the spawn it times is a cold one
        for spec in specs:
            run_one(spec, rig, result)
    except (Exception, Terminated, KeyboardInterrupt) as exc:  # noqa: BLE001 - report, clean up
        result["_errors"]["run"] = f"{type(exc).__name__}: {exc}"
        log(f"aborted\n{traceback.format_exc()}")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let the cleanup finish
        watchdog.arm(45.0, "cleanup hung", cleanup=False)
        stop_quietly(rig, result)
    result["_meta"]["elapsed_s"] = round(time.perf_counter() - start, 2)
    emit(result)
    watchdog.arm(
        20.0, "interpreter exit hung", cleanup=False
    )  # stray non-daemon threads must not keep us
    return 1 if result["_errors"] else 0


def stop_quietly(rig: Rig, result: dict[str, Any]) -> None:
    try:
        rig.stop()
    except Exception as exc:  # noqa: BLE001 - the result must still come out
        result["_errors"]["cleanup"] = f"{type(exc).__name__}: {exc}"
        log(f"cleanup failed: {exc!r}")


if __name__ == "__main__":
    sys.exit(main())
