"""``get_columns`` hands out what ``get`` hands out, as Arrow columns: the same messages
(bodies, keys, offsets, timestamps, properties), the same status and next offset, across
segment rolls, empty bodies, unique keys, damage and every kind of offset."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import strata
from strata.format import record as rec
from store_helpers import config, settle

import pyarrow  # noqa: E402,F401 - get_columns answers in Arrow (the spark extra, installed by make test)


def as_rows(messages) -> list[dict]:
    return [{"queue_offset": m.queue_offset, "commitlog_offset": m.commitlog_offset,
             "store_timestamp": m.store_timestamp, "born_timestamp": m.born_timestamp,
             "body": m.body, "keys": list(m.keys), "properties": m.properties_raw}
            for m in messages]


def same_as_get(store, topic: str, q: int, offset: int, n: int) -> None:
    r = store.get_columns(topic, q, offset, n)
    g = store.get(topic, q, offset, n)
    assert (r.status, r.next_offset, r.min_offset, r.max_offset) == \
        (g.status, g.next_offset, g.min_offset, g.max_offset)
    assert r.batch.to_pylist() == as_rows(g.messages)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("gc") / "s"
    with strata.open(path, config()) as s:   # 64 KiB segments: reads cross segment rolls
        s.create_topic("t", queues=2)
        msgs = [strata.Message("t", bytes([i % 256]) * (i * 53 % 900), keys=[
            f"k{i}", "ключ", "x"][:i % 4], tags="a" if i % 3 else None,
            properties={"UNIQ_KEY": f"u{i}"} if i % 5 == 0 else {"h": "é"} if i % 5 == 1
            else None, born_timestamp=i * 3) for i in range(1500)]
        for i in range(0, 1500, 100):
            s.put_batch(msgs[i:i + 100])
        settle(s)
        yield s


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=st.integers(0, 2), offset=st.integers(-2, 800), n=st.integers(1, 1100))
def test_get_columns_equals_get(store, q, offset, n):
    same_as_get(store, "t", q, offset, n)


def test_unknown_topic_and_bad_arguments(store):
    same_as_get(store, "nope", 0, 0, 10)
    with pytest.raises(strata.errors.InvalidInputError):
        store.get_columns("t", 0, 0, 0)
    with pytest.raises(strata.errors.InvalidInputError):
        store.get_columns("t", 0, "1")


def test_damaged_record_is_passed_over_as_get_does(tmp_path):
    with strata.open(tmp_path / "s", config()) as s:
        s.create_topic("t", queues=1)
        res = s.put_batch([strata.Message("t", b"m%03d" % i, keys=[f"k{i}"]) for i in range(50)])
        settle(s)
        victim = res[7].commitlog_offset
        seg = s.log.segments.segments[0]
        at = victim - seg.base_offset + 4096 + rec.HEADER_SIZE + 20  # inside the record
        seg.mm[at] ^= 0xFF
        r = s.get_columns("t", 0, 0, 50)
        g = s.get("t", 0, 0, 50)
        assert r.batch.to_pylist() == as_rows(g.messages)
        assert 7 not in r.batch.column("queue_offset").to_pylist()
