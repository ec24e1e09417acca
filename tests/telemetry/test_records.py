from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st
from monarch.telemetry import FailureRecord, LogRecord, MetricPoint, SpanRecord, TransferRecord

TEXT = st.text(max_size=20)
INT64 = st.integers(min_value=0, max_value=2**63 - 1)
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                   st.floats(allow_nan=False), TEXT)
ATTRS = st.dictionaries(TEXT, st.one_of(SCALAR, st.lists(SCALAR, max_size=3)), max_size=5)
OPT_INT = st.one_of(st.none(), st.integers(-(2**31), 2**31))

SPANS = st.builds(SpanRecord, st.binary(min_size=16, max_size=16),
                  st.binary(min_size=8, max_size=8),
                  st.one_of(st.none(), st.binary(min_size=8, max_size=8)), TEXT, INT64, INT64,
                  ATTRS, st.sampled_from(["ok", "error"]), TEXT)
LOGS = st.builds(LogRecord, INT64, INT64, st.sampled_from(["stdout", "stderr", "log"]),
                 st.integers(0, 50), TEXT, ATTRS,
                 st.one_of(st.none(), st.binary(min_size=16, max_size=16)),
                 st.one_of(st.none(), st.binary(min_size=8, max_size=8)))
METRICS = st.builds(MetricPoint, TEXT, st.sampled_from(["counter", "gauge", "histogram"]),
                    st.dictionaries(TEXT, TEXT, max_size=3), st.floats(allow_nan=False), INT64,
                    TEXT, st.integers(0, 10**6),
                    st.lists(st.floats(allow_nan=False), max_size=4).map(tuple),
                    st.lists(st.integers(0, 10**6), max_size=5).map(tuple), TEXT)
TRANSFERS = st.builds(TransferRecord, INT64, st.floats(0, 1e6), TEXT, TEXT, TEXT, INT64,
                      st.one_of(st.none(), TEXT), TEXT)
FAILURES = st.builds(FailureRecord, TEXT, OPT_INT, TEXT, TEXT, OPT_INT, OPT_INT, OPT_INT, TEXT,
                     TEXT, INT64, TEXT)


def through_msgpack(wire: list) -> list:
    return msgpack.unpackb(msgpack.packb(wire, use_bin_type=True), raw=False,
                           strict_map_key=False)


def _normalize(value):  # msgpack turns tuples in attributes into lists
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalize(v) for v in value]
    return value


@given(st.one_of(SPANS, LOGS, METRICS, TRANSFERS, FAILURES))
def test_every_record_round_trips_through_msgpack(record) -> None:
    back = type(record).from_wire(through_msgpack(record.to_wire()))
    assert back == record or _normalize(back.to_wire()) == _normalize(record.to_wire())
    assert type(back) is type(record)


@given(SPANS)
def test_span_round_trips_exactly(span: SpanRecord) -> None:
    assert SpanRecord.from_wire(through_msgpack(span.to_wire())) == span


def test_from_wire_ignores_fields_a_newer_sender_appended() -> None:
    span = SpanRecord(b"t" * 16, b"s" * 8, None, "x", 1, 2, {}, "ok", "p")
    assert SpanRecord.from_wire([*span.to_wire(), "future field"]) == span


def test_log_record_exposes_rank_and_mesh_tags() -> None:
    log = LogRecord(1, 2, "stdout", 20, "hi", {"rank": 3, "mesh": "trainer"})
    assert (log.rank, log.mesh) == (3, "trainer")
