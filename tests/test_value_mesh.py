"""ValueMesh: printing, access and geometry, with the texts torchmonarch 0.7.0 prints.

The printed meshes below are literal outputs of the reference, for the same values.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import cloudpickle
import pytest

from monarch._geometry._view import Extent, Point, View
from monarch._geometry._value_mesh import ValueMesh


def mesh(labels: list[str], sizes: list[int], values: list | None = None) -> ValueMesh:
    count = len(View.dense(labels, sizes))
    return ValueMesh(Extent(labels, sizes), list(range(count)) if values is None else values)


def rank_dicts() -> ValueMesh:
    return mesh(["hosts", "gpus"], [2, 2],
                [{"rank": r, "hosts": r // 2, "gpus": r % 2} for r in range(4)])


# -- printing ----------------------------------------------------------------------------------


def test_prints_like_monarch():
    assert repr(rank_dicts()) == str(rank_dicts()) == (
        "ValueMesh({hosts: 2, gpus: 2}):\n"
        "  (({'hosts': 0/2, 'gpus': 0/2}, {'gpus': 0, 'hosts': 0, 'rank': 0}),\n"
        "   ({'hosts': 0/2, 'gpus': 1/2}, {'gpus': 1, 'hosts': 0, 'rank': 1}),\n"
        "   ({'hosts': 1/2, 'gpus': 0/2}, {'gpus': 0, 'hosts': 1, 'rank': 2}),\n"
        "   ({'hosts': 1/2, 'gpus': 1/2}, {'gpus': 1, 'hosts': 1, 'rank': 3}))")
    assert repr(mesh(["gpus"], [2], [1, 1])) == (
        "ValueMesh({gpus: 2}):\n  (({'gpus': 0/2}, 1), ({'gpus': 1/2}, 1))")
    assert repr(mesh([], [], [42])) == "ValueMesh({}):\n  (({}, 42),)"


def test_long_values_wrap_as_pprint_does():
    assert repr(mesh(["g"], [2], [None, "s" * 100])) == (
        "ValueMesh({g: 2}):\n"
        "  (({'g': 0/2}, None),\n"
        "   ({'g': 1/2},\n"
        "    '" + "s" * 100 + "'))")


def test_slices_print_their_own_points():
    assert repr(rank_dicts().slice(gpus=0)) == (
        "ValueMesh({hosts: 2}):\n"
        "  (({'hosts': 0/2}, {'gpus': 0, 'hosts': 0, 'rank': 0}),\n"
        "   ({'hosts': 1/2}, {'gpus': 0, 'hosts': 1, 'rank': 2}))")
    assert repr(mesh(["g"], [3]).slice(g=slice(1, 3))) == (
        "ValueMesh({g: 2}):\n  (({'g': 0/2}, 1), ({'g': 1/2}, 2))")
    assert repr(rank_dicts().flatten("r")).startswith(
        "ValueMesh({r: 4}):\n  (({'r': 0/4}, {'gpus': 0, 'hosts': 0, 'rank': 0}),\n")


# -- access ------------------------------------------------------------------------------------


def test_items_values_and_iteration():
    values = rank_dicts()
    point, value = next(iter(values))
    assert repr(point) == "{'hosts': 0/2, 'gpus': 0/2}" and value == {"rank": 0, "hosts": 0,
                                                                       "gpus": 0}
    assert [p.rank for p, _ in values.items()] == [0, 1, 2, 3]
    assert values.values() == [{"rank": r, "hosts": r // 2, "gpus": r % 2} for r in range(4)]
    sliced = mesh(["hosts", "gpus"], [2, 4]).slice(gpus=slice(1, 3))
    assert sliced.values() == [1, 2, 5, 6] and len(sliced) == 4
    assert [(p, v) for p, v in sliced] == [(Point(i, Extent(["hosts", "gpus"], [2, 2])), v)
                                           for i, v in enumerate([1, 2, 5, 6])]


def test_item_and_get():
    values = mesh(["hosts", "gpus"], [2, 4])
    assert values.item(hosts=1, gpus=2) == 6 and values.get(6) == 6
    assert values.slice(hosts=1).item(gpus=2) == 6 and values.slice(gpus=0).get(1) == 4
    strided = values.slice(gpus=slice(0, 4, 2))
    assert strided.item(hosts=1, gpus=1) == 6 and strided.get(True) == 2
    assert mesh([], [], [7]).item() == 7


@pytest.mark.parametrize("call, error, text", [
    (lambda m: m.item(hosts=1), KeyError, "'gpus'"),
    (lambda m: m.item(), KeyError, "'hosts'"),
    (lambda m: m.item(hosts=1, gpus=0, x=0), KeyError, "\"item has extra dimensions: ['x']\""),
    (lambda m: m.item(hosts=5, gpus=0), IndexError, "rank 20 not in current shape"),
    (lambda m: m.slice(hosts=1).item(gpus=4), IndexError, "rank 8 not in current shape"),
    (lambda m: m.item(hosts=-1, gpus=0), OverflowError, "can't convert negative int to unsigned"),
    (lambda m: m.item(hosts="1", gpus=0), TypeError,
     "argument 'coordinates': 'str' object cannot be interpreted as an integer"),
    (lambda m: m.get(8), ValueError, "index 8 out of range (len=8)"),
    (lambda m: m.slice(hosts=1).get(5), ValueError, "index 5 out of range (len=4)"),
    (lambda m: m.get(-1), OverflowError, "can't convert negative int to unsigned"),
    (lambda m: m.get(1.0), TypeError,
     "argument 'rank': 'float' object cannot be interpreted as an integer"),
])
def test_access_errors_read_like_monarch(call, error, text):
    with pytest.raises(error) as info:
        call(mesh(["hosts", "gpus"], [2, 4]))
    assert str(info.value) == text


def test_sizes_extent_and_len():
    values = mesh(["hosts", "gpus"], [2, 4])
    assert values.extent == Extent(["hosts", "gpus"], [2, 4]) and len(values) == 8
    assert values.sizes == {"hosts": 2, "gpus": 4} and mesh([], [], [0]).sizes == {}
    assert values.size() == 8 and values.size("gpus") == 4
    assert values.size(["gpus", "hosts"]) == 8 and values.size(("gpus",)) == 4
    assert values.size([]) == 1 and mesh([], [], [0]).size() == 1


def test_size_of_a_missing_dimension_names_the_mesh_as_monarch_does():
    with pytest.raises(KeyError) as info:
        mesh(["g"], [2]).size(["g", "x"])
    assert info.value.args[0] == ("ValueMesh({g: 2}):\n  (({'g': 0/2}, 0), ({'g': 1/2}, 1)) "
                                  "does not have dimension 'x'")


# -- geometry ----------------------------------------------------------------------------------


def test_geometry_returns_meshes_over_the_same_values():
    values = mesh(["hosts", "gpus"], [2, 4])
    assert values.slice(gpus=slice(0, 4, 2)).values() == [0, 2, 4, 6]
    assert values.slice(hosts=1).flatten("r").values() == [4, 5, 6, 7]
    assert values.flatten("r").extent == Extent(["r"], [8])
    assert values.rename(gpus="g").sizes == {"hosts": 2, "g": 4}
    split = values.split(gpus=("a", "b"), a=2)
    assert split.sizes == {"hosts": 2, "a": 2, "b": 2} and split.values() == list(range(8))
    assert split.slice(b=1, a=1).values() == [3, 7]


@pytest.mark.parametrize("call, error, text", [
    (lambda m: m.slice(foo=1), TypeError, "Shape does not have dimension labeled 'foo'"),
    (lambda m: m.slice(gpus=4), IndexError,
     "index out of range: gpus=4, and gpus has size 4 (0 to 3)"),
    (lambda m: m.slice(gpus=slice(5, 9)), ValueError,
     "out of range 4:4:1 for dimension gpus of size 4"),
    (lambda m: m.slice(gpus=0).flatten("r"), ValueError,
     "cannot flatten sparse mesh: ndslice.strides=[4] != dense_strides=[1]"),
    (lambda m: m.rename(x="g"), ValueError,
     "'x' is not an existing dim. Expected an integer size constraint on a new dim."),
    (lambda m: m.split(gpus=("a", "b")), ValueError,
     ("Cannot infer size of ('a', 'b') because both b and a have unknown size. Specify at least "
     "one as argument, e.g. b=4")),
])
def test_geometry_errors_read_like_monarch(call, error, text):
    with pytest.raises(error) as info:
        call(mesh(["hosts", "gpus"], [2, 4]))
    assert str(info.value) == text


# -- construction ------------------------------------------------------------------------------


def test_construction_from_an_extent_or_a_view():
    assert mesh(["g"], [2], ["a", "b"]).values() == ["a", "b"]
    view = View.dense(["hosts", "gpus"], [2, 4]).slice(gpus=slice(1, 3))
    assert ValueMesh(view, "abcd").sizes == {"hosts": 2, "gpus": 2}
    with pytest.raises(ValueError) as info:
        mesh(["g"], [2], [1])
    assert str(info.value) == "invalid value mesh: expected 2 ranks, but contains 1 ranks"


def test_from_indexed_last_write_wins():
    shape = Extent(["g"], [3])
    built = ValueMesh.from_indexed(shape, [(2, "c"), (0, "a"), (1, "b"), (0, "z")])
    assert repr(built) == (
        "ValueMesh({g: 3}):\n  (({'g': 0/3}, 'z'), ({'g': 1/3}, 'b'), ({'g': 2/3}, 'c'))")


@pytest.mark.parametrize("pairs, error, text", [
    ([(2, "c"), (0, "a")], ValueError,
     "invalid value mesh: expected 3 ranks, but contains 2 ranks"),
    ([], ValueError, "invalid value mesh: expected 3 ranks, but contains 0 ranks"),
    ([(3, "c"), (0, "a"), (1, "b"), (2, "z")], ValueError,
     "invalid value mesh: expected 3 ranks, but contains 4 ranks"),
    ([(0, "a"), (1, "b"), (5, "c")], ValueError,
     "invalid value mesh: expected 3 ranks, but contains 6 ranks"),
    ([(0, "a"), (1, "b"), (-1, "c")], OverflowError, "can't convert negative int to unsigned"),
    ([(0, "a", 1)], ValueError, "expected tuple of length 2, but got tuple of length 3"),
])
def test_from_indexed_errors_read_like_monarch(pairs, error, text):
    with pytest.raises(error) as info:
        ValueMesh.from_indexed(Extent(["g"], [3]), pairs)
    assert str(info.value) == text


def test_equality_is_identity_as_in_monarch():
    values = mesh(["g"], [1], [1])
    assert values == values and values != mesh(["g"], [1], [1])  # noqa: PLR0124
    assert hash(values) == hash(values)


# -- pickling ----------------------------------------------------------------------------------


def test_pickles_only_the_values_it_shows():
    values = mesh(["hosts", "gpus"], [2, 4], [f"v{r}" for r in range(8)]).slice(gpus=slice(1, 3))
    data = pickle.dumps(values)
    assert b"v0" not in data
    restored = pickle.loads(data)
    assert restored.values() == ["v1", "v2", "v5", "v6"] and repr(restored) == repr(values)


@pytest.mark.timeout(60)
def test_survives_cloudpickle_into_another_process():
    values = rank_dicts().slice(hosts=1)
    script = ("import pickle, sys; m = pickle.loads(sys.stdin.buffer.read()); "
              "print(repr(m)); print(m.item(gpus=1)['rank'])")
    done = subprocess.run([sys.executable, "-c", script], input=cloudpickle.dumps(values),
                          capture_output=True, timeout=60, check=True)
    assert done.stdout.decode() == repr(values) + "\n3\n"


def test_value_mesh_subscripted_is_value_mesh_at_run_time():
    from monarch.actor import ValueMesh as Public

    assert Public[int] is Public  # as Monarch's: annotations evaluated at run time work
