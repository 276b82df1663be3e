"""The background writes a checkpoint ``checkpoint_interval_ms`` after the last one, counting
the one every writer's open writes. It used to count from the machine's boot, so on a machine
up for longer than the interval the first background flush wrote one at once, whatever the
interval: a test that crashes a store "with no checkpoint after this one" then found its damage
covered by a checkpoint now and then, when the flush thread came late under load."""

from __future__ import annotations

import strata
from strata.store import background

from support import make_message, small_store_config


def test_no_background_checkpoint_before_the_interval(tmp_path):
    path = tmp_path / "store"
    with strata.open(path, small_store_config(checkpoint_interval_ms=3_600_000,
                                                    flush_interval_ms=3_600_000)) as store:
        at_open = store.checkpoint.load()
        store.create_topic("t")
        store.put_batch([make_message(i, topic="t") for i in range(50)])
        store.wait_dispatched()
        background.background_flush(store, 0)        # what the flush service runs (its own
        #                                              thread waits an hour here)
        assert store.checkpoint.load() == at_open     # not due for an hour
        store._write_checkpoint(clean_end=-1)         # an explicit one is written ...
        written = store.checkpoint.load()
        assert written.flushed_offset > at_open.flushed_offset
        store.put(make_message(99, topic="t"))
        background.background_flush(store, 0)
        assert store.checkpoint.load() == written     # ... and the interval starts again


def test_a_due_checkpoint_is_written_by_the_background(tmp_path):
    path = tmp_path / "store"
    with strata.open(path, small_store_config(checkpoint_interval_ms=3_600_000,
                                                    flush_interval_ms=3_600_000)) as store:
        store.create_topic("t")
        store.put_batch([make_message(i, topic="t") for i in range(50)])
        store.wait_dispatched()
        store._last_checkpoint -= 3_600                # an hour later
        background.background_flush(store, 0)
        assert store.checkpoint.load().flushed_offset == store.max_commitlog_offset()
