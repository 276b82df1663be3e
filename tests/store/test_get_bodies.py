"""``GetResult.bodies()`` is ``[m.body for m in messages]``: for batches read in one piece,
across segment rolls and by tag, and for the list ``get`` hands out when it passed over a
damaged record."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import strata
from strata.format import record as rec
from store_helpers import config, settle


def test_bodies_equal_the_messages_bodies(tmp_path):
    with strata.open(tmp_path / "s", config()) as s:   # 64 KiB segments: reads cross rolls
        s.create_topic("t", queues=2)
        msgs = [strata.Message("t", bytes([i % 251]) * (i * 37 % 700), keys=[f"k{i}"][:i % 2],
                               tags="a" if i % 3 else "b") for i in range(900)]
        for i in range(0, 900, 100):
            s.put_batch(msgs[i:i + 100])
        settle(s)
        seen = 0
        for q in (0, 1):
            for offset in (0, 1, 17, 200, 449):
                for n in (1, 32, 1000):
                    r = s.get("t", q, offset, n)
                    assert r.bodies() == [m.body for m in r.messages]
                    seen += len(r.messages)
                r = s.get("t", q, offset, 50, tags="a")
                assert r.bodies() == [m.body for m in r.messages] and r.messages
        assert seen > 0
        assert s.get("t", 0, 10_000, 5).bodies() == []


def test_bodies_when_get_passed_over_damage(tmp_path):
    with strata.open(tmp_path / "s", config()) as s:
        s.create_topic("t", queues=1)
        res = s.put_batch([strata.Message("t", b"m%03d" % i) for i in range(30)])
        settle(s)
        victim = res[7].commitlog_offset
        seg = s.log.segments.segments[0]
        seg.mm[victim - seg.base_offset + 4096 + rec.HEADER_SIZE + 20] ^= 0xFF
        r = s.get("t", 0, 0, 30)
        assert r.corrupt and r.bodies() == [b"m%03d" % i for i in range(30) if i != 7]


@pytest.fixture(scope="module")
def rolled(tmp_path_factory):
    with strata.open(tmp_path_factory.mktemp("gb") / "s", config()) as s:   # 64 KiB segments
        s.create_topic("t", queues=2)
        msgs = [strata.Message("t", bytes([i % 251]) * (i * 53 % 900), keys=[f"k{i}"][:i % 2],
                               properties={"p": str(i)} if i % 4 == 0 else None,
                               born_timestamp=i) for i in range(1200)]
        for i in range(0, 1200, 150):
            s.put_batch(msgs[i:i + 150])
        settle(s)
        yield s


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=st.integers(0, 1), offset=st.integers(0, 650), n=st.integers(1, 1100))
def test_batch_read_equals_the_one_record_path(rolled, q, offset, n):
    """A batch ``get`` (records packed into the batch's own bytes, messages made in compiled
    code) hands out what ``read_at`` decodes record by record, and the same bodies alone."""
    r = rolled.get("t", q, offset, n)
    assert list(r.messages) == [rolled.read_at(m.commitlog_offset) for m in r.messages]
    assert r.bodies() == [m.body for m in r.messages]
    assert [m.queue_offset for m in r.messages] == list(range(offset, offset + len(r.messages)))
