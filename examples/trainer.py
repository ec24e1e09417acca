"""A trainer-step loop: data-parallel workers compute gradients, the controller averages them."""

import torch

from monarch.actor import Actor, current_rank, endpoint, this_host


class Worker(Actor):
    def __init__(self, dim: int) -> None:
        torch.manual_seed(current_rank().rank)
        self.x = torch.randn(64, dim)
        self.y = self.x @ torch.arange(dim, dtype=torch.float32)

    @endpoint
    def grad(self, w: torch.Tensor) -> torch.Tensor:
        w = w.clone().requires_grad_(True)
        loss = ((self.x @ w - self.y) ** 2).mean()
        loss.backward()
        return w.grad

    @endpoint
    def loss(self, w: torch.Tensor) -> float:
        return float(((self.x @ w - self.y) ** 2).mean())


def main() -> None:
    dim, steps, lr = 8, 60, 0.05
    procs = this_host().spawn_procs(per_host={"gpus": 4})
    workers = procs.spawn("workers", Worker, dim)
    w = torch.zeros(dim)
    for step in range(steps):
        grads = list(workers.grad.call(w).get().values())
        w -= lr * torch.stack(grads).mean(0)
        if step % 20 == 0 or step == steps - 1:
            losses = list(workers.loss.call(w).get().values())
            print(f"step {step:3d} loss {sum(losses) / len(losses):.4f}")
    print("weights:", [round(v, 2) for v in w.tolist()])
    procs.stop().get()


if __name__ == "__main__":
    main()
