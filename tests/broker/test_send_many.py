"""The send batcher's shared path: submissions gathered from several senders (message lists
of RocketMQ sends, column batches of Kafka produces) go to the store in one ``put_many``, so
under sync flush one fsync answers them all; a refused item fails its own send only."""

from __future__ import annotations

import asyncio

import strata
from strata.broker.send import SendBatcher
from strata.errors import InvalidInputError


def _config() -> strata.StoreConfig:
    return strata.StoreConfig(flush="sync", segment_size=1 << 20, prefault=False,
                              consume_queue_units=4096, index_slots=1024,
                              index_entries=8192)


def test_gathered_columns_and_messages_share_one_put_and_one_fsync(tmp_path):
    async def main(store):
        b = SendBatcher(store, gather_s=0.2)
        b.start()
        await b.submit([strata.Message("t", b"first", queue_id=0)])   # starts the interval
        fsyncs = store._group_commit.fsyncs
        sends = [b.submit_many([strata.ColumnBatch("t", q, [b"%d-%d" % (c, i)
                                                            for i in range(100)])
                                for q in range(2)]) for c in range(3)]
        sends.append(b.submit([strata.Message("t", b"rmq-1", queue_id=1),
                               strata.Message("t", b"rmq-2", queue_id=1)]))
        sends.append(b.submit([strata.Message("t", b"rmq-3", queue_id=0)]))
        got = await asyncio.gather(*sends)
        stats = (b.batches, store._group_commit.fsyncs - fsyncs)
        await b.close()
        return got, stats

    with strata.open(tmp_path / "s", _config()) as store:
        store.create_topic("t", queues=2)
        got, (batches, fsyncs) = asyncio.run(main(store))
        assert (batches, fsyncs) == (2, 1)       # the first send alone, then all in one
        assert [[r[0].queue_offset for r in conn] for conn in got[:3]] == \
            [[1, 0], [101, 100], [201, 200]]
        assert [r.queue_offset for r in got[3]] == [300, 301]
        assert [r.queue_offset for r in got[4]] == [301]
        assert all(r.ok for conn in got[:3] for r in conn)
        assert store.wait_dispatched(timeout=30)
        assert store.get("t", 1, 300, 5).messages[0].body == b"rmq-1"


def test_a_refused_item_fails_its_own_send_only(tmp_path):
    async def main(store):
        b = SendBatcher(store, gather_s=0.2)
        b.start()
        await b.submit([strata.Message("t", b"first")])
        ok1 = b.submit([strata.Message("t", b"ok-1", queue_id=0)])
        bad = b.submit([strata.Message("t", b"bad", queue_id=9)])      # no queue 9
        ok2 = b.submit([strata.Message("t", b"ok-2", queue_id=0)])
        cols = b.submit_many([strata.ColumnBatch("t", 7, [b"x"]),
                              strata.ColumnBatch("t", 1, [b"y"])])
        got = await asyncio.gather(ok1, bad, ok2, cols, return_exceptions=True)
        await b.close()
        return got

    with strata.open(tmp_path / "s", _config()) as store:
        store.create_topic("t", queues=2)
        ok1, bad, ok2, cols = asyncio.run(main(store))
        assert isinstance(bad, InvalidInputError) and "queue_id 9" in str(bad)
        assert ok1[0].ok and ok2[0].ok and ok2[0].queue_offset == ok1[0].queue_offset + 1
        assert isinstance(cols[0], InvalidInputError) and cols[1][0].ok
        assert store.wait_dispatched(timeout=30)
        assert [m.body for m in store.get("t", 0, 0, 10).messages if m.body != b"first"] == \
            [b"ok-1", b"ok-2"]


def test_close_waits_for_every_submission_on_both_paths(tmp_path):
    """``close`` returns only once every gathered send and every ``put_soon`` request is
    stored and answered (woken by their answers), and the writer thread is gone."""
    async def main(store):
        b = SendBatcher(store, gather_s=0.05)
        b.start()
        await b.submit([strata.Message("t", b"first", queue_id=0)])   # starts the interval
        gathered = [asyncio.ensure_future(b.submit([strata.Message("t", b"g%d" % i,
                                                                   queue_id=0)]))
                    for i in range(20)]
        soon = [asyncio.ensure_future(b.put_soon([strata.ColumnBatch("t", 1, [b"s%d" % i])]))
                for i in range(20)]
        await asyncio.sleep(0)          # every request submitted, none answered yet
        answered_before = sum(f.done() for f in gathered + soon)
        await b.close()
        return answered_before, [f.done() for f in gathered + soon], b

    cfg = _config()
    cfg.flush = "async"
    with strata.open(tmp_path / "s", cfg) as store:
        store.create_topic("t", queues=2)
        before, done, b = asyncio.run(main(store))
        assert before < 40 and all(done)
        assert b.messages == 41
        assert b._executor._shutdown
        assert store.wait_dispatched(timeout=30)
        assert [m.body for m in store.get("t", 1, 0, 30).messages] == \
            [b"s%d" % i for i in range(20)]
