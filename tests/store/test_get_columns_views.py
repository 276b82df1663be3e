"""``get_columns``' view path: within one segment the body and properties columns are Arrow
``binary_view`` arrays over ONE copy of the records (made and CRC-checked in one compiled
pass), equal to what ``get`` hands out; ``views=False`` gives ``binary`` columns with the same
values; a record whose bytes changed on disk is passed over as ``get`` passes it over."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import strata
from strata.format import record as rec
from store_helpers import config, settle
from test_get_columns import as_rows


def big() -> strata.StoreConfig:
    return config(segment_size=8 << 20)   # every read of these tests within one segment


def message(i: int, topic: str = "t") -> strata.Message:
    # bodies of 0 .. 40 bytes: some inline in their view (≤ 12), some not
    return strata.Message(topic, bytes([65 + i % 26]) * (i * 7 % 41),
                          keys=[f"k{i}", "ключ"][:i % 3], tags="tg" if i % 2 else None,
                          properties={"p": "v" * (i % 20)} if i % 4 else None,
                          born_timestamp=1_000 + i)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with strata.open(tmp_path_factory.mktemp("views") / "s", big()) as s:
        s.create_topic("t", queues=3)       # three queues: each queue's records interleave
        s.create_topic("one", queues=1)     # one queue: its records lie back to back
        s.put_batch([message(i) for i in range(600)])
        s.put_batch([message(i, "one") for i in range(600)])
        settle(s)
        yield s


def shares_one_copy(batch) -> bool:
    body, props = batch.column("body"), batch.column("properties")
    return (body.type == pa.binary_view() and props.type == pa.binary_view()
            and len(body.buffers()) == 3
            and body.buffers()[2].address == props.buffers()[2].address)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=st.sampled_from(["t", "one"]), q=st.integers(0, 2),
       offset=st.integers(0, 260), n=st.integers(1, 300))
def test_views_equal_get(store, topic, q, offset, n):
    r = store.get_columns(topic, q, offset, n)
    g = store.get(topic, q, offset, n)
    assert (r.status, r.next_offset, r.min_offset, r.max_offset) == \
        (g.status, g.next_offset, g.min_offset, g.max_offset)
    assert r.batch.schema == strata.store.arrow_read.schema(True)
    assert r.batch.to_pylist() == as_rows(g.messages)
    r.batch.validate(full=True)   # views, prefixes, buffer index and offsets as Arrow checks
    if g.messages:
        assert shares_one_copy(r.batch)


def test_binary_on_request(store):
    r = store.get_columns("t", 1, 10, 100, views=False)
    assert r.batch.schema == strata.store.arrow_read.schema(False)
    assert r.batch.column("body").type == pa.binary()
    assert r.batch.to_pylist() == store.get_columns("t", 1, 10, 100).batch.to_pylist()
    # binary columns take every Arrow compute function (some take no views yet)
    lengths = pc.binary_length(r.batch.column("body")).to_pylist()
    assert lengths == [len(m.body) for m in store.get("t", 1, 10, 100).messages]


def test_views_outlive_the_store(tmp_path):
    """The arrays own their copy: they stay readable after the store is closed."""
    with strata.open(tmp_path / "s", big()) as s:
        s.create_topic("t", queues=1)
        s.put_batch([message(i) for i in range(50)])
        settle(s)
        batch = s.get_columns("t", 0, 0, 50).batch
        want = as_rows(s.get("t", 0, 0, 50).messages)
    assert batch.to_pylist() == want


@pytest.mark.parametrize("where", ["body", "header"])
def test_changed_bytes_are_passed_over_as_get_does(tmp_path, where):
    with strata.open(tmp_path / "s", big()) as s:
        s.create_topic("t", queues=1)
        res = s.put_batch([message(i + 13) for i in range(40)])
        settle(s)
        victim = res[9].commitlog_offset
        seg = s.log.segments.segments[0]
        at = victim - seg.base_offset + 4096
        total = int.from_bytes(seg.mm[at:at + 4], "little")
        at += rec.POS_BORN_TIMESTAMP if where == "header" else total - rec.TRAILER_SIZE - 1
        seg.mm[at] ^= 0x5A
        r = s.get_columns("t", 0, 0, 40)
        g = s.get("t", 0, 0, 40)
        assert r.batch.to_pylist() == as_rows(g.messages)
        assert 9 not in r.batch.column("queue_offset").to_pylist()
        assert len(g.messages) == 39
        seg.mm[at] ^= 0x5A    # restored: all 40 again, through the view path
        assert len(s.get_columns("t", 0, 0, 40).batch) == 40
        assert s.get_columns("t", 0, 0, 40).batch.to_pylist() == \
            as_rows(s.get("t", 0, 0, 40).messages)
