"""A queue's history comes from two sources: the local files (consume queue + commit log) and,
below what retention deleted, the tier. ``QueueSource`` is what each answers; ``LocalQueue``
and ``TierQueue`` implement it, and ``strata.store.history`` stitches them (the only place
that decides local-or-tier, as Kafka's ``UnifiedLog`` does over its local and remote logs).

Reads never write: a unit found damaged is reported in the result's ``corrupt`` list, logged,
passed over, and handed to ``UnitRepairs``; the writer's background service re-derives it
from the log (and so does close, before its checkpoint)."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np

from strata.errors import CorruptRecordError, CorruptStoreError
from strata.format.consume_queue import BLANK_SIZE, tag_hash
from strata.format.record_batch import MessageBatch
from strata.format.record_table import GOOD, OTHER
from strata.store import time_search
from strata.store.lifecycle import writer_alive
from strata.store.message import CorruptRecord, GetResult, GetStatus

if TYPE_CHECKING:
    from strata.index.consume_queue import ConsumeQueue
    from strata.store.tier_link import TierHistory

log = logging.getLogger("strata.store.message_store")   # the same logger as before the split

MAX_SCAN_UNITS = 800  # units one get() looks at beyond max_messages (RocketMQ: 16000 B)


_EVERY_ROW = np.arange(0, dtype=np.int64)


def every_row(n: int) -> np.ndarray:
    """``np.arange(n)`` (int64, read-only), sliced from one array kept for the purpose."""
    global _EVERY_ROW
    if len(_EVERY_ROW) < n:
        _EVERY_ROW = np.arange(max(n, 2 * len(_EVERY_ROW), 1024), dtype=np.int64)
        _EVERY_ROW.flags.writeable = False
    return _EVERY_ROW[:n]


class QueueSource(Protocol):
    """One source of a queue's messages, over the offsets [min_offset, max_offset)."""

    def min_offset(self) -> int:
        """The first queue offset this source holds."""

    def max_offset(self) -> int:
        """One past the last queue offset this source holds."""

    def earliest_time(self) -> int:
        """Store time (ms) of the first message this source holds; -1 if none."""

    def offset_for_time(self, timestamp_ms: int, boundary: str) -> int:
        """``MessageStore.offset_for_time`` over this source's offsets."""

    def get(self, offset: int, max_messages: int, wanted: frozenset[str] | None,
            mn: int, mx: int) -> GetResult:
        """Up to ``max_messages`` messages from ``offset`` (in range for this source), of
        the tags ``wanted`` (None: any); ``mn``/``mx`` are the whole queue's bounds, which
        the result reports."""


class LocalQueue:
    """The queue as the local consume queue and commit log hold it."""

    __slots__ = ("store", "topic", "queue_id", "cq")

    def __init__(self, store, topic: str, queue_id: int, cq: "ConsumeQueue") -> None:
        self.store, self.topic, self.queue_id, self.cq = store, topic, queue_id, cq

    def min_offset(self) -> int:
        return self.cq.min_offset()

    def max_offset(self) -> int:
        return self.cq.max_offset()

    def time_at(self, offset: int) -> int:
        """Store time (ms) of the message at queue ``offset``; -1 if its record is gone."""
        return self.store._store_time_at(self.cq.unit(offset)[0])

    def earliest_time(self) -> int:
        cq = self.cq
        if cq.max_offset() <= cq.min_offset():
            return -1
        return self.time_at(cq.min_offset())

    def offset_for_time(self, timestamp_ms: int, boundary: str) -> int:
        lo, hi = self.cq.min_offset(), self.cq.max_offset()
        if lo >= hi:
            return lo
        return time_search.offset_for_time(lo, hi, self.time_at, timestamp_ms, boundary)

    def get(self, offset: int, max_messages: int, wanted: frozenset[str] | None,
            mn: int, mx: int) -> GetResult:
        store, topic, queue_id, cq = self.store, self.topic, self.queue_id, self.cq
        try:
            units = cq.read_units(offset, max(max_messages, MAX_SCAN_UNITS) if wanted
                                  else max_messages)
        except ValueError:  # retention deleted that file just now: answer from the new state
            return store.get(topic, queue_id, offset, max_messages, tags=wanted)
        if len(units) == 0:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, [], cq.file_end_unit(offset), mn, mx)
        limit = store.confirmed_offset()
        verify = store.config.verify_crc_on_read
        if wanted is None and units["size"].max() != BLANK_SIZE:
            picked = every_row(len(units))   # the usual case: no blank unit, no tag wanted
        else:
            candidates = units["size"] != BLANK_SIZE
            if wanted is not None:
                candidates &= np.isin(units["tag"], [tag_hash(t) for t in wanted])
            picked = np.flatnonzero(candidates)
        phys = np.ascontiguousarray(units["offset"])   # (indexing the packed field view: ~5x slower)
        nxt = offset + len(units)
        first = None
        if wanted is None and len(picked) == len(phys):   # the usual answer: every unit's
            # own record, intact (its batch answers as it is: no closure, no list, no len)
            first = store.log.read_offsets(phys, limit, verify_crc=verify, topic=topic,
                                           queue_id=queue_id, queue_offsets=offset + picked)
            if first.all_good:   # (len(units) > 0 messages: FOUND)
                return GetResult(GetStatus.FOUND, first.messages, nxt, mn, mx)

        corrupt: list[CorruptRecord] = []

        def read(rows: np.ndarray, found=None) -> tuple[Sequence, int | None]:
            """The messages of units ``rows``: a MessageBatch when every unit leads to its
            own intact record (the usual case), else a list with None for a damaged record
            (which goes to ``corrupt``); a read-only opener's are cut before a unit the
            writer is still copying, and then the offset to go on from comes too."""
            # One compiled pass checks each record and that it is the unit's own message
            # (topic, queue, queue offset): GOOD, OTHER (another record), or no record.
            if found is None:
                found = store.log.read_offsets(
                    phys if len(rows) == len(phys) else phys[rows], limit, verify_crc=verify,
                    topic=topic, queue_id=queue_id, queue_offsets=offset + rows)
            if found.all_good:
                return found.messages, None
            damaged = found.damaged
            msgs = found.as_list()
            leads = found.status == GOOD
            present = found.status <= OTHER   # an intact record is there (maybe another's)
            stop = None
            if store.readonly:  # over the records that are not damaged
                good = [j for j in range(len(rows)) if j not in damaged] if damaged else None
                stop = self.first_unit_in_flight(
                    offset, rows if good is None else rows[good], phys,
                    present if good is None else present[good], limit,
                    leads if good is None else leads[good])
                if stop is not None and good is not None:
                    stop = good[stop]
            else:  # the writer: a unit damaged on disk is passed over and reported (never
                #    is a record another unit's served); its repair is the writer's, later
                for j in np.flatnonzero(~leads).tolist():
                    q, at = offset + int(rows[j]), int(phys[rows[j]])
                    if j in damaged or (not present[j] and at < store.log.min_offset()):
                        continue    # (deleted by retention since the units were read)
                    msgs[j] = None
                    damaged[j] = ("its consume-queue unit leads to another record (the "
                                  "writer re-derives it from the log; or repair with "
                                  "`strata spark rebuild-index`)")
                    store.repairs.request(topic, queue_id, q)
            for j, why in damaged.items():
                if stop is None or j < stop:
                    corrupt.append(CorruptRecord(offset + int(rows[j]), int(phys[rows[j]]),
                                                 why))
            return (msgs, None) if stop is None else (msgs[:stop], offset + int(rows[stop]))

        if wanted is None:  # at most max_messages units were read
            msgs, cut = read(picked, first)
            nxt = nxt if cut is None else cut
            out = msgs if type(msgs) is MessageBatch else [m for m in msgs if m is not None]
        else:  # decode candidates a chunk at a time; the real tag decides (hashes collide)
            out = []
            step = max(max_messages, 64)
            for lo in range(0, len(picked), step):
                part = picked[lo:lo + step]
                msgs, cut = read(part)
                nxt = nxt if cut is None else cut
                for i, m in zip(part.tolist(), msgs):
                    if m is not None and m.tags in wanted:
                        out.append(m)
                        if len(out) >= max_messages:
                            nxt = offset + i + 1
                            break
                if len(out) >= max_messages or len(msgs) < len(part):
                    break
        status = GetStatus.FOUND if out else GetStatus.NO_MATCHED_MESSAGE
        if not corrupt:
            return GetResult(status, out, nxt, mn, mx)
        return GetResult(status, out, nxt, mn, mx, passed_over(store.path, topic, queue_id,
                                                               corrupt, nxt))

    def first_unit_in_flight(self, offset: int, rows: np.ndarray, phys: np.ndarray,
                             present: np.ndarray, limit: int,
                             leads: np.ndarray) -> int | None:
        """Read-only openers: the index among units ``rows`` (their positions after
        ``offset``; records read up to commit-log offset ``limit``, ``present`` where an
        intact record was found) of the first whose consume-queue unit does not lead to its
        own record (``leads`` False); None if all do.

        The writer copies a run of units with one memcpy, whose stores can land in any
        order, so for an instant a unit can show its size while its commit-log offset is
        still zero or half written: it would lead to another queue's record, an older record
        of this queue, or none. While a writer holds the store, such a unit is one it is
        still copying, and the answer stops before it (the next get reads it complete), as
        it does before a unit whose record lies past what this opener may read yet. With no
        writer it can only be damage, and is reported instead of answered with the wrong
        message.
        """
        store = self.store
        for j in np.flatnonzero(~leads).tolist():
            i = int(rows[j])
            at = int(phys[i])
            if not present[j]:
                if at < store._readonly_min_offset():   # deleted by retention since
                    continue
                if at >= limit:
                    return j
            if writer_alive(store.path):
                return j
            raise CorruptRecordError(
                f"{self.topic}/{self.queue_id}: the consume-queue unit of offset {offset + i} "
                f"leads to commit-log offset {at}, which does not hold that message (repair "
                "with `strata spark rebuild-index`)", at)
        return None


class TierQueue:
    """The queue as the tier holds it (what retention deleted locally, once uploaded)."""

    __slots__ = ("history", "topic", "queue_id", "store_path")

    def __init__(self, history: "TierHistory", topic: str, queue_id: int, store_path) -> None:
        self.history, self.topic, self.queue_id = history, topic, queue_id
        self.store_path = store_path

    def holds(self) -> bool:
        return self.history.holds(self.topic, self.queue_id)

    def min_offset(self) -> int:
        return self.history.min_offset(self.topic, self.queue_id)

    def max_offset(self) -> int:
        return self.history.max_offset(self.topic, self.queue_id)

    def earliest_time(self) -> int:
        return self.history.earliest_time(self.topic, self.queue_id)

    def offset_for_time(self, timestamp_ms: int, boundary: str) -> int:
        return self.history.offset_for_time(self.topic, self.queue_id, timestamp_ms, boundary)

    def get(self, offset: int, max_messages: int, wanted: frozenset[str] | None,
            mn: int, mx: int) -> GetResult:
        """``get`` below the queue's first local offset ``mn``: the tier answers. A damaged
        tier record is passed over and listed in ``corrupt`` (naming the tier object)."""
        h, topic, queue_id, local_min = self.history, self.topic, self.queue_id, mn
        tmin, tmax = h.min_offset(topic, queue_id), h.max_offset(topic, queue_id)
        if offset < tmin:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, [], tmin, tmin, mx)
        held = h.next_held(topic, queue_id, offset)
        if offset >= tmax or held > offset:   # deleted locally before it was uploaded:
            nxt = held if offset < held < local_min else local_min  # go on where data is
            return GetResult(GetStatus.OFFSET_FOUND_NULL, [], nxt, tmin, mx)
        want = min(max(max_messages, MAX_SCAN_UNITS) if wanted else max_messages,
                   tmax - offset)
        hashes = None if wanted is None else np.array([tag_hash(t) for t in wanted], np.int64)
        corrupt: list[CorruptRecord] = []
        try:   # one compiled pass over the cached chunk; a damaged record comes back named
            got = h.read(topic, queue_id, offset, want, hashes)
            msgs, nxt = got.messages, got.next_offset
            corrupt = [CorruptRecord(q, -1, why) for q, why in got.damaged]
        except CorruptStoreError:   # an object damaged as a whole: offset by offset
            msgs, nxt = [], offset
            for q in range(offset, offset + want):
                try:
                    one = h.read(topic, queue_id, q, 1, hashes)
                except CorruptStoreError as exc:
                    corrupt.append(CorruptRecord(q, -1, str(exc)))
                    nxt = q + 1
                    continue
                if one.next_offset == q:   # the end of what the tier holds there
                    break
                corrupt += [CorruptRecord(o, -1, why) for o, why in one.damaged]
                msgs += one.messages
                nxt = one.next_offset
        if wanted is not None:
            out = []
            for m in msgs:
                if m.tags in wanted:
                    out.append(m)
                    if len(out) >= max_messages:
                        nxt = m.queue_offset + 1
                        break
            msgs = out
        status = GetStatus.FOUND if msgs else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, msgs, nxt, tmin, mx,
                         passed_over(self.store_path, topic, queue_id, corrupt, nxt))


def passed_over(store_path, topic: str, queue_id: int, corrupt: list[CorruptRecord],
                nxt: int) -> tuple[CorruptRecord, ...]:
    """The damaged records a get passed over (those before ``nxt``), each logged."""
    passed = tuple(sorted(c for c in corrupt if c.queue_offset < nxt))
    for c in passed:
        log.error("store %s: get %s/%d passed over offset %d: %s", store_path, topic,
                  queue_id, c.queue_offset, c.error())
    return passed
