"""Versioned weight sync over `RDMABuffer` (the role TorchStore plays for RL).

    # trainer
    version = await put_state_dict(model.state_dict(), "policy")
    # generators
    sd = await get_state_dict("policy", into=model.state_dict())    # sd.version == version

`put_state_dict` snapshots the tensors into one buffer of the calling process (one memcpy; the
caller may change its tensors as soon as the call returns), registers an `RDMABuffer` per
tensor over that snapshot and publishes the manifest in the job's index (an actor in the
controller) as the key's next version. `get_state_dict` fetches the newest manifest and reads
every tensor straight into `into`'s tensors (same dtype and shape; in place, so the model's
parameters are updated): on one host each read is a single copy from the publisher's memory
into the reader's (`process_vm_readv`), with no message, pickling or staging between.

Only the newest version of a key is kept: publishing version n+1 drops version n's buffers, so
its memory is freed once the reads in progress finish. A reader whose version was replaced
before it started reading retries with the newest one.
"""

from __future__ import annotations

from typing import Any, Mapping

from ._controller import _start as _jobstart  # noqa: F401 - a controller starts on first use
from ._runtime._future import Future
from ._rl._weights import INDEX_NAME, VersionReleasedError, WeightIndex

ALIGN = 64
"""Each tensor's snapshot starts at a multiple of this many bytes."""


class StateDict(dict):  # type: ignore[type-arg]
    """A state dict read by `get_state_dict`; `version` is the version it holds."""

    version: int = 0


def put_state_dict(state_dict: Mapping[str, Any], key: str, *,
                   copy: bool = True) -> Future[int]:
    """Publishes `state_dict` as the next version of `key`.

    Args:
        state_dict: names to tensors (CPU or CUDA) and other picklable values (sent inline).
        key: the name readers ask for.
        copy: snapshot the tensors (the default: readers always see this version, whatever the
            caller does to its tensors afterwards). With False the tensors themselves are
            registered (no copy; they must be contiguous, and left unchanged until the next put
            of this key, or readers may see a mix).

    Returns:
        A future of the version number (1 for the first put of a key).
    """
    entries = _register(state_dict, copy)
    return Future._from_coro(_publish(key, entries))


def get_state_dict(key: str, into: Mapping[str, Any] | None = None, *,
                   version: int | None = None, timeout: float = 60) -> Future[StateDict]:
    """Reads a version of `key` (the newest by default).

    Args:
        key: what `put_state_dict` published.
        into: tensors to read into, by name (e.g. `model.state_dict()`): each must have the
            stored dtype and shape. Names missing here get new CPU tensors.
        version: a specific version; it must still be the newest (else VersionReleasedError).
        timeout: seconds the reads may take.

    Returns:
        A future of a `StateDict` (its tensors are `into`'s where given) with `.version`.
        It fails with KeyError for an unknown key, ValueError for a tensor of `into` that
        does not match, or the data plane's errors (`OwnerGoneError` if the publisher died).
    """
    return Future._from_coro(_read(key, dict(into) if into is not None else {}, version,
                             float(timeout)))


def latest_version(key: str) -> Future[int | None]:
    """A future of the newest version of `key` (None if nothing was put under it)."""
    return Future._from_coro(_latest(key))


def delete_state_dict(key: str) -> Future[bool]:
    """Forgets `key` and releases its memory; a future of whether it existed."""
    return Future._from_coro(_delete(key))


# -- publishing -------------------------------------------------------------------------------

def _register(state_dict: Mapping[str, Any], copy: bool) -> dict[str, Any]:
    import torch

    from .rdma import RDMABuffer

    tensors = {name: value.detach() for name, value in state_dict.items()
               if isinstance(value, torch.Tensor)}
    entries: dict[str, Any] = {name: ("value", value) for name, value in state_dict.items()
                               if name not in tensors}
    views = _snapshot(tensors) if copy else _in_place(tensors)
    for name, tensor in tensors.items():
        view = views[name]
        buffer = RDMABuffer(view) if view.numel() else None
        entries[name] = ("tensor", tensor.dtype, tuple(tensor.shape), view.numel(), buffer)
    return entries


def _snapshot(tensors: dict[str, Any]) -> dict[str, Any]:
    """One uint8 buffer holding a copy of every tensor; a byte view of each copy."""
    import torch

    sizes = {name: t.numel() * t.element_size() for name, t in tensors.items()}
    total = sum(-(-n // ALIGN) * ALIGN for n in sizes.values())
    staging = torch.empty(total, dtype=torch.uint8)
    views, offset = {}, 0
    for name, tensor in tensors.items():
        view = staging[offset:offset + sizes[name]]
        if sizes[name]:
            view.copy_(_bytes_of(tensor.contiguous()))
        views[name] = view
        offset += -(-sizes[name] // ALIGN) * ALIGN
    return views


def _in_place(tensors: dict[str, Any]) -> dict[str, Any]:
    for name, tensor in tensors.items():
        if not tensor.is_contiguous():
            raise ValueError(f"put_state_dict(copy=False): tensor {name!r} is not contiguous")
    return {name: _bytes_of(tensor) for name, tensor in tensors.items()}


def _bytes_of(tensor: Any) -> Any:
    import torch

    return tensor.reshape(-1).view(torch.uint8)


async def _publish(key: str, entries: dict[str, Any]) -> int:
    index = await _index()
    try:
        version: int = await index.publish.call_one(key, entries)
    except BaseException:
        from ._rl._weights import release

        release(entries)
        raise
    return version


# -- reading ----------------------------------------------------------------------------------

async def _read(key: str, into: dict[str, Any], version: int | None,
                timeout: float) -> StateDict:
    from .rdma import BufferDroppedError

    index = await _index()
    while True:
        found, entries = await _unwrapped(index.fetch.call_one(key, version))
        try:
            return await _read_version(found, entries, into, timeout)
        except BufferDroppedError:
            # replaced while we read: the newest is another version (else it is an error)
            newest, _ = await _unwrapped(index.fetch.call_one(key, None))
            if version is not None or newest == found:
                raise


async def _read_version(version: int, entries: dict[str, Any], into: dict[str, Any],
                        timeout: float) -> StateDict:
    import torch

    from .rdma import RDMAAction

    out = StateDict()
    out.version = version
    action, staged = RDMAAction(), []
    for name, entry in entries.items():
        if entry[0] == "value":
            out[name] = entry[1]
            continue
        _, dtype, shape, nbytes, buffer = entry
        dst = into.get(name)
        if dst is None:
            dst = torch.empty(shape, dtype=dtype)
        elif tuple(dst.shape) != shape or dst.dtype != dtype:
            raise ValueError(f"get_state_dict: {name!r} is {dtype} {list(shape)} in the store "
                             f"but {dst.dtype} {list(dst.shape)} in `into`")
        out[name] = dst
        if buffer is None:
            continue
        if dst.is_contiguous() and dst.device.type == "cpu":
            action.read_remote(_bytes_of(dst), buffer)
        else:  # read into a contiguous CPU copy, then copy into place
            tmp = torch.empty(nbytes, dtype=torch.uint8)
            action.read_remote(tmp, buffer)
            staged.append((dst, tmp))
    await action.submit(timeout=int(max(timeout, 1)))
    for dst, tmp in staged:
        dst.copy_(tmp.view(dst.dtype).reshape(dst.shape))
    return out


async def _unwrapped(call: Future[Any]) -> Any:
    """The answer of an index call; the index's own KeyError raised as such."""
    from ._runtime._errors import ActorError

    try:
        return await call
    except ActorError as exc:
        if isinstance(exc.exception, KeyError):
            raise exc.exception from None
        raise


# -- the index --------------------------------------------------------------------------------

async def _index() -> Any:
    from ._runtime._singletons import get_or_spawn_controller

    return await get_or_spawn_controller(INDEX_NAME, WeightIndex)


async def _latest(key: str) -> int | None:
    index = await _index()
    versions: dict[str, int] = await index.versions.call_one()
    return versions.get(key)


async def _delete(key: str) -> bool:
    index = await _index()
    deleted: bool = await index.delete.call_one(key)
    return deleted


__all__ = ["StateDict", "VersionReleasedError", "delete_state_dict", "get_state_dict",
           "latest_version", "put_state_dict"]
