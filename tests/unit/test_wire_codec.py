"""The wire protocol: every message kind round-trips; anything malformed is a WireError."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monarch._wire._messages import (KINDS, VERSION, Batch, Call, Notice, ProcExited, ProcStarted,
                                     Replies, Reply, Seqs, Telemetry, WireError, decode, encode)

names = st.text(max_size=20)
ints = st.integers(min_value=0, max_value=2**62)
views = st.tuples(st.tuples(names), st.tuples(ints), st.tuples(ints), ints)
runs = st.lists(st.tuples(ints, st.integers(1, 100)), max_size=5).map(tuple)
traces = st.none() | st.tuples(st.binary(min_size=16, max_size=16),
                               st.binary(min_size=8, max_size=8))
ports = st.none() | st.tuples(names, ints)

calls = st.builds(Call, names, names, names, names, views, ints, ints, runs, ports, traces, ints,
                  st.integers(0, 50))

replies = st.builds(Reply, ints, st.integers(-1, 1000), st.integers(0, 2), ints,
                    st.integers(0, 50))

SAMPLES = {
    Call: calls,
    Batch: st.builds(Batch, st.lists(calls.map(lambda c: c._getter(c)), max_size=4).map(tuple),
                     st.integers(0, 50)),
    Reply: replies,
    Replies: st.builds(Replies, st.lists(replies.map(lambda r: r._getter(r)), max_size=4)
                       .map(tuple), st.integers(0, 50)),
    ProcStarted: st.builds(ProcStarted, names, ints, names, names),
    ProcExited: st.builds(ProcExited, names, ints, st.integers(-64, 255), names),
    Notice: st.builds(Notice, names, st.dictionaries(names, ints | names)),
    Telemetry: st.builds(Telemetry, names, st.binary(max_size=100)),
}


def test_every_kind_has_a_sample():
    assert set(KINDS.values()) == set(SAMPLES)


@pytest.mark.parametrize("kind", list(SAMPLES), ids=lambda k: k.__name__)
def test_round_trip(kind):
    @given(SAMPLES[kind])
    def check(msg):
        assert decode(encode(msg)) == msg

    check()


@pytest.mark.parametrize("frame", [
    b"", b"\xc1", b"garbage", msgpack.packb(42), msgpack.packb([VERSION]),
    msgpack.packb([VERSION + 1, 2, 1, 2, 3, 4, 5]), msgpack.packb([VERSION, 999]),
    msgpack.packb([VERSION, "2"]), msgpack.packb([VERSION, 2, 1, 2]),
])
def test_malformed_envelopes_are_wire_errors(frame):
    with pytest.raises(WireError):
        decode(frame)


@given(st.binary(max_size=64))
def test_random_bytes_never_crash_the_decoder(data):
    try:
        decode(data)
    except WireError:
        pass


@given(st.lists(st.integers(0, 5), max_size=40), st.data())
def test_seqs_run_length_encoding(values, data):
    runs_ = Seqs.encode(values)
    assert [Seqs.at(runs_, i) for i in range(len(values))] == values
    start = data.draw(st.integers(0, len(values)))
    stop = data.draw(st.integers(start, len(values)))
    window = Seqs.window(runs_, start, stop)
    assert [Seqs.at(window, i) for i in range(stop - start)] == values[start:stop]
