"""`strata serve` on a store whose oldest segments local retention deleted after they were
uploaded: it finds the tier the store remembers (config/tier.json, no option), and a new
consumer group of the official client receives the whole history, the tiered part
included."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

import strata
from broker_support import run_client
from support import make_message, small_store_config

pytestmark = pytest.mark.broker

N = 400


def test_a_new_group_receives_the_history_the_tier_holds(broker_factory, tmp_path):
    directory = tmp_path / "store"
    cfg = small_store_config(tier_url=f"file://{tmp_path / 'tier'}")
    with strata.open(directory, cfg) as store:
        for lo in range(0, N, 50):
            store.put_batch([make_message(i, topic="orders", size=300)
                             for i in range(lo, lo + 50)])
        store.tier_sync(timeout_s=60)
        far = int((datetime.now() + timedelta(days=30)).timestamp() * 1000)
        assert store.clean_expired(far) >= 1
        deleted = store.log.min_offset()
        assert deleted > 0
    broker = broker_factory(directory=directory)
    got = run_client(tmp_path, broker.endpoint, '''
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(8)    # (the client's ack_async returns no future)
        c = consumer("history", "orders")
        keys, idle = [], 0
        while len(keys) < 400 and idle < 5:
            ms = c.receive(32, 10)
            idle = 0 if ms else idle + 1
            for m in ms:
                keys += list(m.keys)
            list(pool.map(c.ack, ms))     # a batch's acks in flight together
        c.shutdown()
        out(keys=keys)
    ''')
    assert sorted(got["keys"]) == sorted(f"k{i}" for i in range(N))
