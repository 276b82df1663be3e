"""Consumer-group state: per group, topic and queue the next offset never delivered (the
pop offset) and the deliveries in flight (deadline, attempt, handle id; for a push consumer's
receive, the client it is renewed for and until when), kept in memory and journaled (``strata.broker.journal``) so that a restart, clean or after SIGKILL, neither
redelivers an acked message nor forgets an unacked one.

Beside them, the offsets groups *commit* (Kafka consumers: ``strata.broker.kafka``): per
group, topic and queue the next offset to consume, with the client's metadata. They live in
the same journal (one protocol-neutral place for a group's progress), but are changed only
through ``commit``, whose records the caller appends off the event loop
(``strata.broker.offset_commits``).

Every change is made the way LevelDB's ``LogAndApply`` makes one: build the journal records
that say it (``jr.JournalRecord``), append them, then apply those same records with
``_apply``, the code a replay runs, so a restart rebuilds exactly the state the live broker
had. The deliveries' methods run on one thread at a time (a server's group worker,
``strata.broker.group_worker``); Kafka's committed offsets and memberships are applied on the
event loop, and a compaction that may run meanwhile copies each dict in one step and holds
``append_lock`` against their appends. Times are ms since the epoch and passed in, so the
rules are testable without a clock.

A push consumer's delivery (one renewed for a client) is not due to other consumers while
that client may still renew it: until the client is gone (``connected_until``, which the
server sets from its sessions) or its renew-until time passed, whichever comes first. The
renewals themselves (``renew``) only carry that promise into the journal, so a late renewal
(a loaded machine) never lets a second consumer have the message, and the client's receipt
handle keeps working meanwhile.
"""

from __future__ import annotations

import heapq
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from strata.broker import journal as jr
from strata.broker.errors import InvalidReceiptHandleError
from strata.broker.receipt import Receipt
from strata.errors import DiskFullError

log = logging.getLogger(__name__)

COMPACT_BYTES = 64 << 20   # rewrite the journal as a snapshot past this size
JOURNAL_NAME = "groups.journal"

QueueKey = tuple[str, str, int]   # group, topic, queue id
RenewKey = tuple[QueueKey, int]   # a queue and an offset in it
# client id -> ms until which it counts as connected (-1: it is gone, or never was)
ConnectedUntil = Callable[[str], int]


def nobody_connected(client: str) -> int:
    """No client is connected (a broker without sessions: tools, tests, a replay)."""
    return -1


@dataclass
class Delivery:
    """A message handed out and not acked yet; or (attempt 0, handle id 0) one of a FIFO
    topic that a pop passed over and held back because its message group had a message in
    flight (it is delivered once it heads its group: ``strata.broker.fifo``). A delivery
    given back before any client saw it (``ConsumerGroups.give_back``) keeps a handle id but
    has the attempt count it had before that pop: 0 if it was never delivered."""

    deadline_ms: int
    attempt: int
    handle_id: int
    renew_client: str = ""      # auto_renew: renewed while this client is connected
    renew_until_ms: int = 0     # ... but not past this time

    @property
    def held(self) -> bool:
        return self.handle_id == 0

    def due_ms(self, connected_until: ConnectedUntil) -> int:
        """When the delivery may go to another consumer: its deadline or, for a push
        consumer's delivery, not before its client is gone or its renew-until time passed."""
        if not self.renew_client:
            return self.deadline_ms
        return max(self.deadline_ms,
                   min(self.renew_until_ms, connected_until(self.renew_client)))


HELD = Delivery(0, 0, 0)


@dataclass
class QueueState:
    pop_offset: int
    in_flight: dict[int, Delivery] = field(default_factory=dict)
    # (deadline, offset, handle id); stale items (acked, replaced) are skipped when met
    _due: list[tuple[int, int, int]] = field(default_factory=list)

    def commit_offset(self) -> int:
        """Every offset below this one is done (acked or filtered out)."""
        return min(self.in_flight) if self.in_flight else self.pop_offset

    def _live(self, item: tuple[int, int, int]) -> bool:
        d = self.in_flight.get(item[1])
        return d is not None and d.handle_id == item[2] and d.deadline_ms == item[0]

    def next_deadline(self, now_ms: int | None = None,
                      connected_until: ConnectedUntil = nobody_connected) -> int | None:
        """When the next delivery becomes due (``Delivery.due_ms``), or None. With
        ``now_ms``, a deadline still ahead is answered as it is (looking again then is
        harmless), so only deliveries past their deadline are looked at one by one."""
        held: list[tuple[int, int, int]] = []      # past their deadline, kept for a client
        best = None
        due = self._due
        while due:
            item = due[0]
            if not self._live(item):
                heapq.heappop(due)
                continue
            if now_ms is not None and item[0] > now_ms:
                at = item[0]
            else:
                at = self.in_flight[item[1]].due_ms(connected_until)
            if best is None or at < best:
                best = at
            if at == item[0]:
                break
            held.append(heapq.heappop(due))
        for item in held:
            heapq.heappush(due, item)
        return best

    def due(self, now_ms: int, limit: int,
            connected_until: ConnectedUntil = nobody_connected) -> list[tuple[int, int]]:
        """Up to ``limit`` deliveries due now (``Delivery.due_ms``): (offset, attempt so far),
        oldest deadline first. They stay in flight until ``pop`` hands them out again."""
        out: list[tuple[int, int]] = []
        kept: list[tuple[int, int, int]] = []
        while self._due and len(out) < limit and self._due[0][0] <= now_ms:
            item = heapq.heappop(self._due)
            if self._live(item):
                d = self.in_flight[item[1]]
                if d.due_ms(connected_until) <= now_ms:
                    out.append((item[1], d.attempt))
                kept.append(item)
        for item in kept:
            heapq.heappush(self._due, item)
        return out

    def put(self, offset: int, d: Delivery) -> None:
        """Hand out ``offset`` (or, with a held delivery, hold it back: it then has no
        deadline and never shows up in ``due``)."""
        old = self.in_flight.get(offset)
        self.in_flight[offset] = d
        if old is not None and (old.deadline_ms, old.handle_id) == (d.deadline_ms, d.handle_id):
            return          # its item in the deadline heap stands (one item per delivery)
        if not d.held:
            heapq.heappush(self._due, (d.deadline_ms, offset, d.handle_id))


@dataclass(frozen=True)
class Committed:
    """An offset a group committed for a queue: the next offset its consumers read."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_ms: int = 0


class ConsumerGroups:
    """All groups' state of one broker, backed by its journal."""

    def __init__(self, directory: Path, journal: jr.Journal | None = None) -> None:
        self.journal = journal or jr.Journal(directory / JOURNAL_NAME)
        # set by the server that knows its clients' sessions (strata.broker.rocketmq)
        self.connected_until: ConnectedUntil = nobody_connected
        # held by a compaction and by the appends of committed offsets: a record appended
        # off the loop either lands in the rewritten file or waits for it
        self.append_lock = threading.Lock()
        self._init_state()
        for rec in self.journal.open():
            self._apply(rec)
        self.compact()

    @classmethod
    def replayed(cls, records: list[jr.JournalRecord]) -> "ConsumerGroups":
        """The state ``records`` describe, without a journal: for a reader of a journal that
        a broker owns (the console); writing to it fails, as it must."""
        groups = cls.__new__(cls)
        groups.journal = None
        groups.connected_until = nobody_connected
        groups._init_state()
        for rec in records:
            groups._apply(rec)
        return groups

    def _init_state(self) -> None:
        """The empty state (every attribute ``_apply`` touches), before any record."""
        self.queues: dict[QueueKey, QueueState] = {}
        self.next_handle_id = 1
        # client id -> the deliveries renewed for it (queue and offset -> handle id); an item
        # whose delivery was acked, replaced or released since is dropped when met
        self.renewing: dict[str, dict[RenewKey, int]] = {}
        # group -> (topic, queue id) -> its committed offset
        self.committed: dict[str, dict[tuple[str, int], Committed]] = {}
        # group -> its membership image (Kafka's classic groups: strata.broker.kafka.group_image)
        self.memberships: dict[str, bytes] = {}
        # journal writes under way off the loop whose records are not in the state yet (a
        # compaction waits for them: it would write the state without them, over the file
        # that holds them)
        self.writing = 0

    # ------------------------------------------------------------------ log and apply

    def _log_and_apply(self, records: list[jr.JournalRecord]) -> None:
        """Append ``records`` to the journal (one write) and apply them to the state; a
        failed append (a full disk) raises and changes nothing."""
        self.journal.append(b"".join(jr.encode(r) for r in records))
        for r in records:
            self._apply(r)

    def _apply(self, rec: jr.JournalRecord) -> None:
        """Apply one record to the state: for a replay and for a live change alike."""
        if rec.kind is jr.Kind.COUNTER:
            self.next_handle_id = max(self.next_handle_id, rec.counter)
            return
        if rec.kind is jr.Kind.MEMBERS:
            self._set_membership(rec.group, rec.image)
            return
        key = (rec.group, rec.topic, rec.queue_id)
        if rec.kind is jr.Kind.COMMIT:
            self.committed.setdefault(rec.group, {})[(rec.topic, rec.queue_id)] = Committed(
                rec.offset, rec.leader_epoch, rec.metadata, rec.commit_ms)
            return
        if rec.kind is jr.Kind.STATE:
            q = self.queues[key] = QueueState(rec.offset)
            for e in rec.entries:
                q.put(e.offset, HELD if e.handle_id == 0 else
                      Delivery(e.deadline_ms, e.attempt, e.handle_id))
                self.next_handle_id = max(self.next_handle_id, e.handle_id + 1)
            return
        q = self.queues.get(key)
        if rec.kind is jr.Kind.POP:
            if q is None:
                q = self.queues[key] = QueueState(rec.offset)
            q.pop_offset = max(q.pop_offset, rec.offset)
            deadline, put, top = rec.deadline_ms, q.put, 0
            for o, attempt, handle, _d, _u in rec.entries:
                put(o, HELD if handle == 0 else Delivery(deadline, attempt, handle))
                if handle > top:
                    top = handle
            self.next_handle_id = max(self.next_handle_id, top + 1)
        elif q is None:
            return
        elif rec.kind is jr.Kind.ACK:
            drop = q.in_flight.pop
            for e in rec.entries:
                drop(e[0], None)
        elif rec.kind is jr.Kind.CHANGE:
            d = q.in_flight.get(rec.offset)
            if d is not None:
                q.put(rec.offset, Delivery(rec.deadline_ms, d.attempt, rec.entries[0].handle_id))
                self.next_handle_id = max(self.next_handle_id, rec.entries[0].handle_id + 1)
        elif rec.kind is jr.Kind.RENEW:
            for e in rec.entries:
                d = q.in_flight.get(e.offset)
                if d is not None and not d.held and d.handle_id == e.handle_id:
                    self._put_renewing(key, q, e.offset, d, e.deadline_ms, rec.client,
                                       e.renew_until_ms)

    def snapshot_records(self):
        """The records of the whole state. (Each dict is copied in one step first: Kafka's
        committed offsets and memberships are applied on the event loop while a compaction
        may run on the group worker's thread.)"""
        yield jr.encode_counter(self.next_handle_id)
        for (g, t, qid), q in list(self.queues.items()):
            flying = list(q.in_flight.items())
            yield jr.encode_state(g, t, qid, q.pop_offset, [
                (o, d.deadline_ms, d.attempt, d.handle_id) for o, d in flying])
            renewed: dict[str, list[tuple[int, int, int, int]]] = {}
            for o, d in flying:
                if d.renew_client:
                    renewed.setdefault(d.renew_client, []).append(
                        (o, d.handle_id, d.deadline_ms, d.renew_until_ms))
            for client, entries in renewed.items():
                yield jr.encode_renew(g, t, qid, client, entries)
        for g, offsets in list(self.committed.items()):
            for (t, qid), c in list(offsets.items()):
                yield jr.encode_commit(g, t, qid, c.offset, c.leader_epoch, c.metadata,
                                       c.commit_ms)
        for g, image in list(self.memberships.items()):
            yield jr.encode_members(g, image)

    def compact(self) -> None:
        """Rewrite the journal as the current state (atomically)."""
        self.journal.rewrite(self.snapshot_records())

    # ------------------------------------------------------------------ reads

    def queue(self, group: str, topic: str, queue_id: int) -> QueueState | None:
        return self.queues.get((group, topic, queue_id))

    def next_deadline(self, now_ms: int | None = None) -> int | None:
        """The earliest time a delivery becomes due over all queues (when a long poll should
        look again for redeliveries); ``now_ms`` as ``QueueState.next_deadline`` takes it."""
        until = self.connected_until
        ds = [d for q in list(self.queues.values())
              if (d := q.next_deadline(now_ms, until)) is not None]
        return min(ds) if ds else None

    # ------------------------------------------------------------------ changes

    def pop(self, group: str, topic: str, queue_id: int, start_offset: int,
            picked: list[tuple[int, int]], pop_offset: int, deadline_ms: int,
            held: list[int] = (), renew: tuple[str, int] | None = None) -> list[int]:
        """Hand out ``picked`` (queue offset, attempts so far; 0 = never delivered) until
        ``deadline_ms``, hold back ``held`` (offsets of a FIFO topic passed over) and move
        the queue's pop offset to ``pop_offset``; returns a new handle id per delivery.
        ``start_offset`` is where a queue the group never read starts. ``renew`` (client id,
        renew until ms): a push consumer's receive, renewed while that client is connected
        (``renew``)."""
        q = self.queues.get((group, topic, queue_id))
        first = self.next_handle_id
        new, entry = tuple.__new__, jr.Entry      # Entry(...) without its call overhead
        entries = tuple([new(entry, (o, a + 1, h, deadline_ms, 0))
                         for h, (o, a) in enumerate(picked, first)])
        base = start_offset if q is None else q.pop_offset
        records = [jr.JournalRecord(jr.Kind.POP, group, topic, queue_id,
                                    max(base, pop_offset), deadline_ms,
                                    entries + tuple([new(entry, (o, 0, 0, deadline_ms, 0))
                                                     for o in held]))]
        if renew is not None and entries:
            records.append(jr.JournalRecord(
                jr.Kind.RENEW, group, topic, queue_id, client=renew[0],
                entries=tuple(jr.Entry(e.offset, 0, e.handle_id, deadline_ms, renew[1])
                              for e in entries)))
        self._log_and_apply(records)
        self._maybe_compact()
        return [e.handle_id for e in entries]

    @staticmethod
    def _not_in_flight(r: Receipt) -> InvalidReceiptHandleError:
        return InvalidReceiptHandleError(
            f"receipt handle of {r.topic}/{r.queue_id} offset {r.queue_offset}: the message "
            f"is not in flight for group {r.group} (already acknowledged)")

    def _live_delivery(self, r: Receipt, now_ms: int) -> tuple[QueueState, Delivery]:
        q = self.queues.get((r.group, r.topic, r.queue_id))
        d = q.in_flight.get(r.queue_offset) if q is not None else None
        if d is None:
            raise self._not_in_flight(r)
        if d.handle_id != r.handle_id:
            raise InvalidReceiptHandleError(
                f"receipt handle of {r.topic}/{r.queue_id} offset {r.queue_offset} was replaced "
                "(by ChangeInvisibleDuration or a redelivery); use the newest handle")
        due = d.due_ms(self.connected_until)   # its deadline, renewed since, or kept for
        if now_ms > due:                       # its push consumer
            raise InvalidReceiptHandleError(
                f"receipt handle of {r.topic}/{r.queue_id} offset {r.queue_offset} expired "
                f"{now_ms - due} ms ago (its invisible time is over; the message will "
                "be delivered again)")
        return q, d

    def check(self, r: Receipt, now_ms: int) -> Delivery:
        """The delivery a receipt stands for, if it is the live one (else the error)."""
        return self._live_delivery(r, now_ms)[1]

    def ack(self, receipts: list[Receipt], now_ms: int) -> list[InvalidReceiptHandleError | None]:
        """Acknowledge deliveries; per receipt None (done) or the error saying why not.
        All of one call's acks go to the journal in one write per queue."""
        results: list[InvalidReceiptHandleError | None] = []
        done: dict[QueueKey, dict[int, None]] = {}
        for r in receipts:
            key = (r.group, r.topic, r.queue_id)
            offsets = done.get(key)
            try:
                if offsets is not None and r.queue_offset in offsets:   # acked in this call
                    raise self._not_in_flight(r)
                self._live_delivery(r, now_ms)
            except InvalidReceiptHandleError as exc:
                results.append(exc)
                continue
            if offsets is None:
                offsets = done[key] = {}
            offsets[r.queue_offset] = None
            results.append(None)
        self._log_and_apply([_ack(key, offs) for key, offs in done.items()])
        return results

    def give_back(self, receipts: list[Receipt], now_ms: int) -> int:
        """Deliveries made but never sent (their receive gave up first): due again at once,
        with the attempt count they had before that pop — no client saw them, so a store
        slow past the clients' deadlines many times in a row never walks a message to the
        dead-letter topic. One POP record per queue (its pop offset unchanged; each entry
        under a new handle id, its attempt possibly 0: due, never delivered). Returns how
        many."""
        back: dict[QueueKey, list[jr.Entry]] = {}
        handle = self.next_handle_id        # new handles: the unsent receipt stops working,
        for r in receipts:                  # so nothing is given back twice
            key = (r.group, r.topic, r.queue_id)
            q = self.queues.get(key)
            d = q.in_flight.get(r.queue_offset) if q is not None else None
            if d is not None and not d.held and d.handle_id == r.handle_id:
                back.setdefault(key, []).append(
                    jr.Entry(r.queue_offset, max(d.attempt - 1, 0), handle, now_ms))
                handle += 1
        if back:
            self._log_and_apply([
                jr.JournalRecord(jr.Kind.POP, *key, self.queues[key].pop_offset, now_ms,
                                 tuple(entries)) for key, entries in back.items()])
            self._maybe_compact()
        return sum(len(e) for e in back.values())

    def forget(self, group: str, topic: str, queue_id: int, offsets: list[int]) -> None:
        """Take deliveries out of flight without a receipt (their message is gone)."""
        if (group, topic, queue_id) not in self.queues:
            return
        self._log_and_apply([_ack((group, topic, queue_id), offsets)])

    def change_invisible(self, r: Receipt, deadline_ms: int, now_ms: int) -> int:
        """Give a delivery a new invisible-time end; returns its new handle id (the old
        handle stops working)."""
        self._live_delivery(r, now_ms)
        handle = self.next_handle_id
        self._log_and_apply([_change((r.group, r.topic, r.queue_id), r.queue_offset,
                                     deadline_ms, handle)])
        return handle

    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """An operator's reset (the web console): the group's queue starts over at
        ``offset``; its deliveries in flight are dropped (their receipts stop working)."""
        self._log_and_apply([jr.JournalRecord(jr.Kind.STATE, group, topic, queue_id, offset)])

    # ------------------------------------------------------------------ renewal (auto_renew)

    def _put_renewing(self, key: QueueKey, q: QueueState, offset: int, d: Delivery,
                      deadline_ms: int, client: str, until_ms: int) -> None:
        q.put(offset, Delivery(deadline_ms, d.attempt, d.handle_id, client, until_ms))
        self.renewing.setdefault(client, {})[(key, offset)] = d.handle_id

    def _renewed_for(self, client: str) -> list[tuple[QueueKey, QueueState, int, Delivery]]:
        """The deliveries still renewed for ``client`` (stale index items are dropped)."""
        items = self.renewing.get(client, {})
        out = []
        for rk, handle in list(items.items()):
            key, offset = rk
            q = self.queues.get(key)
            d = q.in_flight.get(offset) if q is not None else None
            if d is None or d.handle_id != handle or d.renew_client != client:
                del items[rk]
            else:
                out.append((key, q, offset, d))
        if not items:
            self.renewing.pop(client, None)
        return out

    def renewing_clients(self) -> list[str]:
        """The clients that deliveries in flight are renewed for."""
        return [c for c in list(self.renewing) if self._renewed_for(c)]

    def renew(self, client: str, now_ms: int, ahead_ms: int, slice_ms: int) -> tuple[int, int]:
        """Of the deliveries renewed for ``client``, give those whose invisible time ends
        within ``ahead_ms`` another ``slice_ms`` from now (same handle id: the client's
        receipt handle keeps working); one past its renew-until time is renewed no more and
        comes back at its deadline. Returns (renewed, stopped)."""
        renewed: dict[QueueKey, list[jr.Entry]] = {}
        stopped: list[jr.JournalRecord] = []
        for key, _q, offset, d in self._renewed_for(client):
            if d.deadline_ms - now_ms > ahead_ms:
                continue
            if now_ms >= d.renew_until_ms:   # renewed no more: back at its deadline
                stopped.append(_change(key, offset, d.deadline_ms, d.handle_id))
                continue
            renewed.setdefault(key, []).append(
                jr.Entry(offset, 0, d.handle_id, now_ms + slice_ms, d.renew_until_ms))
        if renewed or stopped:
            self._log_and_apply(stopped + [
                jr.JournalRecord(jr.Kind.RENEW, *key, client=client, entries=tuple(entries))
                for key, entries in renewed.items()])
            self._maybe_compact()
        return sum(len(e) for e in renewed.values()), len(stopped)

    def release(self, client: str, deadline_ms: int) -> int:
        """``client`` is gone: its renewed deliveries are renewed no more and end their
        invisible time at ``deadline_ms`` (soon); returns how many."""
        changes = [_change(key, offset, min(d.deadline_ms, deadline_ms), d.handle_id)
                   for key, _q, offset, d in self._renewed_for(client)]
        if changes:
            self._log_and_apply(changes)
        self.renewing.pop(client, None)
        if changes:
            self._maybe_compact()
        return len(changes)

    # ------------------------------------------------------------------ committed offsets

    def commit(self, group: str, offsets: list[tuple[str, int, Committed]]) -> bytes:
        """Take ``group``'s committed offsets — (topic, queue id, what) — into the state and
        return their journal records, for the caller to append. (The broker's writer appends
        first and takes them into the state after: ``encode_commits``, ``apply_commits``.)"""
        self.apply_commits(group, offsets)
        return self.encode_commits(group, offsets)

    @staticmethod
    def _commit_records(group: str, offsets: list[tuple[str, int, Committed]]
                        ) -> list[jr.JournalRecord]:
        return [jr.JournalRecord(jr.Kind.COMMIT, group, topic, queue_id, c.offset,
                                 leader_epoch=c.leader_epoch, metadata=c.metadata,
                                 commit_ms=c.commit_ms) for topic, queue_id, c in offsets]

    @classmethod
    def encode_commits(cls, group: str, offsets: list[tuple[str, int, Committed]]) -> bytes:
        """The journal records of ``group``'s committed offsets (the state is unchanged)."""
        return b"".join(jr.encode(r) for r in cls._commit_records(group, offsets))

    def apply_commits(self, group: str, offsets: list[tuple[str, int, Committed]]) -> None:
        """Take committed offsets into the state (once their records are in the journal),
        through the code a replay runs."""
        for r in self._commit_records(group, offsets):
            self._apply(r)

    # ------------------------------------------------------------------ memberships

    def _set_membership(self, group: str, image: bytes) -> None:
        if image:
            self.memberships[group] = bytes(image)
        else:
            self.memberships.pop(group, None)

    def apply_membership(self, group: str, image: bytes) -> None:
        """Take a group's membership image (empty: the group is gone) into the state, once
        its MEMBERS record is in the journal (``jr.encode_members``), through the code a
        replay runs."""
        self._apply(jr.JournalRecord(jr.Kind.MEMBERS, group, image=bytes(image)))

    def committed_offsets(self, group: str) -> dict[tuple[str, int], Committed]:
        """Every (topic, queue id) -> committed offset of ``group``."""
        return dict(self.committed.get(group, {}))

    def committed_groups(self) -> list[str]:
        return [g for g, offsets in self.committed.items() if offsets]

    def _maybe_compact(self) -> None:
        if self.journal.size <= COMPACT_BYTES:
            return
        with self.append_lock:
            if self.writing:     # committed offsets written, not in the state yet
                return
            try:
                self.compact()
            except DiskFullError as exc:    # the journal stays as it was and takes appends
                log.warning("%s not compacted: %s", self.journal.path, exc)

    def close(self) -> None:
        """Snapshot, sync and close the journal (clean shutdown)."""
        self.compact()
        self.journal.close()


def _ack(key: QueueKey, offsets) -> jr.JournalRecord:
    """The ACK record of ``offsets`` of one queue."""
    new, entry = tuple.__new__, jr.Entry      # Entry(...) without its call overhead
    return jr.JournalRecord(jr.Kind.ACK, *key,
                            entries=tuple([new(entry, (o, 0, 0, 0, 0)) for o in offsets]))


def _change(key: QueueKey, offset: int, deadline_ms: int, handle_id: int) -> jr.JournalRecord:
    """The CHANGE record: the delivery of ``offset`` ends its invisible time at
    ``deadline_ms`` under handle ``handle_id`` (and is renewed no more)."""
    return jr.JournalRecord(jr.Kind.CHANGE, *key, offset, deadline_ms,
                            (jr.Entry(offset, 0, handle_id, deadline_ms),))
