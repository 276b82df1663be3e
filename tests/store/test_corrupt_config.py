"""A damaged config file (config/topics.json, config/geometry.json) is recovered from what the
store's other files say, rewritten crash-safely and reported, or refused with a named error
that says how to repair it: never a raw UnicodeDecodeError."""

from __future__ import annotations

import json

import pytest

import strata
from strata.errors import CorruptStoreError
from strata.store.geometry import GEOMETRY_FILE, stored_config
from strata.store.topics import TOPICS_FILE, TopicTable

from support import SMALL_SEGMENT, small_store_config


def flip_to_non_utf8(path, at: int = 3) -> bytes:
    """Replace one byte of ``path`` with 0xFF (never valid UTF-8); returns the new bytes."""
    raw = bytearray(path.read_bytes())
    raw[at] = 0xFF
    path.write_bytes(bytes(raw))
    return bytes(raw)


def make_store(path, *, keys: bool = True) -> list[strata.PutResult]:
    with strata.open(path, small_store_config()) as store:
        store.create_topic("orders", queues=3)
        store.create_topic("empty", queues=2)      # never holds a message
        out = [store.put(strata.Message("orders", b"o%d" % i, queue_id=i % 3,
                                        keys=[f"k{i}"] if keys else ()))
               for i in range(9)]
        out.append(store.put(strata.Message("pay", b"p", keys=["p"] if keys else ())))
        return out


def bodies(store, topic: str) -> list[bytes]:
    return [m.body for q in range(store.queue_count(topic))
            for m in store.get(topic, q, 0, 100).messages]


@pytest.mark.parametrize("damage", ["non-utf8", "not-json", "wrong-shape"])
def test_a_damaged_topic_table_is_rebuilt_from_the_queue_directories(tmp_path, damage):
    path = tmp_path / "s"
    results = make_store(path)
    f = path / TOPICS_FILE
    if damage == "non-utf8":
        flip_to_non_utf8(f)
    elif damage == "not-json":
        f.write_bytes(f.read_bytes()[:-7])
    else:
        f.write_text('{"version": 1, "topics": [1, 2]}')
    broken = f.read_bytes()
    # a read-only opener recovers in memory and writes nothing
    with strata.open(path, readonly=True) as ro:
        assert ro.topics() == ["orders", "pay"]
        assert sorted(bodies(ro, "orders")) == sorted(b"o%d" % i for i in range(9))
    assert f.read_bytes() == broken
    # a writer recovers, rewrites the file and says so in its recovery report
    with strata.open(path) as store:
        assert store.topics() == ["orders", "pay"]
        assert store.queue_count("orders") == 3 and store.queue_count("pay") == 1
        assert sorted(bodies(store, "orders")) == sorted(b"o%d" % i for i in range(9))
        assert store.get_by_id(results[-1].msg_id).body == b"p"
        assert any("topics.json" in r for r in store.recovery_report.repaired_files)
        assert "topics.json" in store.recovery_report.summary()
        r = store.put(strata.Message("orders", b"more", queue_id=1))
        assert r.queue_offset == 3                          # the queue goes on where it was
    table = json.loads(f.read_bytes())["topics"]
    assert table["orders"]["queues"] == 3
    assert table["orders"]["since"] <= results[0].commitlog_offset
    with strata.open(path) as store:                        # and the next open finds it whole
        assert store.recovery_report.repaired_files == []


def test_a_recovered_topic_keeps_deleted_topics_records_out(tmp_path):
    """A topic deleted and made again: the recovered table starts it at its oldest unit, so the
    old incarnation's records stay out of query."""
    path = tmp_path / "s"
    with strata.open(path, small_store_config()) as store:
        store.put(strata.Message("t", b"old", keys=["k"]))
        store.delete_topic("t")
        new = store.put(strata.Message("t", b"new", keys=["k"]))
    flip_to_non_utf8(path / TOPICS_FILE)
    with strata.open(path) as store:
        assert [m.body for m in store.query("t", "k")] == [b"new"]
        assert store.topic_table.since["t"] == new.commitlog_offset


def test_a_topic_table_without_its_queue_directories_is_a_named_error(tmp_path):
    path = tmp_path / "s"
    make_store(path)
    flip_to_non_utf8(path / TOPICS_FILE)
    table = TopicTable(path, readonly=True)                 # e.g. an offline tool's view
    with pytest.raises(CorruptStoreError, match="topics.json.*unreadable topic table"):
        table.load()


def test_a_damaged_geometry_file_is_recovered_from_the_file_headers(tmp_path):
    path = tmp_path / "s"
    make_store(path)
    g = path / GEOMETRY_FILE
    broken = flip_to_non_utf8(g)
    assert stored_config(path).segment_size == SMALL_SEGMENT
    with strata.open(path, readonly=True) as ro:
        assert ro.config.segment_size == SMALL_SEGMENT
    assert g.read_bytes() == broken                          # a reader writes nothing
    with strata.open(path) as store:
        cfg = store.config
        assert (cfg.segment_size, cfg.consume_queue_units, cfg.index_slots,
                cfg.index_entries) == (SMALL_SEGMENT, 4096, 1024, 8192)
        assert any("geometry.json" in r for r in store.recovery_report.repaired_files)
    assert json.loads(g.read_bytes())["segment_size"] == SMALL_SEGMENT


def test_a_damaged_geometry_file_the_headers_cannot_replace_is_a_named_error(tmp_path):
    path = tmp_path / "s"
    make_store(path, keys=False)                             # no key-index file: sizes unknown
    for p in (path / "index").glob("*"):
        p.unlink()
    flip_to_non_utf8(path / GEOMETRY_FILE)
    with pytest.raises(CorruptStoreError, match="geometry.json.*explicit strata.StoreConfig"):
        strata.open(path)
    with strata.open(path, small_store_config()) as store:  # the repair the message names
        assert sorted(bodies(store, "orders")) == sorted(b"o%d" % i for i in range(9))
    with strata.open(path) as store:
        assert store.config.segment_size == SMALL_SEGMENT
