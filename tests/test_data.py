"""Bulk values through actors: tensors, arrays and bytes arrive usable, both ways."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from monarch.actor import Actor, ActorError, endpoint
from monarch._runtime._errors import UnpicklableError

pytestmark = pytest.mark.timeout(120)


class Mutator(Actor):
    @endpoint
    def bump(self, t: torch.Tensor) -> torch.Tensor:
        t += 1  # in place: the received tensor is writable
        return t

    @endpoint
    def stats(self, a: np.ndarray, b: bytes) -> tuple:
        a *= 2
        return float(a.sum()), len(b), b[:4], a

    @endpoint
    def make(self, n: int) -> bytes:
        return bytes(range(256)) * (n // 256)

    @endpoint
    def bad_result(self) -> object:
        import threading

        return threading.Lock()


def test_tensor_both_ways(procs):
    mesh = procs.spawn("mutator", Mutator)
    tensor = torch.arange(4 * 1024 * 1024, dtype=torch.float32)
    out = mesh.slice(gpus=0).bump.call_one(tensor).get()
    assert out.dtype == torch.float32 and out.shape == tensor.shape
    assert torch.equal(out, tensor + 1) and torch.equal(tensor, torch.arange(4 * 1024 * 1024,
                                                                             dtype=torch.float32))
    out += 1  # what we received is writable too
    results = mesh.bump.call(torch.ones(3, 3)).get()
    assert all(torch.equal(v, torch.full((3, 3), 2.0)) for v in results.values())


def test_arrays_and_bytes(procs):
    mesh = procs.spawn("stats", Mutator)
    array = np.ones(500_000)
    payload = b"abcd" * 1_000_000
    total, size, head, doubled = mesh.slice(gpus=1).stats.call_one(array, payload).get()
    assert (total, size, head) == (1_000_000.0, 4_000_000, b"abcd")
    assert doubled.dtype == np.float64 and doubled[0] == 2.0
    big = mesh.slice(gpus=2).make.call_one(8 * 1024 * 1024).get()
    assert type(big) is bytes and len(big) == 8 * 1024 * 1024 and big[:3] == b"\x00\x01\x02"


def test_unpicklable_arguments_and_results(procs):
    import threading

    mesh = procs.spawn("unpicklable", Mutator)
    with pytest.raises(UnpicklableError, match="could not pickle the arguments of "
                                               "unpicklable.bump"):
        mesh.slice(gpus=0).bump.call_one(threading.Lock())
    with pytest.raises(ActorError) as info:
        mesh.slice(gpus=0).bad_result.call_one().get()
    assert "could not pickle the result of bad_result" in str(info.value)
    assert mesh.slice(gpus=0).make.call_one(256).get() == bytes(range(256))


_taken: dict[str, Any] = {}  # in a proc: weak references to what its Holders were given


class Holder(Actor):
    @endpoint
    def take(self, array: np.ndarray, name: str) -> int:
        import weakref

        _taken[name] = weakref.ref(array)
        return int(array.size)


class Looker(Actor):
    @endpoint
    def alive(self, name: str) -> bool:
        return _taken[name]() is not None


@pytest.mark.parametrize("kind", [Holder, "async"])
def test_an_idle_actor_lets_go_of_its_last_arguments(procs, kind):
    """An actor keeps nothing of a message it answered: a big argument is freed once its
    handler returned, before the answer leaves (an idle actor held its last 64 MiB until the
    next message came, and the next big message faulted in fresh memory of its own)."""
    one = procs.slice(gpus=3)
    holder = one.spawn(f"holder_{kind if isinstance(kind, str) else 'sync'}",
                       AsyncHolder if kind == "async" else Holder)
    looker = one.spawn(f"looker_{kind if isinstance(kind, str) else 'sync'}", Looker)
    name = f"big-{kind}"
    assert holder.take.call_one(np.ones(1 << 18), name).get() == 1 << 18
    assert not looker.alive.call_one(name).get()  # gone before the answer came


class AsyncHolder(Actor):
    @endpoint
    async def take(self, array: np.ndarray, name: str) -> int:
        import weakref

        _taken[name] = weakref.ref(array)
        return int(array.size)
