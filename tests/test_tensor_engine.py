"""The tensor engine on real procs: every remote result equals the same computation done here.

Each test computes on a mesh (`with procs.activate():`), fetches, and compares with the same
torch code run locally in this process for each proc's coordinates (values, not shapes).
"""

from __future__ import annotations

import pytest
import torch

import monarch
from monarch.mesh_controller import RemoteException

pytestmark = pytest.mark.timeout(240)


def local(fn, *args):
    """Runs `fn` here, outside any active mesh."""
    with monarch.no_mesh.activate():
        return fn(*args)


def chain(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Ordinary torch code: views, in-place ops, matmul, reductions, indexing, dtype changes."""
    y = x.reshape(4, 3).t() @ x.reshape(4, 3) + r
    y.add_(1.5)
    z = torch.cat([y.relu(), y[:1] * 2], dim=0).softmax(dim=-1)
    w = (z.sum(dim=0, keepdim=True) - z.mean()).exp().to(torch.float64)
    return torch.stack([w.squeeze(0), w.flip(-1).squeeze(0)]).cumsum(1)


def test_ops_run_on_every_proc_and_match_local(procs):
    with procs.activate():
        x = torch.arange(12, dtype=torch.float32) / 10
        r = procs.rank_tensor("gpus").to(torch.float32)
        out = chain(x, r)
        assert isinstance(out, monarch.Tensor) and out.shape == (2, 3)
        values = [monarch.inspect(out, gpus=g) for g in range(4)]
    for g, value in enumerate(values):
        expected = local(chain, torch.arange(12, dtype=torch.float32) / 10,
                         torch.tensor(float(g)))
        assert value.dtype == torch.float64
        torch.testing.assert_close(value, expected, rtol=0, atol=0)


def test_fetch_pytrees_and_call_on_shard(procs):
    with procs.activate():
        r = procs.rank_tensor("gpus")
        a, b = r * 10, torch.ones(2) + r
        got = monarch.fetch_shard({"a": a, "pair": (b, "text")}, gpus=2).result(timeout=60)

        @monarch.remote(propagate="inspect")
        def describe(t, k):
            return f"{t.tolist()} {k}"

        said = monarch.call_on_shard_and_fetch(describe, b, 7, shard={"gpus": 1}).get(timeout=60)
    assert torch.equal(got["a"], torch.tensor(20)) and got["pair"][1] == "text"
    assert torch.equal(got["pair"][0], torch.full((2,), 3.0))
    assert said == "[2.0, 2.0] 7"


REDUCTIONS = {
    "sum": lambda vs: sum(vs), "avg": lambda vs: sum(vs) / len(vs),
    "product": lambda vs: torch.stack(vs).prod(0), "min": lambda vs: torch.stack(vs).amin(0),
    "max": lambda vs: torch.stack(vs).amax(0), "stack": lambda vs: torch.stack(vs),
    "gather": lambda vs: torch.stack(vs),
}


def data(g: int, h: int = 0) -> torch.Tensor:
    """What proc (h, g) holds in the reduce tests: small integers, so sums are exact."""
    return (torch.arange(8, dtype=torch.float32).reshape(4, 2) % 3 + 1) * (g + 1) + 10 * h


@pytest.mark.parametrize("reduction", sorted(REDUCTIONS))
def test_reduce_matches_local(procs, reduction):
    with procs.activate():
        x = torch.arange(8, dtype=torch.float32).reshape(4, 2) % 3 + 1
        x = x * (procs.rank_tensor("gpus") + 1)
        out = x.reduce("gpus", reduction)
        values = [monarch.inspect(out, gpus=g) for g in range(4)]
    expected = local(REDUCTIONS[reduction], [data(g) for g in range(4)])
    for value in values:
        torch.testing.assert_close(value, expected)


def test_reduce_scatter_all_to_all_in_place_and_out(procs):
    with procs.activate():
        x = torch.arange(8, dtype=torch.float32).reshape(4, 2) % 3 + 1
        x = x * (procs.rank_tensor("gpus") + 1)
        scattered = x.reduce("gpus", "sum", scatter=True)
        exchanged = x.reduce("gpus", "stack", scatter=True)
        out = torch.zeros(4, 2)
        into = x.reduce("gpus", "max", out=out)
        y = x.clone()
        same = y.reduce_("gpus", "sum")
        got = [monarch.inspect((scattered, exchanged, out, into, y, same), gpus=g)
               for g in range(4)]
    total = local(lambda: sum(data(g) for g in range(4)))
    peak = local(lambda: torch.stack([data(g) for g in range(4)]).amax(0))
    for g, (s, e, o, i, yy, sm) in enumerate(got):
        torch.testing.assert_close(s, total[g])
        torch.testing.assert_close(e, local(lambda: torch.stack([data(k)[g] for k in range(4)])))
        torch.testing.assert_close(o, peak)
        torch.testing.assert_close(i, peak)
        torch.testing.assert_close(yy, total)
        torch.testing.assert_close(sm, total)


def test_reduce_over_one_dim_or_both_of_a_2d_mesh(procs2x2):
    mesh = procs2x2
    with mesh.activate():
        x = torch.arange(8, dtype=torch.float32).reshape(4, 2) % 3 + 1
        x = x * (mesh.rank_tensor("gpus") + 1) + 10 * mesh.rank_tensor("hosts")
        by_gpu, by_host = x.reduce("gpus"), x.reduce("hosts", "max")
        everything = x.reduce(("hosts", "gpus"), "sum")
        stacked = x.reduce("hosts", "stack")
        got = {(h, g): monarch.inspect((by_gpu, by_host, everything, stacked), hosts=h, gpus=g)
               for h in range(2) for g in range(2)}
    for (h, g), (bg, bh, ev, st) in got.items():
        torch.testing.assert_close(bg, local(lambda: data(0, h) + data(1, h)))
        torch.testing.assert_close(bh, local(lambda: torch.maximum(data(g, 0), data(g, 1))))
        torch.testing.assert_close(ev, local(lambda: sum(data(a, b) for a in range(2)
                                                         for b in range(2))))
        torch.testing.assert_close(st, local(lambda: torch.stack([data(g, 0), data(g, 1)])))


def test_reduce_refusals_happen_here(procs):
    with procs.activate():
        x = torch.ones(4, 2)
        with pytest.raises(KeyError, match="dim hosts not found"):
            x.reduce("hosts")
        with pytest.raises(ValueError, match="not supported"):
            x.reduce("gpus", "median")
        with pytest.raises(ValueError, match="in-place"):
            x.reduce_("gpus", "stack")
        with pytest.raises(TypeError, match="outer most dimension"):
            torch.ones(3).reduce("gpus", "sum", scatter=True)
        w = torch.ones(2, requires_grad=True)
        with pytest.raises(TypeError, match="requires gradients"):
            w.reduce("gpus")


def test_a_failure_surfaces_at_the_next_fetch_and_the_mesh_goes_on(procs):
    with procs.activate():
        x = torch.ones(3, 4)
        huge = torch.rand(100_000, 100_000, 100_000)  # this line appears in the error
        y = (huge + 1).sum()
        fine = x * 2
        with pytest.raises(RemoteException) as caught:
            monarch.inspect(y)
        error = caught.value
        assert "can't allocate memory" in error.worker_error_string
        assert "this line appears in the error" in str(error)
        assert "has failed asynchronously on rank" in str(error)
        fine_value = monarch.inspect(fine)
        after = (torch.arange(4.0) + procs.rank_tensor("gpus")).reduce("gpus")
        after_value = monarch.inspect(after, gpus=3)
    assert torch.equal(fine_value, torch.full((3, 4), 2.0))
    assert torch.equal(after_value, torch.arange(4.0) * 4 + 6)


def _fails_on_rank_one(x, rank):
    if int(rank) == 1:
        raise ValueError("only rank one fails")
    return x + 1


def test_a_failure_on_one_proc_reaches_everything_computed_from_it(procs):
    fails = monarch.remote(_fails_on_rank_one, propagate=lambda x, rank: x.clone())
    with procs.activate():
        x = torch.zeros(2)
        z = fails(x, procs.rank_tensor("gpus"))
        healthy = x + 5
        with pytest.raises(RemoteException, match="only rank one fails") as caught:
            monarch.inspect(z, gpus=0)  # fetching checks every proc of the mesh
        assert caught.value.rank == 1
        reduced = z.reduce("gpus")  # rank 1 takes part in the reduce, with its failure
        with pytest.raises(RemoteException, match="only rank one fails"):
            monarch.inspect(reduced, gpus=3)
        moved = z.slice_mesh(gpus=1).to_mesh(procs.slice(gpus=2))
    with procs.slice(gpus=2).activate():
        with pytest.raises(RemoteException, match="only rank one fails"):
            monarch.inspect(moved)
    assert torch.equal(monarch.inspect(healthy, gpus=1), torch.full((2,), 5.0))


def test_shape_errors_of_torch_ops_are_raised_here(procs):
    with procs.activate():
        with pytest.raises(RuntimeError, match="same reduction dim|cannot be multiplied"):
            torch.ones(2, 3) @ torch.ones(2, 3)
        with pytest.raises(TypeError, match="item"):
            torch.ones(()).item()
        here = local(torch.ones, 2)
        with pytest.raises(TypeError, match="local"):
            torch.add(torch.ones(2), here)


def test_moving_between_mesh_slices_and_broadcasting(procs2x2):
    stages = procs2x2.rename(hosts="pp")
    first, second = stages.slice(pp=0), stages.slice(pp=1)
    with first.activate():
        x = torch.arange(6.0).reshape(2, 3) + 100 * first.rank_tensor("gpus")
    y = x.to_mesh(second)
    with second.activate():
        y = y * 2
    one = stages.slice(pp=0, gpus=1)
    z = x.slice_mesh(gpus=1).to_mesh(stages)  # to all four procs
    with first.activate():
        temporary = x + 1
    moved = temporary.to_mesh(second)
    del temporary  # freed after the move that reads it, whatever batch carries the free
    procs2x2._device_mesh._engine.flush()
    with second.activate():
        got = [monarch.inspect(y, gpus=g) for g in range(2)]
        moved_value = monarch.inspect(moved, gpus=1)
    assert torch.equal(moved_value, torch.arange(6.0).reshape(2, 3) + 101)
    with stages.activate():
        spread = [monarch.inspect(z, pp=p, gpus=g) for p in range(2) for g in range(2)]
    assert one.size() == 1
    for g, value in enumerate(got):
        assert torch.equal(value, (torch.arange(6.0).reshape(2, 3) + 100 * g) * 2)
    for value in spread:
        assert torch.equal(value, torch.arange(6.0).reshape(2, 3) + 100)
    with pytest.raises(ValueError, match="different length"):
        x.to_mesh(procs2x2.slice(gpus=slice(0, 1)))


def test_dropping_a_tensor_frees_it_on_the_workers(procs):
    import gc

    gc.collect()
    with procs.activate():
        engine = procs._device_mesh._engine
        keep = torch.ones(2)
        engine.flush()
        before = sorted(engine.workers.live_refs.call().get(timeout=60).values())
        made = [torch.ones(100) * i for i in range(20)]
        engine.flush()
        during = sorted(engine.workers.live_refs.call().get(timeout=60).values())
        del made
        engine.flush()
        after = sorted(engine.workers.live_refs.call().get(timeout=60).values())
        keep.drop()
        with pytest.raises(TypeError, match="dropped"):
            torch.add(keep, 1)
    assert len(before) == 4 and all(d >= b + 20 for b, d in zip(before, during, strict=True))
    assert after == before


def test_streams_borrow_and_overlap(procs):
    other = monarch.Stream("comms")
    with procs.activate():
        x = torch.ones(4) * (procs.rank_tensor("gpus") + 1)
        lent, borrow = other.borrow(x)
        with other.activate():
            total = lent.reduce("gpus")
        mine = x * 3  # reading is fine while lent for reading
        with pytest.raises(TypeError, match="borrowed"):
            x.add_(1)
        with pytest.raises(TypeError, match="stream"):
            torch.add(total, 1)  # total lives on `other`
        borrow.drop()
        x.add_(1)  # writable again
        with other.activate():
            total_here = monarch.inspect(total, gpus=2)
        assert monarch.get_active_stream().name == "main"
        got = monarch.inspect((mine, x), gpus=1)
    assert torch.equal(total_here, torch.full((4,), 10.0))
    assert torch.equal(got[0], torch.full((4,), 6.0)) and torch.equal(got[1], torch.full((4,), 3.0))


def test_remote_functions(procs):
    @monarch.remote(propagate=lambda t: t.new_empty(t.shape))
    def doubled(t):
        return t * 2

    @monarch.remote  # no propagation: probed once on the first proc, then cached
    def split(t, k):
        return t.sum() + k, t[:1]

    with procs.activate():
        r = procs.rank_tensor("gpus").float()
        a = doubled(torch.ones(3) + r)
        s, head = split(torch.arange(3.0) + r, 5)
        s2, _ = split(torch.arange(3.0), 1)
        got = [monarch.inspect((a, s, head, s2), gpus=g) for g in range(4)]
    for g, (aa, ss, hh, s2v) in enumerate(got):
        assert torch.equal(aa, (torch.ones(3) + g) * 2)
        assert torch.equal(ss, torch.tensor(3.0 + 3 * g + 5)) and torch.equal(hh, torch.tensor([g * 1.0]))
        assert torch.equal(s2v, torch.tensor(4.0))


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 8)
        self.b = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)))


def dp_step(model, inputs, targets, grads_out, lr=0.1):
    """One data-parallel SGD step: gradients summed over the `gpus` dimension as they come."""
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    params = list(reversed(list(model.parameters())))
    with torch.no_grad():
        for param, grad in zip(params, monarch.grad_generator(loss, params), strict=True):
            grad.reduce_("gpus", "sum")
            grads_out.append(grad)
            param -= lr * grad
    return loss


def batch(g: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + g)
    return torch.randn(5, 4, generator=gen), torch.randn(5, 2, generator=gen)


def test_a_data_parallel_step_gives_the_gradients_and_weights_of_local_training(procs):
    seed = monarch.remote(torch.manual_seed, propagate=lambda s: None)
    batches = [batch(g) for g in range(4)]
    xs_list = [x.tolist() for x, _ in batches]
    ys_list = [y.tolist() for _, y in batches]
    with procs.activate():
        seed(0)
        model = TwoLayers()
        rank = procs.rank_tensor("gpus").reshape(1)  # each proc trains on the batch of its rank
        xs = torch.tensor(xs_list).index_select(0, rank).squeeze(0)
        ys = torch.tensor(ys_list).index_select(0, rank).squeeze(0)
        grads: list = []
        dp_step(model, xs, ys, grads)
        remote_params = monarch.inspect([p.detach() for p in model.parameters()], gpus=3)
        remote_grads = monarch.inspect([g for g in grads], gpus=0)

    def reference():
        torch.manual_seed(0)
        m = TwoLayers()
        total = [torch.zeros_like(p) for p in reversed(list(m.parameters()))]
        for g in range(4):
            m.zero_grad()
            x, y = batch(g)
            torch.nn.functional.mse_loss(m(x), y).backward()
            for t, p in zip(total, reversed(list(m.parameters())), strict=True):
                t += p.grad
        with torch.no_grad():
            for t, p in zip(total, reversed(list(m.parameters())), strict=True):
                p -= 0.1 * t
        return [p.detach() for p in m.parameters()], total

    params, grads_local = local(reference)
    assert len(params) == len(grads_local) == 4  # two layers: a weight and a bias each
    for got, want in zip(remote_params, params, strict=True):
        torch.testing.assert_close(got, want)
    for got, want in zip(remote_grads, grads_local, strict=True):
        torch.testing.assert_close(got, want)


def test_grad_generator_yields_in_the_order_asked(procs):
    def graph(t, w1, w2, u):
        a = torch.relu(t @ w1)
        b = torch.relu(a @ w2)
        std, mean = torch.std_mean(b)
        return std + mean, [w2, t, u, w1]

    def make():
        gen = torch.Generator().manual_seed(3)
        return [torch.rand(3, 3, generator=gen).requires_grad_() for _ in range(4)]

    values = [v.tolist() for v in make()]
    with procs.activate():
        made = [torch.tensor(v).requires_grad_() for v in values]
        loss, wrt = graph(*made)
        grads = list(monarch.grad_generator(loss, wrt))
        assert grads[2] is None  # u does not reach the loss
        got = monarch.inspect([g for g in grads if g is not None], gpus=1)

    def reference():
        leaves = make()
        loss, wrt = graph(*leaves)
        return torch.autograd.grad(loss, [w for w in wrt if w is not wrt[2]])

    wanted = local(reference)
    assert len(wanted) == 3  # the four leaves but u, which does not reach the loss
    for g, want in zip(got, wanted, strict=True):
        torch.testing.assert_close(g, want)


def test_mesh_tables_and_show(procs2x2, capsys):
    table = procs2x2.to_table()
    assert "gpus=0" in table and "hosts=1" in table and "(1, 1)" in table
    with procs2x2.activate():
        monarch.show(torch.arange(6.0).reshape(2, 3), hosts=1, gpus=0)
        ranks = procs2x2.rank_tensors()
        flat = procs2x2.rank_tensor(("hosts", "gpus"))
        got = monarch.inspect((ranks["hosts"], ranks["gpus"], flat), hosts=1, gpus=0)
    assert [int(v) for v in got] == [1, 0, 2]
    shown = capsys.readouterr().out
    assert "tensor (2, 3)" in shown and "5.0000" in shown


def test_batches_are_spans_with_ops_and_bytes(procs):
    from monarch._controller._job import current_job
    from waiting import wait_until

    with procs.activate():
        x = torch.ones(1001)  # 4004 bytes: no other test reduces this size
        for _ in range(10):
            x = x + 1
        total = x.reduce("gpus")
        monarch.inspect(total)
    store = current_job().store

    def batches():
        return [s for s in store.spans(name="tensor_engine batch", limit=5000)
                if s.attributes.get("bytes_moved") == 4004]

    wait_until(lambda: len(batches()) == 4, "the reduce's batch span on each proc")
    spans = batches()
    for span in spans:
        assert span.attributes["device_mesh"] == "{gpus: 4}" and span.attributes["ops"] >= 1
        assert span.attributes["mesh"] == "tensor_engine"
    assert len({span.attributes["proc"] for span in spans}) == 4


def common_torch_code(seed_fn):
    """An optimizer with state, deep copies, item assignment, convolutions, losses."""
    seed_fn(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(),
                                torch.nn.Linear(18, 3))
    twin = __import__("copy").deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    images = torch.arange(50.0).reshape(2, 1, 5, 5) / 50
    labels = torch.tensor([0, 2])
    for _ in range(2):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
    board = torch.zeros(4)
    board[1:3] = 7.0
    return [p.detach() for p in model.parameters()] + [twin[2].bias.detach(), board]


def test_common_torch_code_matches_local(procs):
    seed = monarch.remote(torch.manual_seed, propagate=lambda s: None)
    with procs.activate():
        remote = monarch.inspect(common_torch_code(seed), gpus=2)
    wanted = local(common_torch_code, torch.manual_seed)
    assert len(wanted) == 6
    for got, want in zip(remote, wanted, strict=True):
        torch.testing.assert_close(got, want)


def test_pytree_forms_of_reduce_and_to_mesh(procs2x2):
    hosts0, hosts1 = procs2x2.slice(hosts=0), procs2x2.slice(hosts=1)
    with hosts0.activate():
        g = hosts0.rank_tensor("gpus").float()
        tree = {"a": g + 1, "b": [g * 10]}
        summed = monarch.reduce(tree, "gpus", "sum")
        monarch.reduce_(tree, "gpus", "max")
        sums = monarch.inspect(summed, gpus=1)
    moved = monarch.to_mesh(monarch.slice_mesh(tree, gpus=0), hosts1)
    with hosts1.activate():
        got = (sums, monarch.inspect(moved, gpus=1))
    assert float(got[0]["a"]) == 3.0 and float(got[0]["b"][0]) == 10.0
    assert float(got[1]["a"]) == 2.0 and float(got[1]["b"][0]) == 10.0


def test_the_console_shows_each_engine_with_its_ops_and_live_tensors(procs):
    """`:tensors` (issue 32, item 5): the engine counts the ops and batches it sends and the
    remote tensors alive; the admin API's topology carries them, the console's table shows
    them on the row of the workers' mesh, and a freed tensor is no longer counted."""
    from waiting import wait_until

    from monarch._controller._job import current_job
    from monarch._tensor._engine import engine_of
    from monarch.admin import AdminClient
    from monarch.console import _resources as resources
    from monarch.console._model import Snapshot

    with procs.activate():
        kept = [torch.ones(3) * i for i in range(5)]
        total = sum(kept, torch.zeros(3))
        assert monarch.inspect(total, gpus=0).tolist() == [10.0, 10.0, 10.0]
    engine = engine_of(procs)
    workers = engine.workers._mesh_id
    job = current_job()
    admin = AdminClient(job.admin.address, job.admin.token)

    def entry() -> dict | None:
        found = [e for e in admin.topology()["tensor_engines"] if e["mesh"] == workers]
        return found[0] if found and found[0]["ops"] >= engine.ops_sent else None

    shown = wait_until(entry, "the engine in the topology")
    assert shown["batches"] == engine.batches_sent >= 1
    assert shown["tensors"] == engine.refs_made - engine.refs_dropped >= len(kept)
    topology = admin.topology()
    table = resources.table("tensors", Snapshot(admin.job(), topology))
    (row,) = [i for i in table.items if i.ref == workers]
    assert row.kind == "mesh" and row.cells[0] == "tensor_engine"
    assert int(row.cells[table.columns.index("OPS")]) >= shown["ops"]
    alive = shown["tensors"]
    del kept, total
    with procs.activate():  # the frees leave with the next batch
        assert monarch.inspect(torch.zeros(1), gpus=0).tolist() == [0.0]
    wait_until(lambda: (entry() or {}).get("tensors", alive) < alive, "the freed tensors")


ENDED_JOB = """
import torch, monarch
from monarch.actor import Actor, endpoint, this_host
from monarch.weights import put_state_dict
from monarch._controller._job import current_job


class Doubler(Actor):
    @endpoint
    def double(self, x):
        return 2 * x


service = Doubler.options(procs=1, num_replicas=2, name="doublers").as_service().get(timeout=120)
assert [service.double.route(i).get(timeout=60) for i in range(4)] == [0, 2, 4, 6]

procs = this_host().spawn_procs(per_host={"gpus": 2})
with procs.activate():
    x = torch.ones(4) * 3
    assert monarch.inspect(x, gpus=0).tolist() == [3.0] * 4
put_state_dict({"w": torch.zeros(8)}, "policy").get(timeout=60)
print("JOB", current_job().job_id, flush=True)
procs.stop().get(timeout=60)
service.shutdown().get(timeout=60)
"""


def test_an_ended_jobs_history_shows_its_tensor_engines_weights_and_services(tmp_path,
                                                                            monkeypatch):
    """Post-mortem parity (issue 32, item 7): `monarch top --job ID` on an ended job shows the
    same :tensors, :weights and :services as the live job did, from its history's metrics."""
    import subprocess
    import sys

    from monarch._history._client import HistoryClient
    from monarch.admin import open_history

    env = dict(__import__("os").environ, MONARCH_RUN_DIR=str(tmp_path), MONARCH_HISTORY="1")
    done = subprocess.run([sys.executable, "-c", ENDED_JOB], env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = next(line.split()[1] for line in done.stdout.splitlines()
                  if line.startswith("JOB "))
    monkeypatch.setenv("MONARCH_RUN_DIR", str(tmp_path))
    topology = HistoryClient(open_history(job_id)).topology()
    (engine,) = topology["tensor_engines"]
    assert engine["ops"] >= 2 and engine["batches"] >= 1 and engine["tensors"] >= 1
    workers = [m for m in topology["meshes"] if m["mesh"] == engine["mesh"]]
    assert workers and workers[0]["name"] == "tensor_engine"
    (policy,) = topology["weights"]
    assert (policy["key"], policy["version"], policy["bytes"]) == ("policy", 1, 32)
    (service,) = topology["services"]
    assert service["name"] == "doublers" and len(service["replicas"]) == 2
    assert sum(r["routed"] for r in service["replicas"]) == 4
    replicas = [m for m in topology["meshes"] if m.get("service")]
    assert sorted(m["service"]["replica"] for m in replicas) == [0, 1]
