"""Clients: ref counting, fan-out, confirms, flying elimination, dying clients, bad input."""

from __future__ import annotations

import os
import threading

import pytest

import strata.refstore as rs
from strata.errors import InvalidConfigError, InvalidInputError, MessageTooLargeError, \
    StoreClosedError, StoreLockedError
from strata.format.refstore_record import OVERHEAD

from refstore_support import Confirms, body, mid


def record_count(store) -> int:
    st = store.stats()
    return st.total_bytes


def test_contains_is_false_before_any_write_and_read_is_none(open_store):
    s = open_store()
    c = s.client()
    assert c.contains(mid(1)) is False
    assert c.read(mid(1)) is None


def test_fan_out_write_x3_remove_x3_stores_once(open_store):
    s = open_store()
    clients = [s.client() for _ in range(3)]
    for c in clients:
        c.write(mid(7), body(7))
    s.sync()
    ref, file, offset, size = s.locate(mid(7))
    assert ref == 3 and size == 100 + OVERHEAD
    assert s.stats().total_bytes == size                   # the body is stored once
    for k, c in enumerate(clients):
        assert clients[0].read(mid(7)) == body(7)
        c.remove([mid(7)])
        s.sync()
        assert s.locate(mid(7))[0] == 2 - k
        assert clients[0].contains(mid(7)) is (k < 2)
    assert clients[0].read(mid(7)) is None
    assert s.stats().valid_bytes == 0


def test_write_after_remove_at_count_zero_reuses_the_stored_copy(open_store):
    s = open_store()
    a, b = s.client(), s.client()
    a.write(mid(1), body(1))
    s.sync()
    where = s.locate(mid(1))
    a.remove([mid(1)])
    s.sync()
    assert s.locate(mid(1)) == (0,) + where[1:]             # entry kept at ref 0
    assert a.read(mid(1)) is None and not a.contains(mid(1))
    size_before = s.stats().total_bytes
    b.write(mid(1), body(1))                                # the late fan-out write
    s.sync()
    assert s.locate(mid(1)) == (1,) + where[1:]             # same copy, not rewritten
    assert s.stats().total_bytes == size_before
    assert s.stats().valid_bytes == where[3]
    assert b.read(mid(1)) == body(1)


def test_write_to_a_file_being_collected_stores_the_message_again(open_store):
    rlen = 100 + OVERHEAD
    gate, entered = threading.Event(), threading.Event()

    def hook(step, info):
        if step == "combine_locked":
            entered.set()
            assert gate.wait(20)

    s = open_store(file_size_limit=4 * rlen, auto_gc=False, fault_hook=hook,
                   gc_garbage_ratio=0.3)
    a, b = s.client(), s.client()
    for i in range(10):                         # files 0 and 1 full, file 2 current
        a.write(mid(i), body(i))
    s.sync()
    a.remove([mid(0), mid(1), mid(5), mid(6)])   # holes in files 0 and 1: 4 of 8 live
    s.sync()
    assert s.locate(mid(1))[:2] == (0, 0)
    done = threading.Thread(target=s.compact, kwargs={"timeout": 30})
    done.start()
    assert entered.wait(20)                      # files 0 and 1 are locked now
    b.write(mid(1), body(1))                     # ref-0 entry in a locked file
    b.write(mid(2), body(2))                     # ref>0 in a locked file: count only
    s.sync()
    ref, file, _, _ = s.locate(mid(1))
    assert ref == 1 and file == 2                # written again, into the current file
    assert s.locate(mid(2))[:2] == (2, 0)
    gate.set()
    done.join(30)
    assert b.read(mid(1)) == body(1) and b.read(mid(2)) == body(2)
    assert s.locate(mid(2))[0] == 2
    for i in (3, 4, 7, 8, 9):
        assert a.read(mid(i)) == body(i)


def test_confirms_arrive_after_sync_for_writes_and_fan_out(open_store):
    got = Confirms()
    s = open_store()
    c = s.client(on_disk=got)
    other = s.client()
    other.write(mid(50), body(50))
    c.write_batch([(mid(i), body(i)) for i in range(50)])
    c.write(mid(50), body(50))                   # fan-out of a known id is confirmed too
    s.sync()
    assert got.set() == {mid(i) for i in range(51)}


def test_flying_remove_overtaking_its_write_eliminates_both(open_store):
    got = Confirms()
    s = open_store()
    c = s.client(on_disk=got)
    with s.paused():
        c.write(mid(1), body(1))
        c.write(mid(2), body(2))
        assert c.read(mid(1)) == body(1)         # readable at once, from the cache
        c.remove([mid(1)])                       # overtakes the unprocessed write
        assert s._flying.entries() == {(c.ref, mid(1)): (1, 1), (c.ref, mid(2)): (1, 0)}
    s.sync()
    assert mid(1) in got.set()                   # the eliminated write is still confirmed
    assert s.locate(mid(1)) is None              # never written
    assert not c.contains(mid(1)) and c.contains(mid(2))
    assert s.stats().total_bytes == 100 + OVERHEAD
    st = s.stats()
    assert st.flying == 0 and st.cached == 0 and st.writes_eliminated == 1
    assert st.removes_ignored == 0


def test_flying_confirm_matrix_leaves_no_entries(open_store):
    got = Confirms()
    s = open_store()
    c = s.client(on_disk=got)
    with s.paused():
        c.write(mid(1), body(1))                            # write
        c.write(mid(2), body(2)); c.remove([mid(2)])        # write remove
        c.write(mid(3), body(3)); c.remove([mid(3)]); c.write(mid(3), body(3))  # w r w
        c.write(mid(4), body(4)); c.write(mid(4), body(4)); c.remove([mid(4)])  # w w r
    s.sync()
    assert got.set() == {mid(1), mid(2), mid(3), mid(4)}
    assert [s.locate(mid(i)) and s.locate(mid(i))[0] for i in (1, 2, 3, 4)] == [1, None, 1, 1]
    c.remove([mid(1), mid(3), mid(4)])
    c.write(mid(5), body(5))
    s.sync()
    assert not any(c.contains(mid(i)) for i in (1, 2, 3, 4)) and c.contains(mid(5))
    st = s.stats()
    assert st.flying == 0 and st.cached == 0 and st.in_flight_bytes == 0


def test_flying_table_is_bounded_and_drains_under_a_stream(open_store):
    s = open_store(max_in_flight_bytes=64 * 1024)
    c = s.client()
    seen = []
    for i in range(3000):
        c.write(mid(i), body(i, 200))
        if i % 3 == 0:
            c.remove([mid(i)])
        seen.append(len(s._flying))
    assert max(seen) <= 64 * 1024 // 200 + 2
    s.sync()
    assert len(s._flying) == 0 and s.stats().cached == 0
    assert s.message_count() == 2000


def test_dying_client_sequence(open_store):
    """W1 W2 W1 R1 T W3 R2 W2 R1 R2 R3 W4, with T overtaking everything after R1."""
    got = Confirms()
    s = open_store()
    c = s.client(on_disk=got)
    c.write(mid(1), body(1)); c.write(mid(2), body(2)); c.write(mid(1), body(1))
    c.remove([mid(1)])
    s.sync()
    assert s.locate(mid(1))[0] == 1 and s.locate(mid(2))[0] == 1
    before = s.stats().total_bytes
    with s.paused():
        c.write(mid(3), body(3)); c.remove([mid(2)]); c.write(mid(2), body(2))
        c.remove([mid(1)]); c.remove([mid(2)]); c.remove([mid(3)]); c.write(mid(4), body(4))
        c.delete_and_terminate()                 # returns at once; T jumps the queue
        assert s._ops[0][0] == 4                 # the dying mark is first in line
    s.sync()
    watcher = s.client()
    for i in (1, 2, 3, 4):
        assert not watcher.contains(mid(i))
    assert s.locate(mid(3)) is None and s.locate(mid(4)) is None   # never written
    assert s.locate(mid(1))[0] == 0 and s.locate(mid(2))[0] == 0
    assert s.stats().total_bytes == before
    assert c.ref not in s.client_refs()
    st = s.stats()
    assert st.flying == 0 and st.cached == 0
    with pytest.raises(rs.ClientTerminatedError):
        c.write(mid(9), body(9))


def test_dying_client_ignores_unknown_writes_but_adjusts_known_counts(open_store):
    s = open_store()
    dying, other = s.client(), s.client()
    dying.write(mid(1), body(1))
    other.write(mid(1), body(1))
    s.sync()
    with s.paused():
        dying.write(mid(2), body(2))             # unseen: ignored after the dying mark
        dying.remove([mid(1)])                   # known before the mark: applied
        dying.delete_and_terminate()
    s.sync()
    assert s.locate(mid(1))[0] == 1 and s.locate(mid(2)) is None
    assert other.read(mid(1)) == body(1)
    assert s.stats().writes_ignored == 1


def test_terminate_is_synchronous_and_keeps_the_ref(open_store):
    got = Confirms()
    s = open_store(sync_interval=30)
    c = s.client("queue-a", on_disk=got)
    c.write_batch([(mid(i), body(i)) for i in range(100)])
    c.terminate()
    assert got.set() == {mid(i) for i in range(100)}     # everything applied and confirmed
    assert "queue-a" in s.client_refs()
    with pytest.raises(rs.ClientTerminatedError):
        c.read(mid(1))
    again = s.client("queue-a")
    assert again.read(mid(5)) == body(5)
    with pytest.raises(InvalidInputError, match="already in use"):
        s.client("queue-a")


def test_reads_see_buffered_unflushed_and_rolled_data(open_store):
    s = open_store(file_size_limit=1000, write_buffer_size=1 << 20)
    c = s.client()
    for i in range(40):
        c.write(mid(i), body(i, 90))
        assert c.read(mid(i)) == body(i, 90)
    s.sync()
    for i in range(40):
        assert c.read(mid(i)) == body(i, 90)
    assert len(s.stats().files) >= 4
    assert all(f.size <= 1000 for f in s.stats().files)


def test_bad_input_gets_clear_errors_and_changes_nothing(open_store, tmp_path):
    s = open_store(file_size_limit=1000)
    c = s.client()
    c.write(mid(1), body(1))
    with pytest.raises(InvalidInputError, match="exactly 16 bytes"):
        c.write(b"short", b"x")
    with pytest.raises(InvalidInputError, match="must be bytes"):
        c.write(mid(2), "text body")
    with pytest.raises(MessageTooLargeError, match="at most 975"):
        c.write(mid(2), b"x" * 976)
    with pytest.raises(InvalidInputError):
        c.write_batch([(mid(3), b"ok"), (mid(4), 42)])     # nothing of the batch is sent
    with pytest.raises(InvalidInputError, match="pairs"):
        c.write_batch([b"not a pair"])
    with pytest.raises(InvalidInputError, match="iterable of message ids"):
        c.remove(mid(1))
    with pytest.raises(InvalidInputError):
        c.remove([b"x"])
    with pytest.raises(InvalidInputError):
        c.read(12)
    with pytest.raises(InvalidInputError):
        s.client(ref=5)
    c.write(mid(5), b"x" * 975)                                # exactly the limit fits
    s.sync()
    assert s.locate(mid(3)) is None and s.locate(mid(4)) is None
    assert c.read(mid(1)) == body(1) and c.read(mid(5)) == b"x" * 975
    assert s.message_count() == 2


@pytest.mark.parametrize("opts, match", [
    ({"kind": "durable"}, "kind"),
    ({"file_size_limit": 10}, "file_size_limit"),
    ({"gc_garbage_ratio": 1.5}, "gc_garbage_ratio"),
    ({"sync_interval": 0}, "sync_interval"),
    ({"max_in_flight_bytes": 0}, "max_in_flight_bytes"),
])
def test_bad_options_are_refused(open_store, opts, match):
    with pytest.raises(InvalidConfigError, match=match):
        open_store(**opts)


def test_one_owner_per_directory_and_closed_store_refuses_ops(open_store, tmp_path):
    s = open_store()
    with pytest.raises(StoreLockedError):
        rs.open(tmp_path / "rs")
    c = s.client()
    s.close()
    with pytest.raises(StoreClosedError):
        c.write(mid(1), b"x")
    with pytest.raises(StoreClosedError):
        s.client()
    file_path = tmp_path / "plain-file"
    file_path.write_bytes(b"")
    with pytest.raises(InvalidConfigError, match="not a directory"):
        rs.open(file_path)


def test_on_disk_callback_errors_do_not_stop_the_store(open_store):
    def bad(ids):
        raise RuntimeError("callback bug")
    s = open_store()
    c = s.client(on_disk=bad)
    c.write(mid(1), body(1))
    s.sync()
    c.write(mid(2), body(2))
    s.sync()
    assert c.contains(mid(2))


def test_many_threads_writing_and_removing_fan_out(open_store):
    s = open_store(file_size_limit=8192)
    n_threads, n = 4, 300
    errors = []

    def work(k):
        try:
            c = s.client()
            c.write_batch([(mid(i), body(i)) for i in range(n)])
            c.remove([mid(i) for i in range(0, n, 2)])
            c.terminate()
        except Exception as exc:   # pragma: no cover - reported below
            errors.append(exc)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors
    s.sync()
    for i in range(n):
        loc = s.locate(mid(i))
        if i % 2 == 0:      # ref 0: kept until the GC collects its file
            assert loc is None or loc[0] == 0
        else:
            assert loc is not None and loc[0] == n_threads
    c = s.client()
    assert all(c.read(mid(i)) == body(i) for i in range(1, n, 2))
    assert s.stats().flying == 0
