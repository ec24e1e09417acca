"""How `split` (and `rename`, a split into one name) reshapes a view's dimensions.

The keywords of a split mix two kinds: an existing label maps to the names it becomes, any other
keyword is the integer size of a new dimension. The error texts are Monarch's.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from ._extent import check_label, product, unsigned

Dims = tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]


def split_dims(labels: tuple[str, ...], sizes: tuple[int, ...], strides: tuple[int, ...],
               kwargs: dict[str, Any]) -> Dims:
    """New `(labels, sizes, strides)` after splitting as `kwargs` say (see `View.split`)."""
    splits, constraints = _sort_keywords(labels, kwargs)
    used: set[str] = set()
    out_labels: list[str] = []
    out_sizes: list[int] = []
    out_strides: list[int] = []
    for label, size, stride in zip(labels, sizes, strides):
        if label not in splits:
            out_labels.append(label)
            out_sizes.append(size)
            out_strides.append(stride)
            continue
        names = _names(splits[label])
        new_sizes = _derive_sizes(label, size, names, constraints)
        used.update(names)
        out_labels += names
        out_sizes += new_sizes
        out_strides += _nested_strides(stride, new_sizes)
    unused = tuple(name for name in constraints if name not in used)
    if unused:
        raise ValueError(f"unused size constraints: {unused!r}")
    _check_distinct(out_labels)
    return tuple(out_labels), tuple(out_sizes), tuple(out_strides)


def _sort_keywords(labels: tuple[str, ...],
                   kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    splits: dict[str, Any] = {}
    constraints: dict[str, int] = {}
    for key, value in kwargs.items():
        if key in labels:
            splits[key] = value
        elif _is_integer(value):
            constraints[key] = unsigned(value, key)
        else:
            raise ValueError(f"{key!r} is not an existing dim. Expected an integer size "
                             "constraint on a new dim.")
    return splits, constraints


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # Monarch's error is a ValueError here
        raise ValueError(f"expected a sequence of dimensions, but got {value!r}")  # noqa: TRY004
    return tuple(check_label(name) for name in value)


def _derive_sizes(label: str, size: int, names: tuple[str, ...],
                  constraints: dict[str, int]) -> list[int]:
    unknown = None
    for name in names:
        if name not in constraints:
            if unknown is not None:
                raise ValueError(f"Cannot infer size of {names!r} because both {name} and "
                                 f"{unknown} have unknown size. Specify at least one as "
                                 f"argument, e.g. {name}=4")
            unknown = name
    known = product([constraints[n] for n in names if n != unknown])
    shown = tuple(constraints.get(n, "?") for n in names)
    if unknown is None:
        if known != size:
            raise _not_divided(label, size, names, shown)
        return [constraints[n] for n in names]
    if known == 0:
        raise ZeroDivisionError("integer division or modulo by zero")
    quotient, remainder = divmod(size, known)
    if remainder:
        raise _not_divided(label, size, names, shown)
    return [quotient if n == unknown else constraints[n] for n in names]


def _not_divided(label: str, size: int, names: tuple[str, ...],
                 shown: tuple[Any, ...]) -> ValueError:
    return ValueError(f"Dimension {label!r} of size {size} is not evenly divided by {names!r} "
                      f"with sizes {shown!r}")


def _nested_strides(stride: int, sizes: Sequence[int]) -> list[int]:
    # The innermost new dimension steps like the old one; each outer one spans the inner ones.
    out = []
    for size in reversed(sizes):
        out.append(stride)
        stride *= size
    return out[::-1]


def _check_distinct(labels: list[str]) -> None:
    seen: set[str] = set()
    for label in labels:
        if label in seen:
            raise ValueError(f"Duplicate dimension name {label!r}")
        seen.add(label)


def _is_integer(value: Any) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return True
