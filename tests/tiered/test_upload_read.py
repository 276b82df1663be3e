"""A store with a tier uploads its confirmed messages; the tier alone answers reads of them,
byte for byte what the store answers locally."""

from __future__ import annotations

import shutil
import time

import pytest

import strata
from support import make_message
from strata.tiered import service as tier_service
from strata.tiered.dispatcher import UploadDispatcher, UploadPolicy
from strata.tiered.errors import TierConflictError, TierUnavailableError
from strata.tiered.metadata import LOCAL_DIR, LOCAL_FILE
from strata.tiered.reader import TieredQueueReader
from tier_helpers import (TOPICS, check_tier_consistent, fill, local_history, tier_config,
                          tier_history)


@pytest.fixture
def small_chunks():
    """Chunks of at most 40 messages: many chunks per queue from few messages."""
    tier_service.DEFAULT_POLICY = UploadPolicy(chunk_messages=40, commit_every=3)
    yield
    tier_service.DEFAULT_POLICY = None


def test_tier_answers_like_the_store(tier, tmp_store_dir, small_chunks):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, 1200)
        store.tier_sync(timeout_s=60)
        local = local_history(store)
        reader = store.tier.reader()
        assert tier_history(reader, local) == local
        for topic, q in local:
            assert reader.min_offset(topic, q) == 0
            assert reader.max_offset(topic, q) == store.max_offset(topic, q)
            assert reader.earliest_time(topic, q) == store.earliest_time(topic, q)
            times = [m.store_timestamp for m in local[(topic, q)]]
            for ts in (0, times[0], times[len(times) // 2], times[-1], times[-1] + 1,
                       times[0] - 1, 2**61):
                for boundary in ("lower", "upper"):
                    assert reader.offset_for_time(topic, q, ts, boundary) == \
                        store.offset_for_time(topic, q, ts, boundary), (ts, boundary)
        for seq in (0, 1, 7, 640, 1199):
            topic = TOPICS[seq % 2]
            assert reader.query(topic, f"k{seq}") == store.query(topic, f"k{seq}") != []
            assert reader.query(TOPICS[(seq + 1) % 2], f"k{seq}") == []   # other topic
        assert reader.query("orders", "k0", begin_ms=2**61) == []
        assert reader.get("orders", 0, 10**6) == []
        assert reader.get("nope", 0, 0) == [] and reader.max_offset("nope", 0) == 0
        check_tier_consistent(store.tier.backend, reader)
        stat = store.tier.stat()
        assert stat.last_error is None and all(q.lag == 0 for q in stat.queues)
        assert stat.uploaded.messages == 1200


def test_later_syncs_upload_only_the_new_messages(tier, tmp_store_dir, small_chunks):
    cfg = tier_config(tier)
    with strata.open(tmp_store_dir, cfg) as store:
        fill(store, 300)
        store.tier_sync()
        store.tier_sync()          # nothing new: nothing uploaded again
        assert store.tier.stat().uploaded.messages == 300
    with strata.open(tmp_store_dir, cfg) as store:   # reopened: goes on where it stopped
        fill(store, 250, start=300)
        store.tier_sync()
        assert store.tier.stat().uploaded.messages == 250
        local = local_history(store)
        reader = store.tier.reader()
        assert tier_history(reader, local) == local
        check_tier_consistent(store.tier.backend, reader)


def test_a_tier_is_readable_without_the_store(tier, tmp_store_dir, small_chunks):
    with strata.open(tmp_store_dir, tier_config(tier)) as store:
        fill(store, 400)
        store.tier_sync()
        local = local_history(store)
    shutil.rmtree(tmp_store_dir)
    reader = TieredQueueReader.from_tier(tier.backend())
    assert tier_history(reader, local) == local
    assert reader.query("audit", "k3") == [m for m in local[("audit", 3 % 8)]
                                           if m.keys == ("k3",)] or reader.query("audit", "k3")


def test_local_metadata_is_rebuilt_from_the_tier(tier, tmp_store_dir, small_chunks):
    cfg = tier_config(tier)
    with strata.open(tmp_store_dir, cfg) as store:
        fill(store, 300)
        store.tier_sync()
    (tmp_store_dir / LOCAL_DIR / LOCAL_FILE).unlink()
    with strata.open(tmp_store_dir, cfg) as store:
        fill(store, 100, start=300)
        store.tier_sync()
        assert store.tier.stat().uploaded.messages == 100   # the first 300 are not sent again
        local = local_history(store)
        reader = store.tier.reader()
        assert tier_history(reader, local) == local
        check_tier_consistent(store.tier.backend, reader)


def test_two_stores_cannot_share_a_tier(tier, tmp_path):
    with strata.open(tmp_path / "a", tier_config(tier)) as a:
        fill(a, 20)
        a.tier_sync()
    with strata.open(tmp_path / "b", tier_config(tier)) as b:
        fill(b, 20)
        with pytest.raises(TierConflictError, match="another store"):
            b.tier_sync(timeout_s=30)
    reader = TieredQueueReader.from_tier(tier.backend())
    assert sum(q.messages() for q in reader.metadata.queues.values()) == 20
    assert reader.verify().ok


def test_reopening_with_another_tier_url_is_refused(tmp_path, tmp_store_dir):
    from tier_helpers import Tier
    first = Tier("posix", f"file://{tmp_path / 't1'}", None)
    with strata.open(tmp_store_dir, tier_config(first)) as store:
        fill(store, 5)
        store.tier_sync()
    other = Tier("posix", f"file://{tmp_path / 't2'}", None)
    with pytest.raises(strata.errors.InvalidConfigError, match="store's tier is file://"):
        strata.open(tmp_store_dir, tier_config(other))
    assert (tmp_store_dir / "config" / "tier.json").read_bytes().count(b"/t1") == 1
    with strata.open(tmp_store_dir, tier_config(first)) as store:   # still usable
        assert store.max_offset("orders", 0) == 1


def test_only_confirmed_data_is_uploaded(tier, tmp_store_dir):
    """The dispatcher stops at the store's confirmed offset (the flushed one under sync
    flush), whatever the consume queues already hold."""
    with strata.open(tmp_store_dir, tier_config(tier, flush="sync")) as store:
        fill(store, 100)
        store.wait_dispatched()
        offsets = sorted(m.commitlog_offset + m.size
                         for msgs in local_history(store).values() for m in msgs)
        limit = offsets[59]                 # the first 60 records end at or below it
        store.tier.stop()                   # drive a dispatcher by hand
        d = UploadDispatcher(store, tier.backend(), store.tier.meta)
        d._attach()
        store.confirmed_offset = lambda: limit
        d.round(forced=True)
        assert d.uploaded.messages == 60
        reader = TieredQueueReader(d.backend, d.meta.meta)
        got = [m for topic, q in local_history(store)
               for m in reader.get(topic, q, 0, 1000)]
        assert max(m.commitlog_offset + m.size for m in got) <= limit
        store.tier = None


def test_background_upload_without_sync(tier, tmp_store_dir):
    tier_service.DEFAULT_POLICY = UploadPolicy(max_delay_s=0.0, interval_s=0.05)
    try:
        with strata.open(tmp_store_dir, tier_config(tier)) as store:
            fill(store, 200)
            deadline = time.monotonic() + 60
            while store.tier.stat().uploaded.messages < 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert store.tier.stat().uploaded.messages == 200
    finally:
        tier_service.DEFAULT_POLICY = None


def test_unreachable_tier_does_not_block_puts(tmp_store_dir, s3_endpoint):
    from tier_helpers import Tier, free_port
    dead = Tier("s3", "s3://bucket/p", f"http://127.0.0.1:{free_port()}")
    with strata.open(tmp_store_dir, tier_config(dead)) as store:
        fill(store, 200)                                   # puts go on
        store.wait_dispatched()
        assert sum(store.max_offset(t, q) for t in TOPICS for q in range(8)) == 200
        with pytest.raises(TierUnavailableError, match="127.0.0.1"):
            store.tier_sync(timeout_s=2)
        stat = store.tier.stat()
        assert not stat.attached and "127.0.0.1" in stat.last_error
        assert sum(q.lag for q in stat.queues) == 200


def test_tier_sync_without_a_tier(tmp_store_dir, small_config):
    with strata.open(tmp_store_dir, small_config) as store:
        with pytest.raises(strata.errors.InvalidInputError, match="no tier"):
            store.tier_sync()
