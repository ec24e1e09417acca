"""Distributed tensors that feel local: Monarch's tensor engine, on CPU (gloo) and GPUs (NCCL).

    import monarch, torch
    from monarch.actor import this_host

    procs = this_host().spawn_procs(per_host={"gpus": 4})
    with procs.activate():
        t = torch.rand(3, 4)                 # one 3x4 tensor on each proc
        s = (t @ t.T).reduce("gpus", "sum")  # summed across the procs, on every proc
    print(monarch.inspect(s))                # its value, here

Inside `activate()` torch ops (and `nn.Module`s built there) run on every proc of the mesh;
the controller holds `monarch.Tensor` handles (shape, dtype, device; no data), records each op
and sends them in batches without waiting. Values come back with `inspect` / `fetch_shard`.
An op that fails on a proc (an impossible allocation, a remote function's error) does not stop
anything: its results are failed, and the next fetch of anything depending on them raises
`RemoteException` with the worker's traceback. These names are also `monarch.<name>`.
"""

from ._tensor import _load  # noqa: F401 - loads the verbs of monarch.Tensor and DeviceMesh
from ._tensor._collectives import MeshSliceTensor, reduce, reduce_, slice_mesh, to_mesh
from ._tensor._fetch import RemoteException, call_on_shard_and_fetch, fetch_shard, inspect, show
from ._tensor._grad import GradientGenerator, grad_generator
from ._tensor._mesh import DeviceMesh, get_active_mesh, no_mesh
from ._tensor._proxy import Tensor
from ._tensor._remote import Remote, remote
from ._tensor._stream import Borrow, Stream, get_active_stream

__all__ = [
    "Borrow", "DeviceMesh", "GradientGenerator", "MeshSliceTensor", "Remote", "RemoteException",
    "Stream", "Tensor", "call_on_shard_and_fetch", "fetch_shard", "get_active_mesh",
    "get_active_stream", "grad_generator", "inspect", "no_mesh", "reduce", "reduce_", "remote",
    "show", "slice_mesh", "to_mesh",
]
