"""The consumer-group journal and state, and receipt handles, without a server."""

import errno
import os
import threading

import pytest

from strata.broker import journal as jr
from strata.broker.errors import CorruptJournalError, InvalidReceiptHandleError
from strata.broker.group_state import JOURNAL_NAME, ConsumerGroups
from strata.broker.receipt import Receipt, ReceiptSigner, load_or_create_secret
from strata.errors import DiskFullError
from strata.files.io import FileOps
from strata.testing.faults import FaultInjectingFileOps, installed

pytestmark = pytest.mark.broker


def _receipt(groups, offset, handle, deadline, group="g", topic="t", q=0):
    return Receipt(group, topic, q, offset, handle, deadline)


def test_replay_after_reopen_without_close_keeps_pops_acks_and_changes(tmp_path):
    g = ConsumerGroups(tmp_path)
    h = g.pop("g", "t", 0, 0, [(0, 0), (1, 0), (2, 0)], 3, deadline_ms=1000)
    assert g.ack([_receipt(g, 1, h[1], 1000)], now_ms=500) == [None]
    h2 = g.change_invisible(_receipt(g, 2, h[2], 1000), 9000, now_ms=600)
    # no close: what a SIGKILL leaves behind
    g2 = ConsumerGroups(tmp_path)
    q = g2.queue("g", "t", 0)
    assert q.pop_offset == 3 and sorted(q.in_flight) == [0, 2]
    assert q.in_flight[2].deadline_ms == 9000 and q.in_flight[2].handle_id == h2
    assert q.commit_offset() == 0
    assert g2.next_handle_id > h2                      # handle ids are never reused
    assert q.due(now_ms=1500, limit=10) == [(0, 1)]   # offset 2 is still invisible


def test_acks_refuse_replaced_expired_and_repeated_handles(tmp_path):
    g = ConsumerGroups(tmp_path)
    (h,) = g.pop("g", "t", 0, 0, [(0, 0)], 1, deadline_ms=1000)
    new = g.change_invisible(_receipt(g, 0, h, 1000), 5000, now_ms=100)
    with pytest.raises(InvalidReceiptHandleError, match="replaced"):
        g.change_invisible(_receipt(g, 0, h, 1000), 5000, now_ms=200)
    (err,) = g.ack([_receipt(g, 0, new, 5000)], now_ms=6000)
    assert isinstance(err, InvalidReceiptHandleError) and "expired" in str(err)
    assert g.ack([_receipt(g, 0, new, 5000)], now_ms=4000) == [None]
    (again,) = g.ack([_receipt(g, 0, new, 5000)], now_ms=4000)
    assert "already acknowledged" in str(again)
    (h2,) = g.pop("g", "t", 0, 0, [(1, 0)], 2, deadline_ms=9000)
    twice = g.ack([_receipt(g, 1, h2, 9000)] * 2, now_ms=4000)     # the same one, one call
    assert twice[0] is None and "already acknowledged" in str(twice[1])
    assert 1 not in g.queue("g", "t", 0).in_flight


def test_a_torn_tail_is_cut_off_and_the_records_before_it_kept(tmp_path):
    g = ConsumerGroups(tmp_path)
    g.pop("g", "t", 0, 0, [(0, 0)], 1, deadline_ms=1000)
    g.pop("g", "t", 0, 0, [(1, 0)], 2, deadline_ms=1000)
    path = tmp_path / JOURNAL_NAME
    size = path.stat().st_size
    with open(path, "r+b") as f:                        # the last record half written
        f.truncate(size - 7)
    g2 = ConsumerGroups(tmp_path)
    assert sorted(g2.queue("g", "t", 0).in_flight) == [0]
    assert g2.journal.dropped_tail > 0
    data = path.read_bytes()
    records, end = jr.read_records(data)
    assert end == len(data)                              # rewritten whole


def test_a_damaged_header_is_a_clear_error(tmp_path):
    ConsumerGroups(tmp_path).close()
    path = tmp_path / JOURNAL_NAME
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptJournalError, match="header"):
        ConsumerGroups(tmp_path)


def test_every_record_kind_decodes_to_what_was_encoded():
    pop = jr.encode_pop("grp", "top", 3, 17, 12345, [(10, 1, 7), (12, 2, 8)])
    ack = jr.encode_ack("grp", "top", 3, [10, 12])
    change = jr.encode_change("grp", "top", 3, 12, 999, 9)
    state = jr.encode_state("grp", "top", 3, 17, [(12, 999, 2, 9)])
    counter = jr.encode_counter(42)
    records, end = jr.read_records(jr.encode_header() + pop + ack + change + state + counter)
    p, a, c, s, n = records
    assert (p.kind, p.group, p.topic, p.queue_id, p.offset, p.deadline_ms) == \
        (jr.Kind.POP, "grp", "top", 3, 17, 12345)
    assert [(e.offset, e.attempt, e.handle_id) for e in p.entries] == [(10, 1, 7), (12, 2, 8)]
    assert [e.offset for e in a.entries] == [10, 12]
    assert (c.offset, c.deadline_ms, c.entries[0].handle_id) == (12, 999, 9)
    assert [(e.offset, e.deadline_ms, e.attempt, e.handle_id) for e in s.entries] == \
        [(12, 999, 2, 9)]
    assert n.counter == 42


def test_receipt_handles_round_trip_and_resist_forgery(tmp_path):
    secret = load_or_create_secret(tmp_path / "receipt.key")
    assert load_or_create_secret(tmp_path / "receipt.key") == secret
    assert os.stat(tmp_path / "receipt.key").st_mode & 0o077 == 0
    signer = ReceiptSigner(secret)
    r = Receipt("g", "t", 2, 40, 7, 123456)
    handle = signer.encode(r)
    assert signer.decode(handle) == r
    with pytest.raises(InvalidReceiptHandleError, match="signature"):
        ReceiptSigner(b"x" * 32).decode(handle)
    with pytest.raises(InvalidReceiptHandleError):
        signer.decode(handle[:-2])
    with pytest.raises(InvalidReceiptHandleError, match="base64"):
        signer.decode("%%%")


class _PausedFsync(FileOps):
    """fsync pauses on other threads after it got its descriptor (a thread preempted between
    reading the journal's descriptor and the syscall) until ``go`` is set; and the first
    descriptor freed while it waits is taken by something else (as gRPC's threads open
    sockets), so a stale descriptor would name another file."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.squatter: int | None = None
        self.seen: list[tuple[bool, str]] = []     # (fd is the journal's file, error)

    def write_atomic(self, path, data):
        if self.entered.is_set() and self.squatter is None:
            self.squatter = os.open(os.devnull, os.O_RDONLY)
        super().write_atomic(path, data)

    def fsync(self, path, fd):
        if threading.current_thread() is threading.main_thread() or path.name.endswith(".tmp"):
            return super().fsync(path, fd)
        self.entered.set()
        self.go.wait(10)
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except OSError:
            same = False
        try:
            super().fsync(path, fd)
            self.seen.append((same, ""))
        except OSError as exc:
            self.seen.append((same, repr(exc)))
            raise


def test_a_journal_fsync_on_another_thread_and_a_compaction_do_not_race(tmp_path):
    """server.sync_journal fsyncs the group journal from an executor thread while the event
    loop may compact it (close, atomic replace, reopen). The fsync must cover the journal
    file, not a descriptor closed under it (the old code raised EBADF/EINVAL there, which
    ended the server's once-a-second sync task for good)."""
    ops = _PausedFsync()
    g = ConsumerGroups(tmp_path, jr.Journal(tmp_path / JOURNAL_NAME, file_ops=ops))
    g.pop("g", "t", 0, 0, [(0, 0), (1, 0)], 2, deadline_ms=1000)
    errors: list[BaseException] = []

    def run(fn):
        try:
            fn()
        except BaseException as exc:       # noqa: BLE001 - reported below
            errors.append(exc)

    syncer = threading.Thread(target=run, args=(g.journal.sync,))
    syncer.start()
    assert ops.entered.wait(10)
    compactor = threading.Thread(target=run, args=(g.compact,))
    compactor.start()
    compactor.join(0.3)          # the old code compacts right here, under the paused fsync
    ops.go.set()
    syncer.join(10)
    compactor.join(10)
    if ops.squatter is not None:
        os.close(ops.squatter)
    assert not errors, errors
    assert ops.seen == [(True, "")]
    g.ack([_receipt(g, 0, 1, 1000)], now_ms=500)     # the journal takes appends after it
    g2 = ConsumerGroups(tmp_path)
    assert sorted(g2.queue("g", "t", 0).in_flight) == [1]


def test_a_compaction_refused_by_a_full_disk_leaves_the_journal_working(tmp_path):
    ops = FaultInjectingFileOps()
    g = ConsumerGroups(tmp_path, jr.Journal(tmp_path / JOURNAL_NAME, file_ops=ops))
    h = g.pop("g", "t", 0, 0, [(0, 0), (1, 0)], 2, deadline_ms=1000)
    ops.space_left = 0
    with pytest.raises(DiskFullError):
        g.compact()
    ops.space_left = None
    assert g.ack([_receipt(g, 0, h[0], 1000)], now_ms=500) == [None]
    g.journal.sync()
    g2 = ConsumerGroups(tmp_path)          # what a SIGKILL leaves: the ack is there
    assert sorted(g2.queue("g", "t", 0).in_flight) == [1]


def test_renewed_deliveries_keep_their_handle_and_are_replayed_with_their_client(tmp_path):
    g = ConsumerGroups(tmp_path)
    h = g.pop("g", "t", 0, 0, [(0, 0), (1, 0)], 2, deadline_ms=1000, renew=("c1", 50_000))
    assert g.renewing_clients() == ["c1"]
    assert g.renew("c1", now_ms=500, ahead_ms=100, slice_ms=1000) == (0, 0)   # not due yet
    assert g.renew("c1", now_ms=950, ahead_ms=100, slice_ms=1000) == (2, 0)
    assert g.queue("g", "t", 0).due(now_ms=1500, limit=10) == []             # renewed: 1950
    # the client's handles from the receive still work past their own deadline
    assert g.ack([_receipt(g, 0, h[0], 1000)], now_ms=1500) == [None]
    g2 = ConsumerGroups(tmp_path)          # what a SIGKILL leaves
    d = g2.queue("g", "t", 0).in_flight[1]
    assert (d.deadline_ms, d.handle_id, d.renew_client, d.renew_until_ms) == \
        (1950, h[1], "c1", 50_000)
    g2.close()
    g3 = ConsumerGroups(tmp_path)          # and a clean stop (a snapshot: STATE + RENEW)
    assert g3.queue("g", "t", 0).in_flight[1] == d
    assert g3.renewing_clients() == ["c1"]


def test_a_gone_clients_deliveries_come_back_soon_and_stay_released(tmp_path):
    g = ConsumerGroups(tmp_path)
    h = g.pop("g", "t", 0, 0, [(0, 0), (1, 0)], 2, deadline_ms=60_000, renew=("c1", 10**9))
    g.pop("g", "t", 1, 0, [(0, 0)], 1, deadline_ms=60_000, renew=("c2", 10**9))
    assert g.release("c1", deadline_ms=2_000) == 2
    assert g.renewing_clients() == ["c2"]
    q = g.queue("g", "t", 0)
    assert q.due(now_ms=2_000, limit=10) == [(0, 1), (1, 1)]
    assert q.in_flight[0].handle_id == h[0] and not q.in_flight[0].renew_client
    g2 = ConsumerGroups(tmp_path)
    assert g2.renewing_clients() == ["c2"]
    assert g2.queue("g", "t", 0).due(now_ms=2_000, limit=10) == [(0, 1), (1, 1)]


def test_renewal_stops_at_its_limit_and_after_a_change_or_a_redelivery(tmp_path):
    g = ConsumerGroups(tmp_path)
    h = g.pop("g", "t", 0, 0, [(0, 0), (1, 0), (2, 0)], 3, deadline_ms=1000,
              renew=("c1", 900))
    g.change_invisible(_receipt(g, 1, h[1], 1000), 5000, now_ms=100)   # the client's nack
    g.ack([_receipt(g, 2, h[2], 1000)], now_ms=100)
    # offset 0 is past its renew limit: not renewed, it comes back at its deadline
    assert g.renew("c1", now_ms=950, ahead_ms=100, slice_ms=1000) == (0, 1)
    assert g.renewing_clients() == []
    q = g.queue("g", "t", 0)
    assert q.due(now_ms=1000, limit=10) == [(0, 1)]
    assert q.in_flight[1].deadline_ms == 5000
    assert ConsumerGroups(tmp_path).renewing_clients() == []


def test_an_append_cut_short_by_a_full_disk_is_taken_back(tmp_path):
    """A record half written when the disk filled must not stay in the file: the next open
    would cut the journal there and drop every record appended after it."""

    class FullDisk(FileOps):   # the first write stops short, the next finds no room
        left = 2

        def write(self, path, fd, data):
            self.left -= 1
            if self.left == 1:
                return super().write(path, fd, bytes(data[: max(1, len(data) // 2)]))
            if self.left == 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(path, fd, data)

    disk = FullDisk()
    disk.left = 99
    with installed(disk):              # the journal's file operations go through the seam
        g = ConsumerGroups(tmp_path)
    h = g.pop("g", "t", 0, 0, [(0, 0), (1, 0), (2, 0)], 3, deadline_ms=1000)
    disk.left = 2
    with pytest.raises(OSError):
        g.ack([_receipt(g, 0, h[0], 1000)], now_ms=500)
    assert g.ack([_receipt(g, 1, h[1], 1000)], now_ms=500) == [None]   # the disk has room again
    data = (tmp_path / JOURNAL_NAME).read_bytes()
    assert jr.read_records(data)[1] == len(data)       # whole records only
    g2 = ConsumerGroups(tmp_path)                      # what a SIGKILL leaves
    assert g2.journal.dropped_tail == 0
    assert 1 not in g2.queue("g", "t", 0).in_flight    # the ack after the refusal stands
    assert 2 in g2.queue("g", "t", 0).in_flight


def _state(g: ConsumerGroups):
    """Everything a ConsumerGroups holds, comparable."""
    return ({k: (q.pop_offset, dict(q.in_flight)) for k, q in g.queues.items()},
            g.next_handle_id, {k: dict(v) for k, v in g.committed.items() if v},
            sorted(g.renewing_clients()))


@pytest.mark.parametrize("seed", range(6))
def test_a_replay_rebuilds_exactly_the_state_the_live_changes_made(tmp_path, seed):
    """Live changes append records and apply those same records (the code a replay runs):
    after any mix of pops, holds, acks, changes, renewals, releases, resets and commits, a
    reopen without close (what a SIGKILL leaves) has the state the live object had."""
    import random

    from strata.broker.group_state import Committed
    rnd = random.Random(seed)
    g = ConsumerGroups(tmp_path)
    now = 1000
    handles: dict[tuple, int] = {}
    for _ in range(300):
        now += rnd.randint(0, 50)
        key = ("g", "t", rnd.randint(0, 2))
        op = rnd.randint(0, 8)
        q = g.queue(*key)
        if op <= 2:
            start = q.pop_offset if q else 0
            picked = [(start + i, 0) for i in range(rnd.randint(0, 3))]
            held = [start + len(picked)] if rnd.random() < 0.2 else []
            renew = ("c%d" % rnd.randint(0, 1), now + 500) if rnd.random() < 0.4 else None
            hs = g.pop(*key, start, picked, start + len(picked) + len(held), now + 100,
                       held, renew)
            handles.update({(key, o): h for (o, _a), h in zip(picked, hs)})
        elif op == 3 and handles:
            (k, o), h = rnd.choice(sorted(handles.items()))
            g.ack([_receipt(g, o, h, now + 1, *k)], now_ms=now)
        elif op == 4 and handles:
            (k, o), h = rnd.choice(sorted(handles.items()))
            try:
                handles[(k, o)] = g.change_invisible(_receipt(g, o, h, now + 1, *k),
                                                     now + 200, now)
            except InvalidReceiptHandleError:
                pass
        elif op == 5:
            g.renew("c%d" % rnd.randint(0, 1), now, 80, 150)
        elif op == 6:
            g.release("c%d" % rnd.randint(0, 1), now + 10)
        elif op == 7 and rnd.random() < 0.2:
            g.reset_offset(*key, rnd.randint(0, 20))
        elif op == 8:
            g.journal.append(g.commit("k", [("t", key[2], Committed(rnd.randint(0, 99), 3,
                                                                      "m", now))]))
        elif handles and rnd.random() < 0.3:
            (k, o), _h = rnd.choice(sorted(handles.items()))
            g.forget(*k, [o])
    live = _state(g)
    assert live[0] and live[1] > 1                 # the run did change things
    g.journal.sync()
    assert _state(ConsumerGroups(tmp_path)) == live


@pytest.mark.parametrize("kind", list(jr.Kind))
def test_every_record_kind_encodes_from_its_record_and_back(kind):
    """Live changes append ``jr.encode(record)``: each kind has an encoding whose decoding
    encodes to the same bytes (a new kind without one fails here, not in a broker)."""
    e = jr.Entry(5, 1, 9, 7, 11)
    rec = jr.JournalRecord(kind, "g", "t", 1, 5, 7, (e,), counter=3, client="c",
                           leader_epoch=2, metadata="m", commit_ms=13)
    data = jr.encode(rec)
    length, _crc = jr.RECORD_HEAD.unpack_from(data)
    back = jr.decode_payload(data[jr.RECORD_HEAD.size:])
    assert len(data) == jr.RECORD_HEAD.size + length and back.kind is kind
    assert jr.encode(back) == data


def test_a_journal_replayed_without_opening_it_has_every_kind_of_state(tmp_path):
    """The console reads a running broker's journal whole and replays it in memory
    (``ConsumerGroups.replayed``): pops, resets, Kafka commits and membership images all
    come back as the broker holds them, in a state with no journal to write to."""
    from strata.broker.group_state import Committed
    g = ConsumerGroups(tmp_path)
    g.reset_offset("billing", "orders", 0, 3)
    image = b"\x00\x01membership"
    g.journal.append(jr.encode_members("analytics", image))
    g.apply_membership("analytics", image)
    g.journal.append(g.commit("analytics", [("clicks", 1, Committed(7, commit_ms=5))]))
    data = (tmp_path / JOURNAL_NAME).read_bytes()
    records, _end = jr.read_records(data)
    r = ConsumerGroups.replayed(records)
    assert r.memberships == g.memberships == {"analytics": image}
    assert r.committed_offsets("analytics") == g.committed_offsets("analytics")
    assert r.committed_offsets("analytics")[("clicks", 1)].offset == 7
    assert r.queues[("billing", "orders", 0)].commit_offset() == 3
    assert r.journal is None
    g.close()


def test_a_renewed_delivery_is_not_due_while_its_client_may_still_renew_it(tmp_path):
    """No renewal ran (a late renew loop): the delivery stays with its connected client —
    not due, its handle acks — until the client is gone or its renew-until time passed."""
    g = ConsumerGroups(tmp_path)
    h = g.pop("g", "t", 0, 0, [(0, 0)], 1, deadline_ms=1000, renew=("c1", 9_000))
    plain = g.pop("g", "t", 0, 1, [(1, 0)], 2, deadline_ms=1500)    # a plain delivery
    connected = {"c1": 5_000}
    g.connected_until = until = lambda client: connected.get(client, -1)
    q = g.queue("g", "t", 0)
    assert q.due(2_000, 10, until) == [(1, 1)]                       # only the plain one
    assert g.next_deadline(now_ms=2_000) == 1500
    assert g.ack([_receipt(g, 0, h[0], 1000)], now_ms=2_000) == [None]   # still its
    g.pop("g", "t", 0, 2, [(2, 0)], 3, deadline_ms=1000, renew=("c1", 9_000))
    assert q.due(4_999, 10, until) == [(1, 1)]
    assert q.due(5_001, 10, until) == [(2, 1), (1, 1)]               # the client is gone
    connected["c1"] = 20_000                                         # it called again ...
    assert q.due(8_999, 10, until) == [(1, 1)]
    assert q.due(9_000, 10, until) == [(2, 1), (1, 1)]               # ... renew-until passed
    assert g.ack([_receipt(g, 1, plain[0], 1500)], now_ms=1_000) == [None]
    assert g.next_deadline(now_ms=2_000) == 9_000       # when the kept one becomes due
    del connected["c1"]                                              # it said goodbye
    assert q.due(1_001, 10, until) == [(2, 1)]
    assert g.next_deadline(now_ms=2_000) == 1000


def test_a_pop_nobody_sent_is_given_back_due_at_once_with_its_attempts_before(tmp_path):
    g = ConsumerGroups(tmp_path)
    h = g.pop("g", "t", 0, 0, [(0, 0), (1, 0)], 2, deadline_ms=60_000, renew=("c1", 10**9))
    g.ack([_receipt(g, 1, h[1], 60_000)], now_ms=10)
    assert g.give_back([_receipt(g, 0, h[0], 60_000), _receipt(g, 1, h[1], 60_000)],
                       now_ms=20) == 1                               # offset 1 was acked
    q = g.queue("g", "t", 0)
    assert q.due(now_ms=20, limit=10) == [(0, 0)]       # never delivered: no attempt counted
    assert not q.in_flight[0].held and q.pop_offset == 2
    assert g.renewing_clients() == []
    assert ConsumerGroups(tmp_path).queue("g", "t", 0).due(now_ms=20, limit=10) == [(0, 0)]


def test_late_pops_given_back_many_times_never_raise_the_attempt(tmp_path):
    """A store slower than the clients' deadlines, over and over: each late pop is given
    back, and the message's next real delivery is the attempt it would have been."""
    g = ConsumerGroups(tmp_path)
    h = g.pop("g", "t", 0, 0, [(0, 0)], 1, deadline_ms=100)        # delivered once (seen)
    for i in range(40):                                  # far past any max attempts
        now = 1_000 + i
        (off, attempt), = g.queue("g", "t", 0).due(now_ms=now, limit=10)
        assert (off, attempt) == (0, 1)
        h = g.pop("g", "t", 0, 1, [(0, attempt)], 1, deadline_ms=now + 60_000)
        assert g.give_back([_receipt(g, 0, h[0], now + 60_000)], now_ms=now) == 1
    g.compact()
    reopened = ConsumerGroups(tmp_path)
    for groups in (g, reopened):
        assert groups.queue("g", "t", 0).due(now_ms=2_000, limit=10) == [(0, 1)]
    assert g.give_back([_receipt(g, 0, h[0], 60_000)], now_ms=3_000) == 0  # twice: no-op
