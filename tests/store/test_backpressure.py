"""Puts wait while the dispatch pipeline is too far behind (max_dispatch_lag_bytes)."""

from __future__ import annotations

import time

import pytest

import strata
import strata.store.put_path as ms_mod
from strata.errors import InvalidConfigError
from store_helpers import config, settle

KiB = 1 << 10


class SlowDispatcher:
    """A dispatcher that takes its time (a key index under load, a slow tiered store)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.records = 0

    def dispatch(self, batch) -> None:
        time.sleep(self.delay)
        self.records += len(batch)


def put_many(store, n_batches: int, size: int = 1000) -> list[int]:
    lags = []
    for i in range(n_batches):
        store.put_batch([strata.Message("t", bytes([i % 251]) * size) for _ in range(40)])
        lags.append(store.dispatch_behind_bytes())
    return lags


def test_lag_stays_under_the_limit_when_dispatch_is_slow(tmp_path):
    limit = 128 * KiB
    with strata.open(tmp_path / "s", config(max_dispatch_lag_bytes=limit)) as store:
        slow = SlowDispatcher(0.01)
        store._reput.dispatchers.append(slow)
        store._reput.batch_records = 10
        lags = put_many(store, 60)         # 60 x 40 KiB: far more than the dispatcher keeps up with
        batch_bytes = 40 * 1100
        assert max(lags) <= limit + batch_bytes, lags
        assert store.dispatch_helped > 0   # producers dispatched themselves past limit/16
        settle(store)
        assert slow.records == 60 * 40
        assert store.max_offset("t", 0) + store.max_offset("t", 7) > 0


def test_producers_dispatch_when_the_dispatch_thread_gets_no_time(tmp_path):
    """A dispatch thread starved of the GIL by a busy producer: past 1/16 of the limit the
    producers dispatch batches themselves, so the lag stays near that and nobody waits."""
    limit = 256 * KiB
    with strata.open(tmp_path / "s", config(max_dispatch_lag_bytes=limit)) as store:
        reput = store._reput
        reput.stop()                       # the thread is gone ...
        reput._stop.clear()                # ... but the service counts as running
        reput.batch_records = 40
        lags = put_many(store, 60)
        help_at = limit // ms_mod.DISPATCH_HELP_SHARE
        assert max(lags) <= help_at + 2 * 40 * 1100, lags
        assert store.dispatch_helped >= 60 * 40 - (help_at // 1000 + 40)
        assert store.dispatch_wait_s == 0
        reput.catch_up()
        for q in range(8):
            assert store.max_offset("t", q) == 60 * 40 // 8


def test_no_limit_lets_the_lag_grow(tmp_path):
    with strata.open(tmp_path / "s", config(max_dispatch_lag_bytes=0)) as store:
        store._reput.dispatchers.append(SlowDispatcher(0.05))
        store._reput.batch_records = 40
        lags = put_many(store, 40)
        assert max(lags) > 512 * KiB        # nothing held the producer back
        assert store.dispatch_wait_s == 0


def test_a_stuck_dispatcher_does_not_hold_puts_forever(tmp_path, monkeypatch):
    monkeypatch.setattr(ms_mod, "DISPATCH_STALL_S", 0.2)

    class Broken:
        def dispatch(self, batch):
            raise OSError("disk of the queue files is gone")

    with strata.open(tmp_path / "s", config(max_dispatch_lag_bytes=64 * KiB)) as store:
        store._reput.dispatchers.insert(0, Broken())
        put_many(store, 10)                 # 400 KiB: beyond the limit, then no progress
        assert store.dispatch_behind_bytes() > 64 * KiB
        assert isinstance(store._reput.error, OSError)
        assert store.dispatch_wait_s > 0    # producers could not help: they waited, then gave up
        store._reput.dispatchers.pop(0)     # mended: dispatch moves again and stops reporting
        deadline = time.monotonic() + 10
        while store._reput.error is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store._reput.error is None
        settle(store)


def test_bad_lag_limit_is_refused():
    with pytest.raises(InvalidConfigError, match="max_dispatch_lag_bytes"):
        strata.StoreConfig(max_dispatch_lag_bytes=-1)
