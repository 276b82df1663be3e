"""The tier's compiled read path (tiered/read_kernels over cached chunk blocks, lazy
MessageBatch): a tier get answers message for message as the local get did, across chunk
boundaries and with tag filters; a damaged record is named and passed over, never served;
the read cache stays within its bound."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest

import strata
from strata.format.record_batch import MessageBatch
from strata.format.consume_queue import tag_hash
from strata.tiered import chunk_reads as tier_reader
from strata.tiered import service as tier_service
from strata.tiered.dispatcher import UploadPolicy
from strata.tiered.layout import chunk_path
from strata.tiered.reader import TieredQueueReader
from tier_helpers import TOPICS, fill, local_history, tier_config

N = 4000
FAR = int((datetime.now() + timedelta(days=30)).timestamp() * 1000)   # every segment expired
CHUNK = 40


@pytest.fixture
def small_chunks():
    tier_service.DEFAULT_POLICY = UploadPolicy(chunk_messages=CHUNK, commit_every=3)
    yield
    tier_service.DEFAULT_POLICY = None


CASES = [(off, n, tags) for off in (0, 1, CHUNK - 1, CHUNK, CHUNK + 3, 2 * CHUNK - 2)
         for n in (1, 2, CHUNK, CHUNK + 1, 2 * CHUNK + 7) for tags in (None, "red")]


def answers(store, queues) -> dict:
    out = {}
    for topic, q in queues:
        for off, n, tags in CASES:
            r = store.get(topic, q, off, n, tags=tags)
            out[(topic, q, off, n, tags)] = (r.status, list(r.messages), r.next_offset)
    return out


def test_a_tier_get_answers_as_the_local_get(tier, tmp_store_dir, small_chunks):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        hist = local_history(store)
        queues = [k for k, msgs in hist.items() if len(msgs) > 3 * CHUNK]
        assert len(queues) >= 4
        before = answers(store, queues)
        assert store.clean_expired(FAR) >= 3
        for (topic, q), msgs in hist.items():                  # the reader on its own
            reader = store.tier.history
            assert reader.max_offset(topic, q) > CHUNK
            for off, n, _tags in CASES:
                got = reader.get(topic, q, off, n)
                assert type(got) is MessageBatch and len(got) == min(n, len(msgs) - off)
                assert got == msgs[off:off + n], (topic, q, off, n)
        compared = 0
        for (topic, q, off, n, tags), (status, msgs, nxt) in before.items():
            if store.queues.get(topic, q).min_offset() < off + n:
                continue        # partly local: only what the tier answers alone is compared
            compared += 1
            r = store.get(topic, q, off, n, tags=tags)
            assert r.status is status and r.messages == msgs and not r.corrupt, \
                (topic, q, off, n, tags)
            if tags is None:
                assert type(r.messages) is MessageBatch and r.next_offset == nxt
            else:    # a tag filter looks at up to 800 units: the local get went on past the
                assert r.next_offset == nxt or r.next_offset == store.tier.history.max_offset(
                    topic, q)                               # tier's end into local units
        assert compared > len(before) * 3 // 4
        red = [m for m in hist[queues[0]] if m.tags == "red"]  # every third message
        r = store.get(*queues[0], 0, 5, tags="red")
        assert r.messages == red[:5] and r.next_offset == red[4].queue_offset + 1


def test_read_filters_by_the_units_tag_hashes(tier, tmp_store_dir, small_chunks):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        msgs = local_history(store)[("orders", 0)]
        reader = TieredQueueReader.from_tier(tier.backend())
        got = reader.read("orders", 0, 3, 2 * CHUNK, np.array([tag_hash("red")], np.int64))
        assert list(got.messages) == [m for m in msgs[3:3 + 2 * CHUNK] if m.tags == "red"]
        assert got.next_offset == 3 + 2 * CHUNK and got.damaged == []
        end = reader.max_offset("orders", 0)
        got = reader.read("orders", 0, end - 5, 100)                  # stops at the tier's end
        assert list(got.messages) == msgs[end - 5:end] and got.next_offset == end


def test_a_read_longer_than_a_piece_is_read_in_pieces(tier, tmp_store_dir, small_chunks,
                                                      monkeypatch):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        msgs = local_history(store)[("audit", 1)]
        monkeypatch.setattr(tier_reader, "PIECE_BYTES", 1000)       # a few records a piece
        reader = TieredQueueReader.from_tier(tier.backend())
        assert reader.get("audit", 1, 2, 3 * CHUNK) == msgs[2:2 + 3 * CHUNK]
        assert list(reader.read("audit", 1, 2, 3 * CHUNK).messages) == msgs[2:2 + 3 * CHUNK]


def flip(backend, path: str, at: int) -> None:
    raw = bytearray(backend.read(path))
    raw[at] ^= 0x40
    backend.put(path, bytes(raw))


def test_flipped_bytes_in_a_tier_chunk_are_named_and_passed_over(tier, tmp_store_dir,
                                                                  small_chunks):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        msgs = local_history(store)[("orders", 2)]
        store.clean_expired(FAR)
        chunks = store.tier.history.metadata.queue("orders", 2).chunks
        assert (chunks[0].first, chunks[1].first) == (0, CHUNK)
        first, second = chunk_path("orders", 2, 0, "log"), chunk_path("orders", 2, CHUNK, "log")
        b = tier.backend()
        at = {m.queue_offset: sum(x.size for x in msgs[:m.queue_offset]) for m in msgs}
        flip(b, first, at[CHUNK - 2] + msgs[CHUNK - 2].size - 10)      # a body byte: CRC
        flip(b, second, at[CHUNK + 1] - at[CHUNK] + 1)                  # a length byte
        tagged = next(i for i in range(CHUNK + 2, 2 * CHUNK) if msgs[i].tags == "red")
        flip(b, second, at[tagged] - at[CHUNK] + msgs[tagged].size - 10)
        for p in (first, second):
            store.tier.history.cache.drop(p)
        bad = {CHUNK - 2: first, CHUNK + 1: second, tagged: second}

        r = store.get("orders", 2, CHUNK - 5, 2 * CHUNK)            # across the boundary
        want = [m for m in msgs[CHUNK - 5:3 * CHUNK - 5] if m.queue_offset not in bad]
        assert r.status is strata.GetStatus.FOUND and r.messages == want
        assert r.next_offset == 3 * CHUNK - 5
        assert {c.queue_offset: c.commitlog_offset for c in r.corrupt} == \
            {o: -1 for o in bad}
        for c in r.corrupt:
            assert bad[c.queue_offset] in c.reason and f"offset {c.queue_offset} " in c.reason
            assert bad[c.queue_offset] in str(c.error())
        assert "CRC32C" in next(c.reason for c in r.corrupt if c.queue_offset == CHUNK - 2)
        assert "no whole record" in next(c.reason for c in r.corrupt
                                         if c.queue_offset == CHUNK + 1)

        r = store.get("orders", 2, CHUNK - 5, 20, tags="red")          # candidates only
        end = store.tier.history.max_offset("orders", 2)
        red = [m for m in msgs[CHUNK - 5:end] if m.tags == "red" and m.queue_offset not in bad]
        assert r.messages == red[:20] and r.next_offset == red[19].queue_offset + 1
        assert {c.queue_offset for c in r.corrupt} == {o for o in bad if msgs[o].tags == "red"}

        reader = TieredQueueReader.from_tier(b)
        got = reader.read("orders", 2, 0, 2 * CHUNK)
        assert list(got.messages) == [m for m in msgs[:2 * CHUNK] if m.queue_offset not in bad]
        assert [o for o, _why in got.damaged] == sorted(bad)
        with pytest.raises(strata.errors.CorruptStoreError, match=f"offset {CHUNK - 2} "):
            reader.get("orders", 2, 0, CHUNK)
        assert reader.get("orders", 2, 0, CHUNK - 2) == msgs[:CHUNK - 2]
        report = reader.verify()
        assert len(report.problems) == 2 and first in report.problems[0] and \
            second in report.problems[1]


def test_the_read_cache_stays_within_its_bound(tier, tmp_store_dir, small_chunks):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        hist = local_history(store)
    reader = TieredQueueReader.from_tier(tier.backend(), cache_bytes=8192, block_size=4096)
    for (topic, q), msgs in hist.items():
        off = 0
        while off < len(msgs):
            got = reader.get(topic, q, off, 17)
            assert got == msgs[off:off + 17]
            assert reader.cache.cached_bytes <= 8192
            off += len(got)


def test_read_at_from_the_tier_returns_exactly_the_stored_messages(tier, tmp_store_dir,
                                                                   small_chunks):
    """read_at by commit-log offset from the tier alone: each record as the local read gave
    it, whether found by a search over headers (a chunk's first reads) or in the chunk's
    record offsets (built once searched often enough); None where no record starts."""
    import random
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        msgs = [m for ms in local_history(store).values() for m in ms]
        reader = store.tier.reader()
        sample = random.Random(7).sample(msgs, 300 if tier.kind == "s3" else len(msgs))
        for _ in range(3):
            random.Random(len(reader._phys)).shuffle(sample)
            for m in sample:
                assert reader.read_at(m.commitlog_offset) == m
        assert reader._phys                              # the record offsets path ran
        by_phys = {m.commitlog_offset: m for m in msgs}
        for m in sample[:100]:
            assert reader.read_at(m.commitlog_offset + 1) is None   # not a record start
            assert reader.read_at(m.commitlog_offset + m.size) == \
                by_phys.get(m.commitlog_offset + m.size)           # the next record, if any
        last = max(m.commitlog_offset + m.size for m in msgs)
        assert reader.read_at(-1) is None and reader.read_at(last) is None
        assert reader.read_at(last + 10_000) is None
        assert reader.min_commitlog_offset() == min(by_phys)
        fill(store, 10, start=N)                                    # not uploaded: not there
        fresh = [m for ms in local_history(store).values() for m in ms
                 if m.commitlog_offset >= last]
        assert fresh and all(reader.read_at(m.commitlog_offset) is None for m in fresh)


def test_read_at_names_a_damaged_record_whichever_way_it_is_found(tmp_path, tmp_store_dir,
                                                                  small_chunks):
    from strata.format import record as rec
    from strata.tiered.errors import CorruptTierError
    from tier_helpers import Tier
    tier = Tier("posix", f"file://{tmp_path / 'tier'}", None)
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, N)
        store.tier_sync(timeout_s=60)
        hist = local_history(store)
        msgs = hist[(TOPICS[0], 0)][:CHUNK]                  # the queue's first chunk
        path = chunk_path(TOPICS[0], 0, 0, "log")
        b = tier.backend()
        good = b.read(path)
        at = sum(m.size for m in msgs[:5])                   # record 5 starts here
        for where, header in ((at + msgs[5].size - 20, False),        # its body: CRC fails
                              (at + rec.POS_PHYSICAL_OFFSET + 6, True)):  # its offset field
            raw = bytearray(good)
            raw[where] ^= 0x40
            b.put(path, bytes(raw))
            reader = store.tier.reader()
            for _ in range(3):                               # record offsets built (or not)
                for m in msgs[:5] + msgs[6:]:
                    try:
                        assert reader.read_at(m.commitlog_offset) == m
                    except CorruptTierError as exc:   # a search over the headers that
                        assert header and path in str(exc)   # meets the damaged one
            with pytest.raises(CorruptTierError, match=path):
                reader.read_at(msgs[5].commitlog_offset)
        b.put(path, good)
        reader = store.tier.reader()
        assert all(reader.read_at(m.commitlog_offset) == m for m in msgs)
