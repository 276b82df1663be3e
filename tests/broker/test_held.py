"""The held store without a server: a move cut short by a crash is finished exactly once at
the next open, and the held journal's records decode to what was encoded."""

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.broker import held_journal as hj
from strata.broker.properties import PROP_DELIVER_MS, PROP_HELD_ID
from strata.broker.held import HeldMessages, released_message
from strata.store.config import StoreConfig
from strata.store.message import Message
from strata.store.message_store import MessageStore

SMALL = StoreConfig(segment_size=1 << 22, index_slots=4096, index_entries=16384,
                    prefault=False)


@pytest.fixture
def store(tmp_path):
    s = MessageStore(tmp_path / "store", SMALL)
    yield s
    s.close()


def open_held(store) -> HeldMessages:
    async def put(msgs):
        return store.put_batch(msgs)
    return HeldMessages(store.path / "broker", store, put)


def hold_three(store) -> tuple[HeldMessages, list]:
    held = open_held(store)

    async def go():
        held.start()
        return await held.hold([(Message("t", f"m{i}".encode(), tags="x",
                                         properties={PROP_DELIVER_MS: "99", "u": "v"}),
                                 hj.Kind.DELAY, 99, f"id{i}") for i in range(3)])
    return held, asyncio.run(go())


def crash(held: HeldMessages) -> None:
    held.journal.close()
    held.refs.crash()


def topic_bodies(store) -> list[bytes]:
    store.wait_dispatched()
    return [m.body for q in range(store.queue_count("t"))
            for m in store.get("t", q, 0, 100).messages]


def test_a_move_whose_copies_were_stored_before_the_crash_is_not_repeated(store):
    held, entries = hold_three(store)
    # the move got as far as the put: MOVING written, copies stored, no RELEASE yet
    held.journal.append(hj.encode_moving(store.max_commitlog_offset(),
                                         [e.id for e in entries]))
    copies = [released_message(held.read(e), e.id) for e in entries]
    store.put_batch(copies)
    crash(held)
    again = open_held(store)
    try:
        assert again.recovered_moves == 3 and again.entries == {}
        assert sorted(topic_bodies(store)) == [b"m0", b"m1", b"m2"]
        stored = store.get("t", 0, 0, 100).messages + store.get("t", 1, 0, 100).messages
        assert all(m.properties[PROP_HELD_ID] for m in stored)
    finally:
        again.close()


def test_a_move_cut_short_before_its_put_moves_again_once(store):
    held, entries = hold_three(store)
    held.journal.append(hj.encode_moving(store.max_commitlog_offset(),
                                         [e.id for e in entries]))
    crash(held)
    again = open_held(store)
    try:
        assert again.recovered_moves == 0 and len(again.entries) == 3
        assert topic_bodies(store) == []

        async def move():
            again.start()
            return await again.move(list(again.entries.values()))
        assert len(asyncio.run(move())) == 3
        assert sorted(topic_bodies(store)) == [b"m0", b"m1", b"m2"]
        m = store.get("t", 0, 0, 1).messages[0]
        assert m.tags == "x" and m.properties["u"] == "v"
    finally:
        again.close()
    final = open_held(store)
    assert final.entries == {}          # the RELEASE stands after a clean close
    final.close()


def test_a_held_message_survives_a_crash_with_its_body(store):
    held, entries = hold_three(store)
    crash(held)
    again = open_held(store)
    try:
        assert sorted(e.message_id for e in again.entries.values()) == ["id0", "id1", "id2"]
        assert sorted(again.read(e).body for e in again.entries.values()) == \
            [b"m0", b"m1", b"m2"]
    finally:
        again.close()


ids = st.binary(min_size=16, max_size=16)
names = st.text(max_size=40)


@given(st.one_of(
    st.builds(lambda i, k, d, c, t, m: (hj.encode_hold(i, k, d, c, t, m),
                                        hj.HeldRecord(hj.Type.HOLD, (i,), k, d, c, t, m)),
              ids, st.sampled_from(hj.Kind), st.integers(-2**63, 2**63 - 1),
              st.integers(0, 2**32 - 1), names, names),
    st.builds(lambda r, i: (hj.encode_release(r, i),
                            hj.HeldRecord(hj.Type.RELEASE, tuple(i), reason=r)),
              st.sampled_from(hj.Reason), st.lists(ids, max_size=5)),
    st.builds(lambda o, i: (hj.encode_moving(o, i),
                            hj.HeldRecord(hj.Type.MOVING, tuple(i), log_offset=o)),
              st.integers(0, 2**63 - 1), st.lists(ids, max_size=5)),
    st.builds(lambda i, c, d: (hj.encode_checked(i, c, d),
                               hj.HeldRecord(hj.Type.CHECKED, (i,), checks=c, due_ms=d)),
              ids, st.integers(0, 2**32 - 1), st.integers(-2**63, 2**63 - 1))))
def test_held_journal_records_decode_to_what_was_encoded(pair):
    framed, expected = pair
    assert hj.decode(framed[8:]) == expected
    with pytest.raises(Exception):
        hj.decode(framed[8:-1])             # one byte short never decodes


class PutThenFail:
    """A put that stores its messages and then fails (as a flush timeout or a full disk
    after the write can): the caller cannot tell whether anything was stored."""

    def __init__(self, store, failures: int = 1) -> None:
        self.store, self.failures = store, failures

    async def __call__(self, msgs):
        results = self.store.put_batch(msgs)
        if self.failures:
            self.failures -= 1
            raise OSError("injected: failed after the write")
        return results


def test_a_move_retried_after_a_failed_put_stores_no_copy_twice(store):
    held, entries = hold_three(store)
    held.put = PutThenFail(store)

    async def move_twice():
        with pytest.raises(OSError, match="injected"):
            await held.move(list(held.entries.values()))
        assert len(held.entries) == 3                 # still held: the put raised
        await held.move(list(held.entries.values()))
    asyncio.run(move_twice())
    try:
        assert held.entries == {}
        assert sorted(topic_bodies(store)) == [b"m0", b"m1", b"m2"]     # once each
    finally:
        held.close()


def test_a_failed_move_is_remembered_across_a_clean_restart(store):
    held, entries = hold_three(store)
    held.put = PutThenFail(store)

    async def fail():
        with pytest.raises(OSError, match="injected"):
            await held.move(list(held.entries.values()))
    asyncio.run(fail())
    held.close()                     # the compacted journal keeps the failed move's MOVING
    again = open_held(store)
    try:
        assert again.recovered_moves == 3 and again.entries == {}
        assert sorted(topic_bodies(store)) == [b"m0", b"m1", b"m2"]
        again.refs.sync()
        assert again.refs.message_count() == 0       # their bodies' references are gone
    finally:
        again.close()


def test_a_hold_cancelled_before_its_body_is_on_disk_leaves_no_body(store):
    held = open_held(store)

    async def cancelled():
        held.start()
        with held.refs.paused():             # the ref store's confirms cannot come yet
            task = asyncio.create_task(held.hold(
                [(Message("t", b"x"), hj.Kind.DELAY, 99, "id")]))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    asyncio.run(cancelled())
    try:
        held.refs.sync()
        assert held.entries == {} and held.refs.message_count() == 0
    finally:
        held.close()
    again = open_held(store)
    assert again.entries == {} and again.refs.message_count() == 0
    again.close()


def test_concurrent_holds_share_the_journal_writers_hops(store):
    """Holds whose bodies the ref store confirms together (sends answered by one of its
    fsyncs) write their HOLDs in one hop to the journal's writer thread, not one each; and
    the journal has every one of them afterwards."""
    held = open_held(store)

    async def go():
        held.start()
        return await asyncio.gather(*(
            held.hold([(Message("t", b"m%d" % i), hj.Kind.DELAY, 10**13, f"id-{i}")])
            for i in range(32)))
    try:
        entries = [e for got in asyncio.run(go()) for e in got]
        writer = held._writer
        assert writer.calls == 32 and writer.batches < 8, (writer.calls, writer.batches)
    finally:
        held.close()
    again = open_held(store)
    try:
        assert set(again.entries) == {e.id for e in entries}
    finally:
        again.close()
