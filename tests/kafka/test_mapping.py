"""The Kafka record <-> strata message mapping is exact through a real store: any key
(null, empty, binary, UTF-8), value, headers (repeated names, null and binary values, names
that collide with strata's) and timestamp (also 0 and -1) come back as sent; a UTF-8 key is
also found by ``store.query``."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata import Message, MessageStore
from strata.broker.kafka.mapping import from_message, to_message
from strata.store.config import StoreConfig

keys = st.one_of(st.none(), st.binary(max_size=40), st.text(max_size=20).map(str.encode))
values = st.one_of(st.none(), st.binary(max_size=200))
names = st.one_of(st.text(min_size=0, max_size=12), st.sampled_from(
    ["KEYS", "TAGS", "KAFKA_HEADERS", "UNIQ_KEY", "dup"]))
header_values = st.one_of(st.none(), st.binary(max_size=30), st.text(max_size=10).map(str.encode))
records = st.tuples(keys, values, st.integers(-1, 2**41),
                    st.lists(st.tuples(names, header_values), max_size=5))


def _store(tmp_path_factory) -> MessageStore:
    return MessageStore(tmp_path_factory.mktemp("map") / "s", StoreConfig(
        segment_size=1 << 22, index_slots=4096, index_entries=16384, prefault=False))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])
@given(st.lists(records, min_size=1, max_size=8))
def test_records_round_trip_through_the_store(tmp_path_factory, recs):
    store = _store(tmp_path_factory)
    try:
        store.put_batch([to_message("t", 0, k, v, ts, h) for k, v, ts, h in recs])
        store.wait_dispatched()
        got = store.get("t", 0, 0, len(recs)).messages
        for (k, v, ts, h), m in zip(recs, got):
            assert from_message(m) == (k, v, ts, list(h))
    finally:
        store.close()


def test_a_utf8_key_is_indexed_and_other_messages_map_too(tmp_path_factory):
    store = _store(tmp_path_factory)
    try:
        store.put_batch([to_message("t", 0, "ключ".encode(), b"v", 5, []),
                         Message("t", b"native", keys=("a", "b"), tags="T",
                                 properties={"p": "1"}, queue_id=0)])
        store.wait_dispatched()
        assert [m.body for m in store.query("t", "ключ")] == [b"v"]
        native = store.get("t", 0, 1, 1).messages[0]
        key, value, ts, headers = from_message(native)
        assert (key, value) == (b"a b", b"native")
        assert ts == native.store_timestamp           # no born timestamp: the store's
        assert headers == [("TAGS", b"T"), ("p", b"1")]
    finally:
        store.close()
