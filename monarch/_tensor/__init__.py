"""The tensor engine: distributed tensors that feel local (Monarch's `mesh.activate()`).

The public surface is `monarch.tensor_engine` (and the top-level `monarch.inspect`, ...); these
private modules are imported only by code that uses tensors, since they import torch.
"""
