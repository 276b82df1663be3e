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


def three_topics(path) -> dict[str, list[bytes]]:
    """t0, t1, t2 with 2 queues each and a keyed message in every queue; bodies per topic."""
    with strata.open(path, small_store_config()) as store:
        for t in ("t0", "t1", "t2"):
            store.create_topic(t, queues=2)
        for i in range(12):
            t = f"t{i % 3}"
            store.put(strata.Message(t, b"%s-%d" % (t.encode(), i), queue_id=i // 3 % 2,
                                     keys=[f"k{i}"]))
    return {t: sorted(b"%s-%d" % (t.encode(), i) for i in range(12) if i % 3 == int(t[1]))
            for t in ("t0", "t1", "t2")}


def flip_at(path, at: int, bit: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 1 << bit
    path.write_bytes(bytes(raw))


def assert_whole(store, expected: dict[str, list[bytes]]) -> None:
    assert store.topics() == sorted(expected)
    for t, want in expected.items():
        assert store.queue_count(t) == 2
        assert sorted(bodies(store, t)) == want
    for i in range(12):
        assert [m.body for m in store.query(f"t{i % 3}", f"k{i}")] == [b"t%d-%d" % (i % 3, i)]


def without_checksum(path) -> None:
    """Rewrite ``path`` as a store made before topics.json had its checksum would have."""
    data = json.loads(path.read_bytes())
    del data["crc32c"]
    path.write_bytes(json.dumps(data, indent=1).encode())


@pytest.mark.parametrize("old_format", [False, True], ids=["checksummed", "no-checksum"])
def test_a_flip_that_renames_a_topic_to_another_is_repaired(tmp_path, old_format):
    """'t2' flipped to 't0' still parses (JSON keeps the last of two equal keys), which
    silently dropped t2 and every message of it."""
    path = tmp_path / "s"
    expected = three_topics(path)
    f = path / TOPICS_FILE
    if old_format:
        without_checksum(f)
    at = f.read_bytes().index(b'"t2"') + 2
    flip_at(f, at, 1)
    assert b'"t0"' in f.read_bytes()[at - 2:at + 2]
    with strata.open(path) as store:
        assert_whole(store, expected)
        assert any("topics.json" in r and "appears twice" in r
                   for r in store.recovery_report.repaired_files)
    with strata.open(path) as store:
        assert store.recovery_report.repaired_files == []
        assert_whole(store, expected)


def test_a_topic_renamed_to_a_new_name_in_an_unchecksummed_table_is_found_by_its_queues(tmp_path):
    """A table from before the checksum: 't2' flipped to 't6' parses into a whole, different
    table; the queue directories show t2 is missing from it."""
    path = tmp_path / "s"
    expected = three_topics(path)
    f = path / TOPICS_FILE
    without_checksum(f)
    flip_at(f, f.read_bytes().index(b'"t2"') + 2, 2)
    with strata.open(path) as store:
        assert_whole(store, expected)
        assert any("lacks queues" in r and "t2" in r for r in store.recovery_report.repaired_files)


def test_a_flipped_queue_count_is_repaired(tmp_path):
    path = tmp_path / "s"
    expected = three_topics(path)
    f = path / TOPICS_FILE
    raw = f.read_bytes()
    flip_at(f, raw.index(b'"queues": 2', raw.index(b'"t1"')) + len('"queues": '), 1)  # 2 -> 0
    assert b'"queues": 0' in f.read_bytes()
    with strata.open(path, readonly=True) as ro:
        assert ro.queue_count("t1") == 2
    with strata.open(path) as store:
        assert_whole(store, expected)
        assert any("checksum mismatch" in r for r in store.recovery_report.repaired_files)


def test_every_single_bit_flip_of_the_topic_table_is_detected(tmp_path):
    """Each flip either comes back as the same table (rebuilt from the queue directories) or,
    without them, is a named CorruptStoreError: never a different table, never a raw error."""
    path = tmp_path / "s"
    three_topics(path)
    f = path / TOPICS_FILE
    good = f.read_bytes()
    table = TopicTable(path, readonly=True)
    table.load()
    queues, since = dict(table.queues), dict(table.since)
    for at in range(len(good)):
        for bit in range(8):
            flip_at(f, at, bit)
            with pytest.raises(CorruptStoreError, match="topics.json"):
                TopicTable(path, readonly=True).load()
            rebuilt = TopicTable(path, readonly=True, queues_dir=path / "consumequeue")
            rebuilt.load()
            assert rebuilt.queues == queues, (at, bit)
            assert all(rebuilt.since[t] >= since[t] for t in queues)
            f.write_bytes(good)


def test_a_table_from_before_the_checksum_loads_as_it_is(tmp_path):
    path = tmp_path / "s"
    expected = three_topics(path)
    without_checksum(path / TOPICS_FILE)
    with strata.open(path) as store:
        assert store.recovery_report.repaired_files == []
        assert_whole(store, expected)
        store.create_topic("t3", queues=1)                  # the next change adds the checksum
    assert "crc32c" in json.loads((path / TOPICS_FILE).read_bytes())


def test_queue_directories_a_checksummed_table_no_longer_has_do_not_bring_a_topic_back(tmp_path):
    """A delete_topic cut short after the table was written leaves t2's queue directories;
    the table's checksum holds, so t2 stays deleted."""
    path = tmp_path / "s"
    three_topics(path)
    with strata.open(path) as store:
        store.topic_table.delete("t2")                      # the crash came before the queues went
    assert (path / "consumequeue" / "t2").is_dir()
    with strata.open(path) as store:
        assert store.topics() == ["t0", "t1"]
        assert store.recovery_report.repaired_files == []
