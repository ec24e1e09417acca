"""DDP on a 4-proc mesh with SPMDActor: Monarch's SPMD pattern, on CPU with gloo.

SPMDActor gives each proc the environment torchrun would (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, ...) and runs an unchanged torchrun script in it: the first rank picks the
rendezvous address and port, then every rank runs `spmd_ddp_train.py`. Each rank saves its
final parameters; the controller checks that all ranks ended with the same model.
"""

import tempfile
from pathlib import Path

import torch

from monarch.actor import this_host
from monarch.spmd import SPMDActor

TRAIN_SCRIPT = Path(__file__).resolve().with_name("spmd_ddp_train.py")
GPUS = 4


def main() -> None:
    procs = this_host().spawn_procs(per_host={"gpus": GPUS})
    spmd = procs.spawn("_SPMDActor", SPMDActor)
    master_addr, master_port = spmd.slice(gpus=0).get_host_port.call_one(None).get()
    print(f"rendezvous at {master_addr}:{master_port}; running {TRAIN_SCRIPT.name} on "
          f"{GPUS} ranks")
    with tempfile.TemporaryDirectory(prefix="spmd-ddp-") as out:
        spmd.main.call(master_addr, master_port,
                       [str(TRAIN_SCRIPT), "--steps", "20", "--out", out]).get()
        params = [torch.load(Path(out) / f"rank{rank}.pt") for rank in range(GPUS)]
    procs.stop().get()
    if not all(torch.equal(params[0], p) for p in params[1:]):
        raise SystemExit("the ranks' final parameters differ")
    print(f"final parameters agree across {GPUS} ranks "
          f"({params[0].numel()} values, sum {params[0].sum().item():.6f})")


if __name__ == "__main__":
    main()
