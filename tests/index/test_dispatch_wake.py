"""The dispatch thread sleeps while there is nothing to dispatch and is woken by the puts'
one ``wakeup`` a batch (no periodic poll); waiters for an offset are woken by its advance."""

from __future__ import annotations

import threading

import strata

from support import small_store_config


class CountingConfirmed:
    """The store's confirmed offset, counting how often the dispatcher asks for it (once
    a round of its loop)."""

    def __init__(self, store) -> None:
        self.inner = store._reput.confirmed
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return self.inner()


def test_an_idle_dispatcher_does_not_poll(tmp_path):
    with strata.open(tmp_path / "s", small_store_config()) as store:
        counting = store._reput.confirmed = CountingConfirmed(store)
        store.put_batch([strata.Message("t", b"x%d" % i) for i in range(100)])
        assert store.wait_dispatched(30)
        before = counting.calls
        threading.Event().wait(0.3)   # idle: a 10 ms poll would ask ~30 times meanwhile
        assert counting.calls - before <= 1
        # and a put still wakes it: its messages reach their queue
        store.put(strata.Message("t", b"late"))
        assert store.wait_dispatched(30)
        assert sum(store.max_offset("t", q) for q in range(store.queue_count("t"))) == 101


def test_sync_flush_puts_from_many_threads_are_all_dispatched(tmp_path):
    """Under sync flush a group commit started by one producer may cover another's batch
    before that batch's end is published; the put's own wakeup must still get it
    dispatched (without a periodic wake nothing else would)."""
    cfg = small_store_config(flush="sync")
    with strata.open(tmp_path / "s", cfg) as store:
        def produce(n: int) -> None:
            for i in range(40):
                assert store.put_batch([strata.Message(f"t{n}", b"m%d" % i)] * 4).ok

        threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert store.wait_dispatched(30)
        for n in range(4):
            assert sum(store.max_offset(f"t{n}", q)
                       for q in range(store.queue_count(f"t{n}"))) == 160


def test_a_waiter_learns_of_a_failing_dispatcher_at_once(tmp_path):
    class Broken:
        def dispatch(self, batch):
            raise OSError("the queue files' disk is gone")

    with strata.open(tmp_path / "s", small_store_config()) as store:
        store._reput.dispatchers.insert(0, Broken())
        store.put(strata.Message("t", b"x"))
        got = None
        try:
            store.wait_dispatched(3600)     # returns with the failure, not after an hour
        except OSError as exc:
            got = exc
        assert "disk is gone" in str(got)
        store._reput.dispatchers.pop(0)     # mended: close dispatches the rest
    with strata.open(tmp_path / "s", small_store_config(), readonly=True) as r:
        assert sum(r.max_offset("t", q) for q in range(r.queue_count("t"))) == 1
