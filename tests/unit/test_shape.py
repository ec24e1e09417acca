"""Mesh geometry: Views, Points, Extents and ValueMesh, with Monarch's texts."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monarch._shape import Extent, Point, View
from monarch._value_mesh import ValueMesh


def test_extent_and_point_print_like_monarch():
    extent = Extent(["hosts", "gpus"], [2, 4])
    assert repr(extent) == "{hosts: 2, gpus: 4}" and extent.nelements == 8
    assert extent["gpus"] == 4 and extent.keys() == ["hosts", "gpus"]
    point = Point(7, extent)
    assert repr(point) == "{'hosts': 1/2, 'gpus': 3/4}"
    assert dict(point) == {"hosts": 1, "gpus": 3} and point.rank == 7 and point.size("gpus") == 4
    assert repr(Point(0, Extent([], []))) == "{}"
    assert pickle.loads(pickle.dumps(point)) == point


def test_value_mesh_prints_like_monarch():
    small = ValueMesh(Extent(["gpus"], [2]), [1, 1])
    assert repr(small) == "ValueMesh({gpus: 2}):\n  (({'gpus': 0/2}, 1), ({'gpus': 1/2}, 1))"
    assert str(small) == repr(small)
    big = ValueMesh(Extent(["hosts", "gpus"], [2, 2]),
                    [{"rank": r, "hosts": r // 2, "gpus": r % 2} for r in range(4)])
    assert repr(big) == (
        "ValueMesh({hosts: 2, gpus: 2}):\n"
        "  (({'hosts': 0/2, 'gpus': 0/2}, {'gpus': 0, 'hosts': 0, 'rank': 0}),\n"
        "   ({'hosts': 0/2, 'gpus': 1/2}, {'gpus': 1, 'hosts': 0, 'rank': 1}),\n"
        "   ({'hosts': 1/2, 'gpus': 0/2}, {'gpus': 0, 'hosts': 1, 'rank': 2}),\n"
        "   ({'hosts': 1/2, 'gpus': 1/2}, {'gpus': 1, 'hosts': 1, 'rank': 3}))")
    assert repr(ValueMesh(Extent([], []), [42])) == "ValueMesh({}):\n  (({}, 42),)"


def test_value_mesh_access_and_geometry():
    mesh = ValueMesh(Extent(["hosts", "gpus"], [2, 4]), list(range(8)))
    assert mesh.item(hosts=1, gpus=2) == 6 and mesh.get(3) == 3 and len(mesh) == 8
    assert mesh.size() == 8 and mesh.size("gpus") == 4 and mesh.sizes == {"hosts": 2, "gpus": 4}
    assert list(mesh.slice(gpus=slice(0, 4, 2)).values()) == [0, 2, 4, 6]
    assert list(mesh.slice(hosts=1).flatten("r").values()) == [4, 5, 6, 7]
    assert mesh.flatten("r").extent == Extent(["r"], [8])
    assert mesh.rename(gpus="g").sizes == {"hosts": 2, "g": 4}
    assert mesh.split(gpus=("a", "b"), a=2).sizes == {"hosts": 2, "a": 2, "b": 2}
    with pytest.raises(KeyError, match="gpus"):
        mesh.item(hosts=1)
    restored = pickle.loads(pickle.dumps(mesh.slice(hosts=0)))
    assert list(restored.values()) == [0, 1, 2, 3]
    assert ValueMesh.from_indexed(Extent(["x"], [2]), [(1, "b"), (0, "a")]).get(0) == "a"


@pytest.mark.parametrize("call, error, text", [
    (lambda v: v.slice(foo=1), TypeError, "Shape does not have dimension labeled 'foo'"),
    (lambda v: v.slice(gpus=9), IndexError, "index out of range"),
    (lambda v: v.slice(gpus=-1), IndexError, "index out of range"),
    (lambda v: v.slice(gpus=slice(5, 9)), ValueError,
     "out of range 4:4:1 for dimension gpus of size 4"),
    (lambda v: v.rename(foo="x"), ValueError,
     "'foo' is not an existing dim. Expected an integer size constraint on a new dim."),
    (lambda v: v.slice(gpus=slice(0, 4, 2)).flatten("r"), ValueError,
     "cannot flatten sparse mesh: ndslice.strides=[4, 2] != dense_strides=[2, 1]"),
])
def test_errors_read_like_monarch(call, error, text):
    with pytest.raises(error) as info:
        call(View.dense(["hosts", "gpus"], [2, 4]))
    assert str(info.value) == text


dims = st.lists(st.integers(1, 4), min_size=1, max_size=3)


@given(dims, st.data())
def test_slicing_agrees_with_the_enumerated_ranks(sizes, data):
    labels = [f"d{i}" for i in range(len(sizes))]
    view = View.dense(labels, sizes, offset=data.draw(st.integers(0, 5)))
    label = data.draw(st.sampled_from(labels))
    size = sizes[labels.index(label)]
    start = data.draw(st.integers(0, size - 1))
    step = data.draw(st.integers(1, 3))
    sub = view.slice(**{label: slice(start, size, step)})
    dim = labels.index(label)
    expected = [view.rank_at(i) for i in range(len(view))
                if (view.coords(i)[dim] - start) % step == 0 and view.coords(i)[dim] >= start]
    assert sub.ranks() == expected
    for index, rank in enumerate(sub.ranks()):
        assert sub.rank_at(index) == rank and sub.index_of(rank) == index
    assert View.from_wire(sub.to_wire()) == sub


@given(st.integers(1, 300), st.integers(2, 16))
def test_cast_tree_chunks_cover_each_index_once(n, fanout):
    view = View.dense(["x"], [n])
    seen: list[int] = []
    depth = 0

    def visit(lo: int, hi: int, level: int) -> None:
        nonlocal depth
        depth = max(depth, level)
        seen.append(lo)
        for clo, chi in view.chunks(lo, hi, fanout):
            visit(clo, chi, level + 1)

    visit(0, n, 0)
    assert sorted(seen) == list(range(n))
    bound = 0
    reach = 1
    while reach < n:
        reach = reach * fanout + 1
        bound += 1
    assert depth <= max(bound, 1) + 1
