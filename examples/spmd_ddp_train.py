"""A DDP training script written the way torchrun users write them.

It reads its place in the job from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...
through `init_process_group`'s env:// rendezvous), trains a small model with gloo on CPU, and
saves its final parameters as `rank{RANK}.pt` in `--out`. Run it with
`torchrun --nproc-per-node 4 spmd_ddp_train.py`, or on a Monarch mesh with `SPMDActor`
(examples/spmd_ddp.py).
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--out", help="directory to save this rank's final parameters in")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # Each rank starts from its own weights and draws its own batches: DDP broadcasts rank 0's
    # weights when it wraps the model and averages the gradients of every step.
    torch.manual_seed(rank)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    losses = []
    for _ in range(args.steps):
        x = torch.randn(32, 8)
        loss = nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(f"rank {rank}/{world} (local rank {os.environ['LOCAL_RANK']}): "
          f"loss {losses[0]:.3f} -> {losses[-1]:.3f}", flush=True)
    if args.out:
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        torch.save(flat, os.path.join(args.out, f"rank{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
