"""A whole job whose transfers go through /dev/shm-named ring segments, for the leftover tests.

    python shm_job.py normal   # transfers, an owner SIGKILLed mid-transfer, a normal end
    python shm_job.py crash    # the controller SIGKILLs itself in the middle of a transfer

Prints `job <id>` and `pids <controller> <proc>...` first, so the test can find leftovers and
wait for every process to be gone.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent.parent))  # tests/, for waiting

from waiting import wait_until

from monarch import _rdma
from monarch._rdma import _server
from monarch.actor import Actor, endpoint, this_host
from monarch.rdma import OwnerGoneError, RDMABuffer

MiB = 1 << 20


class Holder(Actor):
    def __init__(self) -> None:
        self.data = torch.arange(16 * MiB, dtype=torch.int32)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def buffer(self) -> RDMABuffer:
        return RDMABuffer(self.data)

    @endpoint
    def die_at_chunk(self, n: int) -> None:
        seen = [0]

        def hook(point: str) -> None:
            seen[0] += point == "chunk"
            if seen[0] >= n:
                os.kill(os.getpid(), signal.SIGKILL)

        _server.fault_hook = hook

    @endpoint
    def slow_chunks(self, marker: str) -> None:
        """Each chunk served takes 10 ms more; the first one creates the file `marker`."""
        def hook(point: str) -> None:
            if point == "chunk":
                Path(marker).touch()
            time.sleep(0.01)

        _server.fault_hook = hook

    @endpoint
    def leftover(self, job: str) -> None:
        """What a crash between creating and unlinking a named segment would leave."""
        open(f"/dev/shm/{_rdma._segments.PREFIX}-{job}-{os.getpid()}-999", "wb").close()


def main(mode: str, scratch: str) -> None:
    _rdma.configure(transport="shm", segments="devshm")
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    holders = procs.spawn("holders", Holder)
    pids = holders.pid.call().get(timeout=60)
    from monarch._runtime._identity import current_process

    job = current_process().job_id
    print("job", job, flush=True)
    print("pids", os.getpid(), *pids.values(), flush=True)
    first, second = holders.slice(gpus=0), holders.slice(gpus=1)
    buffer = first.buffer.call_one().get(timeout=60)
    dst = torch.empty(64 * MiB, dtype=torch.uint8)
    buffer.read_into(dst).get(timeout=60)
    buffer.write_from(dst).get(timeout=60)
    assert not _rdma.leftovers(job), "a segment outlived its setup"
    if mode == "crash":
        marker = Path(scratch) / "first-chunk"
        second.slow_chunks.call_one(str(marker)).get(timeout=60)
        slow = second.buffer.call_one().get(timeout=60)
        slow.read_into(dst)  # 64 chunks, 10 ms each: killed below while it runs
        try:
            wait_until(marker.exists, "the transfer's first chunk", 60, interval=0.005)
            print("transfer running", flush=True)
        except AssertionError:
            print("transfer never started", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    first.leftover.call_one(job).get(timeout=60)
    second.die_at_chunk.call_one(3).get(timeout=60)
    doomed = second.buffer.call_one().get(timeout=60)
    try:
        doomed.read_into(dst).get(timeout=60)
    except OwnerGoneError:
        print("owner gone", flush=True)


if __name__ == "__main__":
    import monarch.actor

    monarch.actor.unhandled_fault_hook = lambda failure: None  # the SIGKILL is on purpose
    main(sys.argv[1], sys.argv[2])
