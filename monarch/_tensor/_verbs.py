"""The tensor engine's verbs as its nouns call them: one import layer below both.

The nouns (`Tensor`, `DeviceMesh`) offer verbs on themselves — `t.reduce(...)`, `t.to_mesh(...)`,
`mesh.rank(...)`, an op recorded while a mesh is active — whose code lives above them, in
`_dispatch` and `_collectives`, which build on the nouns. So the nouns call the verbs through the
slots below, which those modules fill when they are imported (`_load` imports them: every way to
a remote tensor passes it first). The imports then run one way: nouns, then verbs.
"""

from __future__ import annotations

from typing import Any, Callable


def _not_loaded(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("monarch's tensor engine is not loaded: import monarch.tensor_engine "
                       "(a ProcMesh's activate() loads it)")


dispatch: Callable[..., Any] = _not_loaded
"""`dispatch(func, args, kwargs, ambient_mesh)`: one torch op recorded on a mesh (`_dispatch`)."""

reduce_tensor: Callable[..., Any] = _not_loaded
"""`reduce_tensor(t, dims, reduction, scatter, mesh, inplace, out)` (`_collectives`)."""

rank_tensor: Callable[..., Any] = _not_loaded
"""`rank_tensor(mesh, dims)`: each proc's coordinate along `dims`, remote (`_collectives`)."""

mesh_slice: Callable[..., Any] = _not_loaded
"""`mesh_slice(t, mesh)`: `t`'s values on a slice of its mesh, a `MeshSliceTensor`
(`_collectives`)."""
