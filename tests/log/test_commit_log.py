"""The commit log through the store: rolling segments, reads, scan order, flush positions,
sealed-segment footers, clean and unclean restarts, queue offsets."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from crc32c import crc32c

import strata
from strata.errors import InvalidInputError, MessageTooLargeError
from strata.format import record as rec
from strata.format.segment import HEADER_AREA, SegmentFooter, SegmentHeader, file_name

from support import SMALL_SEGMENT, body_for, make_message, small_store_config


def segment_files(store_dir: Path) -> list[Path]:
    return sorted(p for p in (store_dir / "commitlog").iterdir()
                  if len(p.name) == 20 and p.name.isdigit())


def read_footer(path: Path, data_size: int) -> SegmentFooter | None:
    raw = path.read_bytes()
    return SegmentFooter.decode(raw[HEADER_AREA + data_size:])


def fill(store, n: int, *, size: int = 1000, batch: int = 7, topic: str = "t") -> list:
    """Put n messages (bodies body_for(i, size)) in batches; returns the PutResults."""
    results = []
    for start in range(0, n, batch):
        stop = min(n, start + batch)
        results.extend(store.put_batch([make_message(i, topic=topic, size=size)
                                        for i in range(start, stop)]))
    return results


def test_appends_roll_across_many_small_segments(tmp_store_dir, small_config):
    with strata.open(tmp_store_dir, small_config) as store:
        results = fill(store, 700, size=1000, batch=13)
        assert all(r.ok for r in results)
        offsets = [r.commitlog_offset for r in results]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        for r in results:
            # a record never straddles two segments
            assert r.commitlog_offset // SMALL_SEGMENT == \
                (r.commitlog_offset + r.size - 1) // SMALL_SEGMENT
        for r, nxt in zip(results, results[1:]):
            # contiguous within a segment; a gap only where a blank record closed one
            if r.commitlog_offset // SMALL_SEGMENT == nxt.commitlog_offset // SMALL_SEGMENT:
                assert nxt.commitlog_offset == r.commitlog_offset + r.size
            else:
                assert nxt.commitlog_offset % SMALL_SEGMENT == 0
        for i, r in enumerate(results):
            m = store.read_at(r.commitlog_offset)
            assert m is not None and m.body == body_for(i, 1000) and m.keys == (f"k{i}",)
            assert m.msg_id == r.msg_id and m.size == r.size
            assert m.store_timestamp == r.store_timestamp
        end = store.max_commitlog_offset()
        assert end == results[-1].commitlog_offset + results[-1].size

    files = segment_files(tmp_store_dir)
    assert len(files) >= 10
    assert len(files) == end // SMALL_SEGMENT + 1
    for i, p in enumerate(files):
        assert p.name == file_name(i * SMALL_SEGMENT)
        h = SegmentHeader.decode(p.read_bytes()[:HEADER_AREA])
        assert (h.base_offset, h.data_size) == (i * SMALL_SEGMENT, SMALL_SEGMENT)


def test_blank_record_closes_each_full_segment(tmp_store_dir, small_config):
    with strata.open(tmp_store_dir, small_config) as store:
        results = fill(store, 200, size=1500)
    by_seg = defaultdict(list)
    for r in results:
        by_seg[r.commitlog_offset // SMALL_SEGMENT].append(r)
    files = segment_files(tmp_store_dir)
    for seg_no in sorted(by_seg)[:-1]:
        last = by_seg[seg_no][-1]
        pos = last.commitlog_offset + last.size - seg_no * SMALL_SEGMENT
        data = files[seg_no].read_bytes()[HEADER_AREA:HEADER_AREA + SMALL_SEGMENT]
        assert rec.check_record(data, pos, SMALL_SEGMENT) == \
            (rec.RecordKind.BLANK, SMALL_SEGMENT - pos)


def test_reads_and_scans_across_segment_boundaries(tmp_store_dir, small_config):
    with strata.open(tmp_store_dir, small_config) as store:
        results = fill(store, 300, size=900, batch=5)
        bodies = [body_for(i, 900) for i in range(300)]
        assert [m.body for m in store.scan()] == bodies
        assert [m.commitlog_offset for m in store.scan()] == [r.commitlog_offset for r in results]

        # start just before a boundary: the scan crosses into the next segments
        firsts = [i for i in range(1, 300)
                  if results[i].commitlog_offset // SMALL_SEGMENT
                  != results[i - 1].commitlog_offset // SMALL_SEGMENT]
        assert len(firsts) >= 3
        for i in firsts:
            assert results[i].commitlog_offset % SMALL_SEGMENT == 0
            got = [m.body for m in store.scan(results[i - 1].commitlog_offset)]
            assert got == bodies[i - 1:]
            # from a segment's base offset
            assert [m.body for m in store.scan(results[i].commitlog_offset)] == bodies[i:]
        # to_offset bounds the scan (exclusive of records that start at or after it)
        stop = results[firsts[1]].commitlog_offset
        assert [m.body for m in store.scan(0, to_offset=stop)] == bodies[:firsts[1]]
        # from beyond the end: nothing
        assert list(store.scan(store.max_commitlog_offset())) == []


def test_scan_order_is_put_order_across_topics_and_batches(tmp_store_dir, small_config):
    with strata.open(tmp_store_dir, small_config) as store:
        expected = []
        seq = 0
        for round_ in range(30):
            batch = []
            for j in range(round_ % 6 + 1):
                topic = ("alpha", "beta", "gamma")[(seq + j) % 3]
                batch.append(make_message(seq, topic=topic, size=50 + seq % 300))
                expected.append((topic, body_for(seq, 50 + seq % 300)))
                seq += 1
            store.put_batch(batch)
        assert [(m.topic, m.body) for m in store.scan()] == expected


def test_read_at_non_record_offsets_returns_none(tmp_store_dir, small_config):
    with strata.open(tmp_store_dir, small_config) as store:
        results = fill(store, 120, size=1000)
        r = results[5]
        for off in (r.commitlog_offset + 1, r.commitlog_offset + 4, r.commitlog_offset + 8,
                    r.commitlog_offset + r.size // 2, r.commitlog_offset + r.size - 4):
            assert store.read_at(off) is None, off
        # the blank record that closes the first segment is not a message
        last_in_first = [x for x in results if x.commitlog_offset < SMALL_SEGMENT][-1]
        blank_at = last_in_first.commitlog_offset + last_in_first.size
        assert blank_at < SMALL_SEGMENT
        assert store.read_at(blank_at) is None
        end = store.max_commitlog_offset()
        for off in (end, end + 1, end + 10 * SMALL_SEGMENT, -1, -SMALL_SEGMENT):
            assert store.read_at(off) is None, off
        with pytest.raises(InvalidInputError):
            store.read_at("0")
        with pytest.raises(InvalidInputError):
            store.read_at(1.0)
        assert store.read_at(r.commitlog_offset).body == body_for(5, 1000)


def test_read_at_returns_every_field(tmp_store_dir, small_config):
    with strata.open(tmp_store_dir, small_config) as store:
        msg = strata.Message("orders", b"payload", keys=["o-1", "o-2"], tags="new",
                             properties={"región": "eu-west ☁", "n": "1"}, queue_id=2,
                             born_timestamp=1_700_000_000_000, flag=9,
                             born_host=("2001:db8::7", 4321))
        r = store.put(msg)
        m = store.read_at(r.commitlog_offset)
        assert (m.topic, m.body, m.keys, m.tags) == ("orders", b"payload", ("o-1", "o-2"), "new")
        assert m.properties == {"región": "eu-west ☁", "n": "1"}
        assert (m.queue_id, m.queue_offset, m.flag) == (2, 0, 9)
        assert m.born_timestamp == 1_700_000_000_000
        assert m.born_host == ("2001:db8::7", 4321)
        assert m.store_host == small_config.store_host
        assert m.sys_flag & rec.SYSFLAG_BORN_HOST_V6
        assert m.store_timestamp == r.store_timestamp
        assert (m.commitlog_offset, m.msg_id) == (r.commitlog_offset, r.msg_id)
        assert len(r.msg_id) == 32
        assert store.get_by_id(r.msg_id) == m
        assert store.get_by_id(r.msg_id.lower()) == m


def test_largest_record_fits_a_segment(tmp_store_dir, small_config):
    with strata.open(tmp_store_dir, small_config) as store:
        store.put(make_message(0, size=10))
        overhead = store.put(make_message(1, size=0, keys=())).size
        # the largest record leaves room for a blank record (12 bytes) after it
        body = SMALL_SEGMENT - rec.BLANK_MIN_SIZE - overhead
        r = store.put(strata.Message("t", body_for(2, body)))
        assert r.size == SMALL_SEGMENT - rec.BLANK_MIN_SIZE
        assert r.commitlog_offset == SMALL_SEGMENT  # did not fit the first: rolled
        assert store.read_at(r.commitlog_offset).body == body_for(2, body)
        before = store.max_commitlog_offset()
        with pytest.raises(MessageTooLargeError, match="max_body_size"):
            store.put(strata.Message("t", bytes(body + 1)))
        assert store.max_commitlog_offset() == before
        r2 = store.put(make_message(3))
        assert r2.commitlog_offset == 2 * SMALL_SEGMENT
    with strata.open(tmp_store_dir, small_config) as store:
        assert [m.body for m in store.scan()][2:] == [body_for(2, body), body_for(3, 100)]


def test_flushed_offset_follows_flush_async(tmp_store_dir):
    # the background flusher would run only after a minute: flushing is ours to do
    cfg = small_store_config(flush_interval_ms=60_000, flush_thorough_interval_ms=60_000)
    with strata.open(tmp_store_dir, cfg) as store:
        fill(store, 20, size=200)
        end = store.max_commitlog_offset()
        assert 0 <= store.flushed_offset() < end
        assert store.flush() == end
        assert store.flushed_offset() == end
        fill(store, 200, size=1000)  # rolls several segments
        end = store.max_commitlog_offset()
        assert store.flushed_offset() < end
        assert store.flush() == end == store.flushed_offset()


def test_flushed_offset_in_sync_mode_covers_every_put(tmp_store_dir):
    cfg = small_store_config(flush="sync")
    with strata.open(tmp_store_dir, cfg) as store:
        for i in range(60):
            r = store.put(make_message(i, size=1500))
            assert r.ok
            assert store.flushed_offset() >= r.commitlog_offset + r.size


def _expected_footers(results, n_segments):
    per = defaultdict(list)
    for r in results:
        per[r.commitlog_offset // SMALL_SEGMENT].append(r)
    return {s: (len(per[s]), min(r.store_timestamp for r in per[s]),
                max(r.store_timestamp for r in per[s])) for s in range(n_segments)}


def test_sealed_segments_get_valid_footers(tmp_store_dir, small_config):
    with strata.open(tmp_store_dir, small_config) as store:
        results = []
        for k in range(12):  # several store timestamps per segment
            results += fill(store, 40, size=700, batch=3)
        store.flush()
        files = segment_files(tmp_store_dir)
        n = len(files)
        assert n >= 5
        expected = _expected_footers(results, n)
        for i, p in enumerate(files):
            footer = read_footer(p, SMALL_SEGMENT)
            if i == n - 1:
                assert footer is None  # the active segment is not sealed
                continue
            assert footer is not None, p.name
            data = p.read_bytes()[HEADER_AREA:HEADER_AREA + SMALL_SEGMENT]
            assert footer.data_length == SMALL_SEGMENT
            assert footer.data_crc == crc32c(data)
            assert (footer.record_count, footer.min_store_timestamp,
                    footer.max_store_timestamp) == expected[i]


def test_clean_restart_trusts_sealed_segments(tmp_store_dir, small_config):
    with strata.open(tmp_store_dir, small_config) as store:
        results = fill(store, 400, size=800)
        end = store.max_commitlog_offset()
    n = len(segment_files(tmp_store_dir))
    with strata.open(tmp_store_dir, small_config) as store:
        rep = store.recovery_report
        assert rep.clean
        assert rep.records_verified == 0 and rep.scanned_segments == 0
        assert rep.trusted_segments == n - 1
        assert rep.end_offset == end == store.max_commitlog_offset()
        assert rep.truncated_at is None and rep.dropped_segments == []
        assert [m.body for m in store.scan()] == [body_for(i, 800) for i in range(400)]
        # appends continue where the log ended, and carry on the segment statistics
        more = fill(store, 100, size=800)
        assert more[0].commitlog_offset == end
        results += more
        store.flush()
        files = segment_files(tmp_store_dir)
        expected = _expected_footers(results, len(files))
        for i, p in enumerate(files[:-1]):
            f = read_footer(p, SMALL_SEGMENT)
            assert (f.record_count, f.min_store_timestamp, f.max_store_timestamp) == expected[i]


def test_unclean_restart_scans_only_the_active_segment(tmp_store_dir, small_config):
    store = strata.open(tmp_store_dir, small_config)
    results = fill(store, 400, size=800)
    store.flush()
    store._abandon()
    n = len(segment_files(tmp_store_dir))
    active = [r for r in results if r.commitlog_offset >= (n - 1) * SMALL_SEGMENT]
    with strata.open(tmp_store_dir, small_config) as store:
        rep = store.recovery_report
        assert not rep.clean
        assert rep.trusted_segments == n - 1
        assert rep.scanned_segments == 1
        assert rep.verified_from == (n - 1) * SMALL_SEGMENT
        assert rep.records_verified == len(active) > 0
        assert rep.truncated_at is None and rep.problem is None
        assert [m.body for m in store.scan()] == [body_for(i, 800) for i in range(400)]


def test_queue_offsets_consecutive_per_topic_queue_across_restarts(tmp_store_dir, small_config):
    seen: dict[tuple[str, int], list[int]] = defaultdict(list)
    seq = 0

    def put_some(store, rounds):
        nonlocal seq
        for k in range(rounds):
            batch = []
            for j in range(5):
                topic = ("a", "b")[(seq + j) % 2]
                qid = None if j % 2 else (seq + j) % 3
                batch.append(make_message(seq + j, topic=topic, size=300, queue_id=qid))
            seq += len(batch)
            for r in store.put_batch(batch):
                seen[(r.topic, r.queue_id)].append(r.queue_offset)

    with strata.open(tmp_store_dir, small_config) as store:
        put_some(store, 40)
    with strata.open(tmp_store_dir, small_config) as store:   # clean restart
        put_some(store, 40)
        store.flush()
        store._abandon()
    with strata.open(tmp_store_dir, small_config) as store:   # unclean restart
        assert not store.recovery_report.clean
        put_some(store, 40)
        from_log: dict[tuple[str, int], list[int]] = defaultdict(list)
        for m in store.scan():
            from_log[(m.topic, m.queue_id)].append(m.queue_offset)
    assert len(seen) >= 6
    for key, offs in seen.items():
        assert offs == list(range(len(offs))), key
    assert from_log == seen
