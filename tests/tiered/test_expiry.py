"""tier_retention_hours: chunks whose newest message is older are dropped from the metadata,
then deleted; a crash in between leaves nothing counted that is gone."""

from __future__ import annotations

import time

import pytest

import strata
from strata.tiered import service as tier_service
from strata.tiered.dispatcher import UploadPolicy
from strata.tiered.errors import TierUnavailableError
from strata.tiered.layout import parse_chunk_path
from tier_helpers import check_tier_consistent, fill, local_history, tier_config

HOUR_MS = 3_600_000


@pytest.fixture(autouse=True)
def small_chunks():
    tier_service.DEFAULT_POLICY = UploadPolicy(chunk_messages=20)
    yield
    tier_service.DEFAULT_POLICY = None


def newest(store) -> int:
    return max(c.max_ts for q in store.tier.meta.meta.queues.values() for c in q.chunks)


def test_old_chunks_expire_new_ones_stay(tier, tmp_store_dir):
    with strata.open(tmp_store_dir, tier_config(tier, tier_retention_hours=1.0)) as store:
        fill(store, 200)
        store.tier_sync()
        old_end = {k: q.next_offset for k, q in store.tier.meta.meta.queues.items()}
        t_old = newest(store)
        time.sleep(0.005)                      # the next messages get a later store time
        fill(store, 200, start=200)
        store.tier_sync()
        store.tier.dispatcher.clock_ms = lambda: t_old + HOUR_MS + 1
        store.tier_sync()
        assert store.tier.dispatcher.expired_chunks > 0
        reader = store.tier.reader()
        local = local_history(store)
        for (topic, q), msgs in local.items():
            lo = reader.min_offset(topic, q)
            assert lo == old_end[f"{topic}/{q}"]          # exactly the old chunks went
            assert reader.get(topic, q, lo - 1, 1) == []
            assert reader.get(topic, q, lo, 1000) == msgs[lo:]
        check_tier_consistent(tier.backend(), reader, from_zero=False)
        store.tier.dispatcher.clock_ms = lambda: t_old + 10 * HOUR_MS
        store.tier_sync()                                  # now everything is past retention
        for (topic, q), msgs in local.items():
            assert reader.min_offset(topic, q) == reader.max_offset(topic, q) == len(msgs)
        assert [p for p in tier.backend().list("queues/") if parse_chunk_path(p)] == []
        fill(store, 50, start=400)                         # uploads go on where they were
        store.tier_sync()
        local = local_history(store)
        for (topic, q), msgs in local.items():
            lo = reader.min_offset(topic, q)
            assert reader.get(topic, q, lo, 1000) == msgs[lo:]
        check_tier_consistent(tier.backend(), reader, from_zero=False)


def test_crash_between_metadata_and_delete(tier, tmp_store_dir):
    cfg = tier_config(tier, tier_retention_hours=1.0)
    with strata.open(tmp_store_dir, cfg) as store:
        fill(store, 100)
        store.tier_sync()
        d = store.tier.dispatcher
        d.clock_ms = lambda: newest(store) + 2 * HOUR_MS
        deletes = []

        def dying_delete(path):          # the process "dies" after the first delete
            if deletes:
                raise TierUnavailableError("injected: gone")
            deletes.append(path)
            inner_delete(path)
        inner_delete = d.backend.delete
        d.backend.delete = dying_delete
        with pytest.raises(TierUnavailableError):
            store.tier_sync(timeout_s=1)
        assert all(not q.chunks for q in store.tier.meta.meta.queues.values())
    assert [p for p in tier.backend().list("queues/") if parse_chunk_path(p)]   # left behind
    with strata.open(tmp_store_dir, cfg) as store:         # the next start deletes them
        store.tier_sync()
        check_tier_consistent(tier.backend(), store.tier.reader(), from_zero=False)
