"""Mesh geometry: Extent, Point and View, with the texts torchmonarch 0.7.0 prints.

Every literal message below was observed on the reference (through ValueMesh, ProcMesh and
ActorMesh `.slice/.flatten/.rename/.split`, which all word them the same way).
"""

from __future__ import annotations

import pickle
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monarch._geometry._view import DimensionNotFound, Extent, Point, View

# -- Extent ------------------------------------------------------------------------------------


def test_extent_prints_and_reads_like_monarch():
    extent = Extent(["hosts", "gpus"], [2, 4])
    assert repr(extent) == str(extent) == "{hosts: 2, gpus: 4}"
    assert extent.labels == extent.keys() == list(extent) == ["hosts", "gpus"]
    assert extent.sizes == [2, 4] and extent.nelements == 8 and len(extent) == 2
    assert extent["gpus"] == 4 and "gpus" in extent and "x" not in extent
    assert dict(extent) == {"hosts": 2, "gpus": 4}
    assert Extent(("hosts", "gpus"), (2, 4)) == extent != Extent(["hosts", "gpus"], [2, 3])
    assert extent != {"hosts": 2, "gpus": 4}
    assert hash(extent) == hash(Extent(["hosts", "gpus"], [2, 4]))
    assert pickle.loads(pickle.dumps(extent)) == extent
    assert repr(Extent([], [])) == "{}" and Extent([], []).nelements == 1
    assert Extent(["a"], [0]).nelements == 0 and Extent(["a"], [True]).sizes == [1]


def test_extent_is_immutable():
    extent = Extent(["hosts"], [2])
    extent.labels.append("x")
    assert extent.labels == ["hosts"]
    with pytest.raises(AttributeError, match="'sizes' of 'Extent' objects is not writable"):
        extent.sizes = [3]  # type: ignore[misc]


@pytest.mark.parametrize("label, text", [
    ("a_b", "{a_b: 2}"), ("1a", "{1a: 2}"), ("", "{: 2}"), ("a-b", '{"a-b": 2}'),
    ("gpus/4", '{"gpus/4": 2}'), ("ab c", '{"ab c": 2}'), ("é", '{"é": 2}'),
    ('a"b', '{"a\\"b": 2}'), ("a\\b", '{"a\\\\b": 2}'), ("a\nb", '{"a\\nb": 2}'),
])
def test_extent_quotes_labels_that_are_not_words(label, text):
    assert repr(Extent([label], [2])) == text


@pytest.mark.parametrize("make, error, text", [
    (lambda: Extent(["a", "b"], [3]), ValueError, "label/sizes dimension mismatch: 2 != 1"),
    (lambda: Extent(["a"], [-1]), OverflowError, "can't convert negative int to unsigned"),
    (lambda: Extent([1], [2]), TypeError,
     "argument 'labels': 'int' object cannot be cast as 'str'"),
    (lambda: Extent(["a"], [2.0]), TypeError,
     "argument 'sizes': 'float' object cannot be interpreted as an integer"),
    (lambda: Extent(["a"], ["2"]), TypeError,
     "argument 'sizes': 'str' object cannot be interpreted as an integer"),
    (lambda: Extent("ab", [1, 2]), TypeError, "argument 'labels': Can't extract `str` to `Vec`"),
    (lambda: Extent(["a"], [2])["x"], ValueError, "Dimension 'x' not found"),
    (lambda: Extent(["a"], [2])[0], TypeError,
     "argument 'label': 'int' object cannot be cast as 'str'"),
])
def test_extent_errors_read_like_monarch(make, error, text):
    with pytest.raises(error) as info:
        make()
    assert str(info.value) == text


# -- Point -------------------------------------------------------------------------------------


def test_point_prints_and_maps_like_monarch():
    extent = Extent(["hosts", "gpus"], [2, 4])
    point = Point(7, extent)
    assert repr(point) == str(point) == "{'hosts': 1/2, 'gpus': 3/4}"
    assert point.rank == 7 and point.extent == extent
    assert point["gpus"] == 3 and point.size("gpus") == 4 and len(point) == 2
    assert point.keys() == ["hosts", "gpus"] and list(point.values()) == [1, 3]
    assert dict(point) == {"hosts": 1, "gpus": 3} and list(point.items()) == [("hosts", 1),
                                                                              ("gpus", 3)]
    assert point == Point(7, Extent(["hosts", "gpus"], [2, 4])) != Point(6, extent)
    assert point != Point(7, Extent(["h", "gpus"], [2, 4]))
    assert point != {"hosts": 1, "gpus": 3}  # as Monarch: a Point only equals Points
    assert pickle.loads(pickle.dumps(point)) == point
    assert repr(Point(0, Extent([], []))) == "{}"
    assert repr(Point(1, Extent(["a b", "c'd"], [1, 2]))) == "{'a b': 0/1, 'c'd': 1/2}"
    with pytest.raises(AttributeError):
        point.rank = 0  # type: ignore[misc]


def test_a_missing_label_is_both_a_value_error_and_a_key_error():
    point = Point(1, Extent(["a"], [2]))
    with pytest.raises(ValueError, match="^Dimension 'x' not found$"):
        point["x"]
    with pytest.raises(DimensionNotFound):
        point.size("x")
    # Monarch raises here too; being a KeyError as well keeps the Mapping protocol working.
    assert point.get("x", 9) == 9 and "x" not in point


@pytest.mark.parametrize("make, error, text", [
    (lambda e: Point(8, e), ValueError, "out of range: total ranks 8; does not contain rank 8"),
    (lambda e: Point(-1, e), OverflowError, "can't convert negative int to unsigned"),
    (lambda e: Point(1.0, e), TypeError,
     "argument 'rank': 'float' object cannot be interpreted as an integer"),
    (lambda e: Point(1, {"a": 2}), TypeError,
     "argument 'extent': 'dict' object cannot be cast as 'Extent'"),
    (lambda e: Point(1, Extent([], [])), ValueError,
     "out of range: total ranks 1; does not contain rank 1"),
    (lambda e: Point(0, Extent(["a"], [0])), ValueError,
     "out of range: total ranks 0; does not contain rank 0"),
])
def test_point_errors_read_like_monarch(make, error, text):
    with pytest.raises(error) as info:
        make(Extent(["hosts", "gpus"], [2, 4]))
    assert str(info.value) == text


# -- View --------------------------------------------------------------------------------------

HG = View.dense(["hosts", "gpus"], [2, 4])


def test_dense_view_enumerates_row_major():
    view = View.dense(["hosts", "gpus"], [2, 4], offset=3)
    assert view.strides == (4, 1) and len(view) == 8 and view.extent == Extent(["hosts", "gpus"],
                                                                               [2, 4])
    assert view.ranks() == list(range(3, 11))
    assert view.rank_at(5) == 8 and view.index_of(8) == 5 and view.coords(5) == (1, 1)
    assert view.point(5) == Point(5, view.extent)
    with pytest.raises(ValueError, match="rank 11 is not in"):
        view.index_of(11)
    with pytest.raises(IndexError):
        view.rank_at(8)
    scalar = View.dense([], [])
    assert len(scalar) == 1 and scalar.ranks() == [0] and repr(scalar.point(0)) == "{}"


@pytest.mark.parametrize("selection, labels, offset, sizes, strides", [
    ({"gpus": 1}, ("hosts",), 1, (2,), (4,)),
    ({"gpus": True}, ("hosts",), 1, (2,), (4,)),
    ({"hosts": 1, "gpus": slice(1, 3)}, ("gpus",), 5, (2,), (1,)),
    ({"hosts": 1, "gpus": 2}, (), 6, (), ()),
    ({"gpus": slice(3, 9)}, ("hosts", "gpus"), 3, (2, 1), (4, 1)),
    ({"gpus": slice(-2, None)}, ("hosts", "gpus"), 2, (2, 2), (4, 1)),
    ({"gpus": slice(1, None, 2)}, ("hosts", "gpus"), 1, (2, 2), (4, 2)),
    ({"gpus": slice(0, 4, 4)}, ("hosts", "gpus"), 0, (2, 1), (4, 4)),
    ({}, ("hosts", "gpus"), 0, (2, 4), (4, 1)),
])
def test_slice_selects_like_monarch(selection, labels, offset, sizes, strides):
    assert HG.slice(**selection) == View(labels, sizes, strides, offset)


@pytest.mark.parametrize("call, error, text", [
    (lambda v: v.slice(foo=1), TypeError, "Shape does not have dimension labeled 'foo'"),
    (lambda v: v.slice(gpus=4), IndexError,
     "index out of range: gpus=4, and gpus has size 4 (0 to 3)"),
    (lambda v: v.slice(gpus=-1), IndexError,
     "index out of range: gpus=-1, and gpus has size 4 (0 to 3)"),
    (lambda v: v.slice(gpus=9, foo=1), IndexError,
     "index out of range: gpus=9, and gpus has size 4 (0 to 3)"),
    (lambda v: v.slice(gpus=1).slice(gpus=0), TypeError,
     "Shape does not have dimension labeled 'gpus'"),
    (lambda v: v.slice(gpus=1.0), TypeError,
     "argument 'index': 'float' object cannot be interpreted as an integer"),
    (lambda v: v.slice(gpus="1"), TypeError,
     "'<' not supported between instances of 'str' and 'int'"),
    (lambda v: v.slice(gpus=slice(5, 9)), ValueError,
     "out of range 4:4:1 for dimension gpus of size 4"),
    (lambda v: v.slice(gpus=slice(2, 2)), ValueError, "empty range 2:2:1"),
    (lambda v: v.slice(gpus=slice(3, 1)), ValueError, "empty range 3:1:1"),
    (lambda v: v.slice(gpus=slice(None, None, -1)), ValueError, "nonrectangular shape"),
    (lambda v: v.slice(gpus=slice(None, None, 0)), ValueError, "slice step cannot be zero"),
    (lambda v: v.slice(gpus=slice(0, 4, 2)).flatten("r"), ValueError,
     "cannot flatten sparse mesh: ndslice.strides=[4, 2] != dense_strides=[2, 1]"),
    (lambda v: v.slice(gpus=slice(1, 3)).flatten("r"), ValueError,
     "cannot flatten sparse mesh: ndslice.strides=[4, 1] != dense_strides=[2, 1]"),
    (lambda v: v.slice(gpus=0).flatten("r"), ValueError,
     "cannot flatten sparse mesh: ndslice.strides=[4] != dense_strides=[1]"),
    (lambda v: v.rename(foo="x"), ValueError,
     "'foo' is not an existing dim. Expected an integer size constraint on a new dim."),
    (lambda v: v.rename(gpus="hosts"), ValueError, "Duplicate dimension name 'hosts'"),
    (lambda v: v.rename(gpus=3), TypeError,
     "argument 'labels': 'int' object cannot be cast as 'str'"),
])
def test_geometry_errors_read_like_monarch(call, error, text):
    with pytest.raises(error) as info:
        call(HG)
    assert str(info.value) == text


def test_flatten_rename_and_size():
    assert HG.flatten("r") == View(("r",), (8,), (1,), 0)
    assert HG.slice(hosts=1).flatten("r") == View(("r",), (4,), (1,), 4)
    assert View.dense([], []).flatten("r") == View(("r",), (1,), (1,), 0)
    assert HG.slice(hosts=1, gpus=2).flatten("r") == View(("r",), (1,), (1,), 6)
    # Monarch refuses this one (a size-1 dimension with an odd stride); its ranks are contiguous.
    assert HG.slice(hosts=slice(1, 2), gpus=slice(1, 3)).flatten("r").ranks() == [5, 6]
    assert HG.rename(gpus="hosts", hosts="gpus").labels == ("gpus", "hosts")
    assert HG.size() == 8 and HG.size("gpus") == 4 and HG.size(["gpus", "hosts"]) == 8
    assert HG.size([]) == 1
    with pytest.raises(KeyError) as info:
        HG.size("x", owner="<mesh>")
    assert info.value.args[0] == "'<mesh>' does not have dimension 'x'"


HG8 = View.dense(["hosts", "gpus"], [2, 8])


@pytest.mark.parametrize("kwargs, labels, sizes, strides", [
    ({"gpus": ("a", "b"), "a": 2}, ("hosts", "a", "b"), (2, 2, 4), (8, 4, 1)),
    ({"gpus": ["a", "b"], "b": 2}, ("hosts", "a", "b"), (2, 4, 2), (8, 2, 1)),
    ({"gpus": ("a", "b", "c"), "a": 2, "b": 1}, ("hosts", "a", "b", "c"),
     (2, 2, 1, 4), (8, 4, 4, 1)),
    ({"gpus": ("a",)}, ("hosts", "a"), (2, 8), (8, 1)),
    ({"gpus": ("gpus", "b"), "b": 2}, ("hosts", "gpus", "b"), (2, 4, 2), (8, 2, 1)),
    ({"hosts": ("h1", "h2"), "gpus": ("a", "b"), "h1": 1, "a": 2}, ("h1", "h2", "a", "b"),
     (1, 2, 2, 4), (16, 8, 4, 1)),
    ({"gpus": ("a", "b"), "a": True}, ("hosts", "a", "b"), (2, 1, 8), (8, 8, 1)),
])
def test_split_like_monarch(kwargs, labels, sizes, strides):
    view = HG8.split(**kwargs)
    assert view == View(labels, sizes, strides, 0) and view.ranks() == HG8.ranks()


def test_split_keeps_a_sparse_view_sparse():
    view = HG.slice(gpus=slice(0, 4, 2)).split(gpus=("a", "b"), a=2)
    assert view == View(("hosts", "a", "b"), (2, 2, 1), (4, 2, 2), 0)
    assert HG.slice(hosts=1).split(gpus=("a", "b"), a=2) == View(("a", "b"), (2, 2), (2, 1), 4)


@pytest.mark.parametrize("kwargs, error, text", [
    ({"gpus": ("a", "b")}, ValueError,
     ("Cannot infer size of ('a', 'b') because both b and a have unknown size. Specify at least "
     "one as argument, e.g. b=4")),
    ({"gpus": ("w", "x", "y", "z"), "x": 2}, ValueError,
     ("Cannot infer size of ('w', 'x', 'y', 'z') because both y and w have unknown size. Specify "
     "at least one as argument, e.g. y=4")),
    ({"gpus": ("a", "b"), "a": 2, "b": 3}, ValueError,
     "Dimension 'gpus' of size 8 is not evenly divided by ('a', 'b') with sizes (2, 3)"),
    ({"gpus": ("a", "b"), "a": 3}, ValueError,
     "Dimension 'gpus' of size 8 is not evenly divided by ('a', 'b') with sizes (3, '?')"),
    ({"gpus": ()}, ValueError,
     "Dimension 'gpus' of size 8 is not evenly divided by () with sizes ()"),
    ({"gpus": ("a", "b"), "a": 0}, ZeroDivisionError, "integer division or modulo by zero"),
    ({"gpus": ("a", "b"), "a": -2}, OverflowError, "can't convert negative int to unsigned"),
    ({"gpus": "a"}, ValueError, "expected a sequence of dimensions, but got 'a'"),
    ({"gpus": 2}, TypeError, "'int' object is not iterable"),
    ({"gpus": ("a", "b"), "a": 2, "z": 3, "y": 1}, ValueError,
     "unused size constraints: ('z', 'y')"),
    ({"gpus": ("a", "b"), "a": "2"}, ValueError,
     "'a' is not an existing dim. Expected an integer size constraint on a new dim."),
    ({"gpus": ("a", "b"), "a": 2.0}, ValueError,
     "'a' is not an existing dim. Expected an integer size constraint on a new dim."),
    ({"foo": ("a", "b"), "a": 2}, ValueError,
     "'foo' is not an existing dim. Expected an integer size constraint on a new dim."),
    ({"gpus": ("hosts", "b"), "b": 2}, ValueError, "Duplicate dimension name 'hosts'"),
    ({"gpus": ("hosts", "b"), "hosts": 2}, TypeError, "'int' object is not iterable"),
    ({"gpus": ("a", 3), "a": 2}, TypeError,
     "argument 'labels': 'int' object cannot be cast as 'str'"),
])
def test_split_errors_read_like_monarch(kwargs, error, text):
    with pytest.raises(error) as info:
        HG8.split(**kwargs)
    assert str(info.value) == text


def test_rank_of_checks_coordinates_like_monarch_item():
    strided = HG.slice(gpus=slice(0, 4, 2))
    assert strided.rank_of({"hosts": 1, "gpus": 1}) == 6
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"hosts": 1}, KeyError, "'gpus'"),
        ({"hosts": 1, "gpus": 0, "x": 0}, KeyError, "\"item has extra dimensions: ['x']\""),
        ({"hosts": 2, "gpus": 0}, IndexError, "rank 8 not in current shape"),
        # Monarch answers rank 4 here (it only checks that the rank is in the view).
        ({"hosts": 0, "gpus": 2}, IndexError, "rank 4 not in current shape"),
        ({"hosts": -1, "gpus": 0}, OverflowError, "can't convert negative int to unsigned"),
        ({"hosts": 1.0, "gpus": 0}, TypeError,
         "argument 'coordinates': 'float' object cannot be interpreted as an integer"),
    ]
    for coords, error, text in cases:
        with pytest.raises(error) as info:
            strided.rank_of(coords)
        assert str(info.value) == text


# -- properties --------------------------------------------------------------------------------


@st.composite
def dense_views(draw: Any) -> View:
    sizes = draw(st.lists(st.integers(1, 5), min_size=0, max_size=3))
    return View.dense([f"d{i}" for i in range(len(sizes))], sizes, draw(st.integers(0, 9)))


@st.composite
def selections(draw: Any, view: View) -> dict[str, Any]:
    chosen = draw(st.lists(st.sampled_from(view.labels), unique=True)) if view.labels else []
    out: dict[str, Any] = {}
    for label in chosen:
        size = view.sizes[view.labels.index(label)]
        if draw(st.booleans()):
            out[label] = draw(st.integers(0, size - 1))
        else:
            start = draw(st.integers(-size, size - 1))
            stop = draw(st.one_of(st.none(), st.integers(-size, 2 * size)))
            step = draw(st.one_of(st.none(), st.integers(1, size + 1)))
            if len(range(size)[slice(start, stop, step)]) > 0:
                out[label] = slice(start, stop, step)
    return out


def select_enumerated(view: View, selection: dict[str, Any]) -> tuple[list[str], list[int]]:
    """What slicing must give, computed on the enumerated ranks (the model)."""
    labels, sizes = list(view.labels), list(view.sizes)
    entries = [(list(view.coords(i)), rank) for i, rank in enumerate(view.ranks())]
    for label, sel in selection.items():
        dim = labels.index(label)
        kept = [sel] if not isinstance(sel, slice) else list(range(sizes[dim]))[sel]
        entries = [(c, r) for c, r in entries if c[dim] in kept]
        for coords, _ in entries:
            coords[dim] = kept.index(coords[dim])
        if isinstance(sel, slice):
            sizes[dim] = len(kept)
        else:
            del labels[dim], sizes[dim]
            for coords, _ in entries:
                del coords[dim]
    return labels, [rank for _, rank in entries]


@given(st.data())
def test_slice_composition_equals_slicing_the_enumerated_ranks(data):
    view = data.draw(dense_views())
    for _ in range(3):
        selection = data.draw(selections(view))
        labels, ranks = select_enumerated(view, selection)
        view = view.slice(**selection)
        assert list(view.labels) == labels and view.ranks() == ranks
        for index, rank in enumerate(ranks):
            assert view.rank_at(index) == rank and view.index_of(rank) == index
            assert view.point(index).rank == index


@given(st.data())
def test_split_keeps_the_enumeration_and_slices_of_it(data):
    view = data.draw(dense_views())
    view = view.slice(**data.draw(selections(view)))
    if not view.labels:
        return
    label = data.draw(st.sampled_from(view.labels))
    size = view.sizes[view.labels.index(label)]
    outer = data.draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
    split = view.split(**{label: ("outer", "inner"), "outer": outer})
    assert split.ranks() == view.ranks() and len(split) == len(view)
    selection = data.draw(selections(split))
    _, ranks = select_enumerated(split, selection)
    assert split.slice(**selection).ranks() == ranks
    assert [split.index_of(r) for r in split.ranks()] == list(range(len(split)))


@given(st.data())
def test_wire_and_pickle_round_trips(data):
    view = data.draw(dense_views())
    view = view.slice(**data.draw(selections(view)))
    assert View.from_wire(view.to_wire()) == view
    for use_list in (False, True):
        packed = msgpack.packb(view.to_wire())
        assert View.from_wire(msgpack.unpackb(packed, use_list=use_list)) == view
    assert pickle.loads(pickle.dumps(view)) == view
    assert hash(View.from_wire(msgpack.unpackb(msgpack.packb(view.to_wire()), use_list=False)))


@given(st.integers(1, 400), st.integers(2, 16))
def test_cast_tree_chunks_cover_each_index_once_in_log_depth(n, fanout):
    view = View.dense(["x"], [n])
    seen: list[int] = []
    depth = 0

    def visit(lo: int, hi: int, level: int) -> None:
        nonlocal depth
        depth = max(depth, level)
        seen.append(lo)
        chunks = view.chunks(lo, hi, fanout)
        assert len(chunks) <= fanout
        if chunks:  # contiguous, in order, covering (lo, hi)
            assert [c[0] for c in chunks] == [lo + 1] + [c[1] for c in chunks[:-1]]
            assert chunks[-1][1] == hi
            lengths = [c[1] - c[0] for c in chunks]
            assert min(lengths) >= 1 and max(lengths) - min(lengths) <= 1
        for child_lo, child_hi in chunks:
            visit(child_lo, child_hi, level + 1)

    visit(0, n, 0)
    assert sorted(seen) == list(range(n))
    levels = 0  # the least k with fanout**k >= n: ceil(log_fanout(n))
    while fanout**levels < n:
        levels += 1
    assert depth <= levels
