"""Pure parts of the tensor engine: metadata propagation, groups and pairs, tables, scanning."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from monarch._geometry._view import View
from monarch._tensor import _meta
from monarch._tensor._dispatch import _scan
from monarch._tensor._groups import move_pairs, reduce_members
from monarch._tensor._table import grid, render

aten = torch.ops.aten


def remote_like(shape, group=None):
    """What `compute` needs of a remote tensor: its metadata and its alias group."""
    t = torch.empty(shape)
    return SimpleNamespace(_meta=_meta.meta_of(t), _aliases=group or object())


def test_outputs_are_described_as_new_views_inputs_or_values():
    a, b = remote_like((3, 4)), remote_like((4, 2))
    spec, leaves = _meta.compute(aten.mm.default, (a, b), {}, [a, b])
    assert leaves == ((_meta.NEW, ((3, 2), (2, 1), 0, torch.float32, torch.device("cpu"))),)
    _, leaves = _meta.compute(aten.add_.Tensor, (a, 1), {}, [a])
    assert leaves == ((_meta.SAME, 0),)
    _, leaves = _meta.compute(aten.select.int, (a, 0, 2), {}, [a])
    assert leaves[0][0] == _meta.VIEW and leaves[0][1] == 0 and leaves[0][2][:3] == ((4,), (1,), 8)
    _, leaves = _meta.compute(aten.is_same_size.default, (a, a), {}, [a, a])
    assert leaves == ((_meta.VALUE, True),)
    spec, leaves = _meta.compute(aten.std_mean.correction, (a,), {"dim": [0]}, [a])
    assert len(leaves) == 2 and all(kind == _meta.NEW for kind, _ in leaves)


def test_inputs_of_one_alias_group_share_a_fake_storage():
    group = object()
    whole = _meta.meta_of(torch.empty(4, 4))
    row = ((4,), (1,), 8, torch.float32, torch.device("cpu"))
    fakes = _meta.fakes_for([whole, row], [group, group])
    assert fakes[0].untyped_storage()._cdata == fakes[1].untyped_storage()._cdata
    assert fakes[1].storage_offset() == 8 and tuple(fakes[1].shape) == (4,)


def test_data_dependent_shapes_and_shape_errors_are_raised():
    a = remote_like((5,))
    with pytest.raises(_meta.DataDependentError, match="depends on tensor values"):
        _meta.compute(aten.nonzero.default, (a,), {}, [a])
    b = remote_like((2, 3))
    with pytest.raises(RuntimeError):
        _meta.compute(aten.mm.default, (b, b), {}, [b, b])


def test_a_signature_is_computed_once():
    a = remote_like((2, 2))
    key = ("test_a_signature_is_computed_once", aten.relu.default, a._meta)
    first = _meta.propagate(aten.relu.default, key, (a,), {}, [a])
    other = remote_like((9,))  # a different shape under the same key: the cached answer wins
    assert _meta.propagate(aten.relu.default, key, (other,), {}, [other]) is first
    unhashable = ("x", [1])
    assert _meta.propagate(aten.relu.default, unhashable, (other,), {}, [other])[1][0][1][0] == (9,)


def test_scanning_makes_refs_and_signatures():
    local = torch.ones(2)
    tensors: list = []
    locals_: list = []
    wire, key = _scan([1, 2.0, (None, torch.float32), {"k": "v"}, local], tensors, locals_)
    assert locals_ == [local] and tensors == []
    assert key[0] is list and key[1][0] == (int, 1) and key[1][1] == (float, 2.0)
    _, odd = _scan(object(), [], [])
    with pytest.raises(TypeError):
        hash(odd)  # an object of no known kind is never cached


def test_reduce_groups_are_the_procs_differing_only_along_the_dims():
    view = View.dense(("host", "gpu"), (2, 4))
    assert reduce_members(view, (1, 2), ("gpu",)) == (4, 5, 6, 7)
    assert reduce_members(view, (1, 2), ("host",)) == (2, 6)
    assert reduce_members(view, (0, 3), ("host", "gpu")) == tuple(range(8))
    sliced = view.slice(gpu=slice(1, 4, 2))  # gpus 1 and 3
    assert reduce_members(sliced, (1, 1), ("gpu",)) == (5, 7)


def test_move_pairs_match_coordinates_and_broadcast():
    full = View.dense(("pp", "gpu"), (2, 2))
    first, second = full.slice(pp=0), full.slice(pp=1)
    assert move_pairs(first, second) == [(0, 2), (1, 3)]
    assert move_pairs(full.slice(pp=0, gpu=1), full) == [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert move_pairs(first, full) == [(0, 0), (1, 1), (0, 2), (1, 3)]


def test_grids_are_plain_text():
    text = grid([str(i) for i in range(6)], ["host", "gpu"], [2, 3], title="t")
    lines = text.splitlines()
    assert lines[0] == "t" and "gpu=2" in lines[1] and lines[3].startswith("host=0 |")
    assert lines[4].split("|")[-1].strip() == "5"
    assert "[a=1]" in grid([str(i) for i in range(8)], ["a", "b", "c"], [2, 2, 2])
    shown = render(torch.arange(3.0))
    assert "tensor (3,) torch.float32" in shown and "2.0000" in shown
    assert render({"x": 1}) == "x:\n1"
