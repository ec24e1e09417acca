"""Distributed tensors that feel local: Monarch's tensor-engine tour, on CPU.

Inside `mesh.activate()`, torch code runs on every proc of the mesh; the controller (this
script) holds handles and sends the ops in batches without waiting for them. Values come back
with `monarch.inspect`. Runs with no arguments; CPU only (gloo), no GPU needed.

    python examples/distributed_tensors.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import monarch
from monarch.actor import this_host


def section(title: str) -> None:
    print(f"\n== {title}")


def tour_basics(mesh) -> None:
    section("torch ops on a mesh of 4 procs")
    with mesh.activate():
        t = torch.rand(3, 4)  # one random 3x4 tensor on each proc
        product = t @ t.T
    print(t)  # a handle: shape, dtype, mesh (no values here)
    print("t on gpu=1:\n", monarch.inspect(t, gpu=1))
    monarch.show(product, gpu=2)


def tour_errors(mesh) -> None:
    section("a failing op, and the mesh going on")
    with mesh.activate():
        giant = torch.rand(10_000_000, 10_000_000)  # 400 TB: fails on every proc...
        result = giant @ giant  # ...and so does everything computed from it
        try:
            monarch.inspect(result)
        except monarch.RemoteException as error:
            reason = error.worker_error_string.strip().splitlines()[-1]
            print(f"caught at inspect, from rank {error.rank}: {reason[:90]}...")
        print("still working:", monarch.inspect(torch.ones(2) * 21).tolist())


def tour_reduce(mesh_2d) -> None:
    section("reduce over the gpu and host dimensions of a 4x4 mesh (16 procs)")
    print(mesh_2d.to_table())
    with mesh_2d.activate():
        host, gpu = mesh_2d.rank_tensor("host"), mesh_2d.rank_tensor("gpu")
        t = (10 * host + gpu).float()  # proc (host, gpu) holds 10*host + gpu
        over_gpu = t.reduce("gpu", "sum")  # per host: sum over its 4 gpus
        over_host = t.reduce("host", "max")
        everything = t.reduce(("host", "gpu"), "sum")
        row = t.reduce("gpu", "stack")
        print("sum over gpu, on host 2:", monarch.inspect(over_gpu, host=2, gpu=0).item())
        print("max over host, on gpu 3:", monarch.inspect(over_host, host=0, gpu=3).item())
        print("sum over both:", monarch.inspect(everything, host=1, gpu=1).item())
        print("stack over gpu, on host 3:", monarch.inspect(row, host=3, gpu=0).tolist())


def tour_rename_split(mesh_2d) -> None:
    section("renaming and splitting meshes")
    mesh_3d = mesh_2d.split(host=("dp", "pp"), pp=2)
    print("split:", mesh_3d.sizes, "| renamed:", mesh_2d.rename(host="dp", gpu="tp").sizes)
    with mesh_3d.activate():
        coords = 100 * mesh_3d.rank_tensor("dp") + 10 * mesh_3d.rank_tensor("pp")
        mine = monarch.inspect(coords + mesh_3d.rank_tensor("gpu"), dp=1, pp=0, gpu=2)
    print("proc (dp=1, pp=0, gpu=2) computed", mine.item())


def tour_pipeline(mesh_2d) -> None:
    section("a pipeline: one stage per host, activations moved with to_mesh")
    pipeline = mesh_2d.rename(host="pp")
    stages = [pipeline.slice(pp=i) for i in range(pipeline.size("pp"))]
    seed = monarch.remote(torch.manual_seed, propagate=lambda s: None)
    layers = []
    for i, stage in enumerate(stages):
        with stage.activate():
            seed(i)
            layers.append(torch.nn.Linear(8, 8))
    with stages[0].activate():
        x = torch.ones(2, 8) * (1 + stages[0].rank_tensor("gpu"))  # each gpu: its own batch
    with torch.no_grad():
        for stage, layer in zip(stages, layers):
            x = x.to_mesh(stage)
            with stage.activate():
                x = torch.tanh(layer(x))
    with stages[-1].activate():
        out = monarch.inspect(x, gpu=1)
    reference = torch.ones(2, 8) * 2
    with torch.no_grad():
        for i in range(len(stages)):
            torch.manual_seed(i)
            reference = torch.tanh(torch.nn.Linear(8, 8)(reference))
    print("last stage output (gpu 1), first row:", [round(v, 4) for v in out[0].tolist()[:4]],
          "| same as local:", torch.allclose(out, reference))


def train(model, inputs, targets, lr=0.02):
    """One data-parallel step: gradients summed over "dp" as backward produces them."""
    loss = F.mse_loss(model(inputs), targets)
    params = list(reversed(list(model.parameters())))
    grads = monarch.grad_generator(loss, params)
    with torch.no_grad():
        for param, grad in zip(params, grads):
            grad.reduce_("dp", "sum")  # starts while backward goes on with earlier layers
            param -= lr * grad
    return loss


def tour_data_parallel(mesh) -> None:
    section("data-parallel training with grad_generator and reduce_('dp', 'sum')")
    dp = mesh.rename(gpu="dp")
    seed = monarch.remote(torch.manual_seed, propagate=lambda s: None)
    with dp.activate():
        seed(0)  # the same initial weights on every replica
        model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(),
                                    torch.nn.Linear(16, 1))
        seed(1 + dp.rank_tensor("dp"))  # then a different data stream per replica
        target_w = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
        for step in range(20):
            inputs = torch.randn(32, 4)
            loss = train(model, inputs, inputs @ target_w)
            if step % 5 == 4:
                losses = [round(monarch.inspect(loss, dp=r).item(), 4) for r in range(4)]
                print(f"step {step + 1}: loss per replica {losses}")
        first = monarch.inspect(list(model.parameters()), dp=0)
        last = monarch.inspect(list(model.parameters()), dp=3)
    same = all(torch.equal(a, b) for a, b in zip(first, last))
    print("replicas hold identical weights:", same)


def main() -> None:
    mesh = this_host().spawn_procs(per_host={"gpu": 4})
    mesh_2d = this_host().spawn_procs(per_host={"host": 4, "gpu": 4})
    tour_basics(mesh)
    tour_errors(mesh)
    tour_reduce(mesh_2d)
    tour_rename_split(mesh_2d)
    tour_pipeline(mesh_2d)
    tour_data_parallel(mesh)
    mesh_2d.stop().get()
    mesh.stop().get()
    print("\ndone")


if __name__ == "__main__":
    main()
