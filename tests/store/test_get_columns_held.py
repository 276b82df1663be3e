"""The buffers of ``get_columns``' batches are let go by compiled release code
(``arrow_c.batch_release`` sets a word the next calls look at) and a released call's buffer
is reused by the next call: a batch still alive is never written over, whichever order the
consumer drops batches in; one batch kept long does not keep later released ones; a batch
released on another thread is let go too."""

from __future__ import annotations

import gc
import threading

import strata
from strata.store import arrow_read
from store_helpers import config, settle
from test_get_columns import as_rows


def filled(tmp_path, n: int = 3000):
    s = strata.open(tmp_path / "s", config(segment_size=8 << 20))
    s.create_topic("t", queues=1)
    s.put_batch([strata.Message("t", bytes([65 + i % 26]) * (i * 7 % 200),
                                born_timestamp=3 + i) for i in range(n)])
    settle(s)
    return s


def test_live_batches_are_never_written_over(tmp_path):
    with filled(tmp_path) as s:
        want = {off: as_rows(s.get("t", 0, off, 100).messages) for off in range(0, 3000, 100)}
        kept = {}
        for off in range(0, 3000, 100):   # keep every third batch, drop the others at once
            r = s.get_columns("t", 0, off, 100)
            if off % 300 == 0:
                kept[off] = r.batch
            del r
        for off in range(0, 3000, 300):   # the other calls reused buffers: not these
            assert kept[off].to_pylist() == want[off]
        for off in sorted(kept, reverse=True):   # dropped newest first, then more calls
            del kept[off]
            other = s.get_columns("t", 0, 1000, 100).batch
            assert other.to_pylist() == want[1000]
            for still in kept:
                assert kept[still].to_pylist() == want[still]


def test_one_batch_kept_long_does_not_keep_the_later_ones(tmp_path):
    with filled(tmp_path) as s:
        gc.collect()
        before = arrow_read.release_held()
        first = s.get_columns("t", 0, 0, 10).batch
        for i in range(500):
            s.get_columns("t", 0, i, 10)
        assert len(arrow_read._HELD) < 200      # swept as it grew, the first one kept
        assert arrow_read.release_held() == before + 1
        assert first.column("queue_offset").to_pylist() == list(range(10))
        del first
        assert arrow_read.release_held() == before


def test_batch_released_on_another_thread_is_let_go(tmp_path):
    with filled(tmp_path) as s:
        gc.collect()
        before = arrow_read.release_held()
        held = [s.get_columns("t", 0, 5, 50).batch]
        assert arrow_read.release_held() == before + 1
        t = threading.Thread(target=held.clear)
        t.start()
        t.join(10)
        assert not held
        assert arrow_read.release_held() == before
        r = s.get_columns("t", 0, 5, 50)   # the next call may take its buffer
        assert r.batch.to_pylist() == as_rows(s.get("t", 0, 5, 50).messages)
