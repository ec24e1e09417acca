"""Buffers of every kind with known contents, for the data-plane tests (and their actors)."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import numpy as np
import torch

KINDS = ("tensor", "bf16", "numpy", "bytearray", "memoryview", "bytes")
WRITABLE = tuple(kind for kind in KINDS if kind != "bytes")


def content(nbytes: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(nbytes)


def make(kind: str, nbytes: int, seed: int = 0) -> Any:
    """An object of `kind` holding `content(nbytes, seed)` (nbytes: a multiple of 4)."""
    data = bytearray(content(nbytes, seed))
    if kind == "tensor":
        return torch.frombuffer(data, dtype=torch.float32).clone()
    if kind == "bf16":
        return torch.frombuffer(data, dtype=torch.bfloat16).clone().reshape(2, -1)
    if kind == "numpy":
        return np.frombuffer(data, dtype=np.int16).copy()
    if kind == "bytearray":
        return data
    if kind == "memoryview":
        return memoryview(bytearray(b"<<" + data + b">>"))[2:-2]
    if kind == "bytes":
        return bytes(data)
    raise ValueError(kind)


def raw(obj: Any) -> bytes:
    """The bytes an object of any kind holds."""
    if isinstance(obj, torch.Tensor):
        return obj.contiguous().view(torch.uint8).reshape(-1).numpy().tobytes()
    if isinstance(obj, np.ndarray):
        return obj.tobytes()
    return bytes(obj)


def digest(obj: Any) -> str:
    return hashlib.sha256(raw(obj)).hexdigest()
