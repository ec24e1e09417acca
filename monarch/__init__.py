"""A pure-Python Monarch: single-controller distributed actors.

Users import from `monarch.actor`, `monarch.rdma` and `monarch.config`; the tensor engine's
names (`monarch.inspect`, `monarch.remote`, ...: see `monarch.tensor_engine`) are served here
on first use. Importing this package starts nothing (and does not import torch).
"""

from typing import Any

__version__ = "0.1.0"

# Monarch's top-level tensor-engine names, served lazily from monarch.tensor_engine.
_TENSOR_ENGINE = frozenset({
    "RemoteException", "Stream", "Tensor", "call_on_shard_and_fetch", "fetch_shard",
    "get_active_mesh", "get_active_stream", "grad_generator", "inspect", "no_mesh", "reduce",
    "reduce_", "remote", "show", "slice_mesh", "to_mesh",
})


def __getattr__(name: str) -> Any:
    if name in _TENSOR_ENGINE:
        from . import tensor_engine

        value = getattr(tensor_engine, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'monarch' has no attribute {name!r}")
