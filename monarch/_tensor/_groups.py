"""Worker side of mesh-level tensor operations: torch.distributed process groups per proc set.

A group is made for each set of procs that reduce together (the procs of a mesh that differ
only along the reduced dimensions) or move tensors between two meshes, and for each stream, on
first use; its members rendezvous through a FileStore in the job's run directory (so nothing
listens on the network but gloo's own loopback connections). CPU tensors use gloo, CUDA tensors
NCCL. Groups are plain `ProcessGroupGloo`/`ProcessGroupNCCL` objects, outside torch's default
world, so any set of procs can form one without the others taking part.

Failures travel with the data: every member of a reduce first shares the (seq, rank) of a
failure its input carries (a tiny all-gather), and a move sends a (seq, rank) header before the
tensor, so a result computed from a failed value is itself failed on every proc that holds it
(with the origin's seq and rank; the text stays on the origin's worker, see TensorWorker).
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import time
from typing import Any

import torch
import torch.distributed as dist

from ..telemetry import record_transfer
from .._geometry._view import View
from ._ops import Failure

TIMEOUT = datetime.timedelta(seconds=300)
_OPS = {"sum": "SUM", "avg": "SUM", "product": "PRODUCT", "min": "MIN", "max": "MAX",
        "band": "BAND", "bor": "BOR", "bxor": "BXOR"}
_STACKS = ("stack", "gather")


class Groups:
    """The process groups of one worker, made on demand."""

    def __init__(self, engine: str, store_path: str, rank: int, name: str) -> None:
        self._engine = engine
        self._store_path = store_path
        self._store: Any = None
        self.rank = rank
        self._name = name
        self._groups: dict[tuple, Any] = {}

    def group(self, members: tuple[int, ...], tag: str, cuda: bool) -> Any:
        """The group of `members` (base ranks) for `tag` (a stream, or "move")."""
        key = (members, tag, cuda)
        pg = self._groups.get(key)
        if pg is None:
            if self._store is None:
                self._store = dist.FileStore(self._store_path, -1)
            digest = hashlib.sha1(repr(key).encode()).hexdigest()[:20]
            store = dist.PrefixStore(f"{self._engine}/{digest}", self._store)
            index = members.index(self.rank)
            if cuda:
                nccl: Any = getattr(dist, "ProcessGroupNCCL")
                pg = nccl(store, index, len(members), nccl.Options())
            else:
                options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
                options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
                options._timeout = TIMEOUT
                pg = dist.ProcessGroupGloo(store, index, len(members), options)
            self._groups[key] = pg
        return pg

    # -- reduce ---------------------------------------------------------------------------------
    def reduce(self, view: View, coords: tuple[int, ...], value: Any, dims: tuple[str, ...],
               reduction: str, scatter: bool, mode: int, spec: tuple, stream: str,
               out: Any) -> tuple[Any, int]:
        """Runs one reduce; returns (the result or a Failure, bytes this proc contributed)."""
        members = reduce_members(view, coords, dims)
        failed = value if isinstance(value, Failure) else None
        x = _zeros(spec) if failed is not None else value
        cuda = x.is_cuda
        pg = self.group(members, stream, cuda)
        started = time.perf_counter()
        forwarded = self._share_failure(pg, len(members), failed, x.device)
        n = len(members)
        if reduction in _STACKS:
            result = self._stack(pg, x, n, scatter)
        else:
            result = self._combine(pg, x, n, reduction, scatter, inplace=(mode == 1))
        seconds = time.perf_counter() - started
        nbytes = x.numel() * x.element_size()
        record_transfer(nbytes, seconds, self._name,
                                  f"group of {n} ({'nccl' if cuda else 'gloo'})",
                                  f"{'nccl' if cuda else 'gloo'} {reduction}", "tensor_engine")
        if failed is not None or forwarded is not None:
            return (failed or forwarded), nbytes
        if mode == 2 and not isinstance(out, Failure):
            out.copy_(result)
            result = out
        return result, nbytes

    def _share_failure(self, pg: Any, n: int, failed: Failure | None,
                       device: torch.device) -> Failure | None:
        mine = torch.tensor([failed.seq, failed.rank] if failed else [0, -1], dtype=torch.int64,
                            device=device)
        everyone = torch.empty((n, 2), dtype=torch.int64, device=device)
        pg.allgather([list(everyone.unbind(0))], [mine]).wait()
        for seq, rank in everyone.tolist():
            if seq:
                return Failure(seq, rank, "")
        return None

    def _stack(self, pg: Any, x: torch.Tensor, n: int, scatter: bool) -> torch.Tensor:
        x = x.contiguous()
        if scatter:
            out = torch.empty_like(x)
            pg.alltoall_base(out, x, [], [], dist.AllToAllOptions()).wait()
            return out
        out = torch.empty((n, *x.shape), dtype=x.dtype, device=x.device)
        pg.allgather([list(out.unbind(0))], [x]).wait()
        return out

    def _combine(self, pg: Any, x: torch.Tensor, n: int, reduction: str, scatter: bool,
                 inplace: bool) -> torch.Tensor:
        op = getattr(dist.ReduceOp, _OPS[reduction])
        if scatter:
            out = torch.empty(x.shape[1:], dtype=x.dtype, device=x.device)
            scatter_opts = dist.ReduceScatterOptions()
            scatter_opts.reduceOp = op
            pg.reduce_scatter([out], [list(x.contiguous().unbind(0))], scatter_opts).wait()
        else:
            out = x if inplace and x.is_contiguous() else x.contiguous().clone()
            opts = dist.AllreduceOptions()
            opts.reduceOp = op
            pg.allreduce([out], opts).wait()
        if reduction == "avg":
            if out.is_floating_point() or out.is_complex():
                out.div_(n)
            else:
                out.floor_divide_(n)
        if inplace and out is not x:
            x.copy_(out)
            out = x
        return out

    # -- to_mesh --------------------------------------------------------------------------------
    def move(self, seq: int, value: Any, src_view: View, dst_view: View, spec: tuple,
             send: bool, receive: bool, handoff: Any) -> tuple[Any, int]:
        """The sending and/or receiving part of a to_mesh on this proc; returns (what this proc
        received, or None, bytes sent and received)."""
        pairs = move_pairs(src_view, dst_view)
        members = tuple(sorted({r for pair in pairs for r in pair}))
        if self.rank not in members:
            return None, 0
        cuda = spec[2].startswith("cuda")
        pg = self.group(members, "move", cuda)
        tag = seq & 0x3FFFFFFF
        works, moved, received = [], 0, None
        started = time.perf_counter()
        if send:
            failed = value if isinstance(value, Failure) else None
            data = _zeros(spec) if failed is not None else value.contiguous()
            header = torch.tensor([failed.seq, failed.rank] if failed else [0, -1],
                                  dtype=torch.int64, device=data.device)
            for src, dst in pairs:
                if src != self.rank:
                    continue
                if dst == self.rank:
                    handoff(failed or data.clone())
                    continue
                peer = members.index(dst)
                works.append(pg.send([header], peer, tag))
                works.append(pg.send([data], peer, tag))
                moved += data.numel() * data.element_size()
        if receive:
            src = next(s for s, d in pairs if d == self.rank)
            if src == self.rank:
                received = handoff(None)
            else:
                header = torch.empty(2, dtype=torch.int64, device=_local_device(spec[2]))
                buffer = _zeros(spec)
                peer = members.index(src)
                pg.recv([header], peer, tag).wait()
                pg.recv([buffer], peer, tag).wait()
                moved += buffer.numel() * buffer.element_size()
                failed_seq, failed_rank = header.tolist()
                received = Failure(failed_seq, failed_rank, "") if failed_seq else buffer
        for work in works:
            work.wait()
        if moved:
            record_transfer(moved, time.perf_counter() - started, self._name,
                                      "to_mesh", "gloo p2p" if not cuda else "nccl p2p",
                                      "tensor_engine")
        return received, moved


def reduce_members(view: View, coords: tuple[int, ...], dims: tuple[str, ...]) -> tuple[int, ...]:
    """Base ranks of the procs of `view` that share `coords` except along `dims` (row-major
    over `dims` in the order given)."""
    axes = [view.labels.index(d) for d in dims]
    base = view.offset + sum(c * s for i, (c, s) in enumerate(zip(coords, view.strides))
                             if i not in axes)
    ranges = [range(view.sizes[a]) for a in axes]
    return tuple(base + sum(c * view.strides[a] for c, a in zip(combo, axes))
                 for combo in itertools.product(*ranges))


def move_pairs(src: View, dst: View) -> list[tuple[int, int]]:
    """(source base rank, destination base rank) for every destination point: the source
    point has the destination's coordinates along the source's dimensions (0 along a size-1
    source dimension the destination lacks)."""
    pairs = []
    for j in range(len(dst)):
        coords = dict(zip(dst.labels, dst.coords(j)))
        index = 0
        for label, size in zip(src.labels, src.sizes):
            index = index * size + coords.get(label, 0)
        pairs.append((src.rank_at(index), dst.rank_at(j)))
    return pairs


def _zeros(spec: tuple) -> torch.Tensor:
    shape, dtype, device = spec
    return torch.zeros(shape, dtype=dtype, device=_local_device(device))


def _local_device(device: str) -> torch.device:
    """The controller's device name as this proc's device: "cuda:0" in the controller's
    metadata is this proc's own GPU (the current device)."""
    if device.startswith("cuda"):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(device)
