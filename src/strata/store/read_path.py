"""The store's read path: get, get_columns, query, time and offset lookups, scan, read_at,
get_by_id, and the tier fallback below the local files (functions taking the MessageStore)."""
from __future__ import annotations

import fcntl
import logging
import os
from itertools import chain
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from strata.errors import (CorruptRecordError, CorruptStoreError, IndexRebuildingError,
                           InvalidInputError)
from strata.files.lock import LOCK_NAME
from strata.format import record as rec
from strata.format.consume_queue import BLANK_SIZE, tag_hash
from strata.format.record_batch import MessageBatch
from strata.format.record_table import GOOD, OTHER
from strata.index import key_index_rebuild
from strata.index.queue_recovery import rederive_unit
from strata.store import arrow_read, tier_link
from strata.store.message import CorruptRecord, GetResult, GetStatus

log = logging.getLogger("strata.store.message_store")   # the same logger as before the split

MAX_SCAN_UNITS = 800  # units one get() looks at beyond max_messages (RocketMQ: 16000 B)


def writer_alive(directory: Path) -> bool:
    """True if some process holds the store's writer lock right now."""
    path = Path(directory) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops our shared lock, if we got one
    return False


def read_at(store, commitlog_offset: int) -> rec.StoredMessage | None:
    """The message whose record starts at ``commitlog_offset``, or None; CorruptRecordError
    (naming the offset) if the record there is damaged."""
    store._check_open()
    if not isinstance(commitlog_offset, int) or isinstance(commitlog_offset, bool):
        raise InvalidInputError(f"commitlog_offset must be an int, got {commitlog_offset!r}")
    return store._read_record(commitlog_offset)

def read_record(store, offset: int) -> rec.StoredMessage | None:
    """The record at commit-log ``offset``: from the tier where retention deleted it."""
    if offset < store._local_min_phys():
        h = store._tier_history()
        if h is not None:
            return h.read_at(offset)
    return store.log.read(offset, store.confirmed_offset(),
                         verify_crc=store.config.verify_crc_on_read, strict=True)

def get_by_id(store, msg_id: str) -> rec.StoredMessage | None:
    """The message with this offset message id, or None; CorruptRecordError (naming the
    commit-log offset) if the record there is damaged."""
    store._check_open()
    _host, offset = rec.parse_msg_id(msg_id)
    m = store._read_record(offset)
    if m is None or m.msg_id != msg_id.upper():
        return None
    return m

def scan(store, from_offset: int = 0, *, to_offset: int | None = None,
         verify_crc: bool = False,
         on_damage: Callable[[int, str], None] | None = None
         ) -> Iterator[rec.StoredMessage]:
    """Every message from ``from_offset`` on, in log order. A damaged record (one that
    fails its checks or cannot be decoded) is skipped with a logged error naming its
    offset (or handed to ``on_damage(offset, error)`` instead), and the scan goes on at the
    next good record. CRCs are checked with ``verify_crc`` or the store's
    ``verify_crc_on_read``."""
    store._check_open()
    if not isinstance(from_offset, int) or isinstance(from_offset, bool):
        raise InvalidInputError(f"from_offset must be an int, got {from_offset!r}")
    if to_offset is not None and (not isinstance(to_offset, int) or
                                  isinstance(to_offset, bool)):
        raise InvalidInputError(f"to_offset must be an int or None, got {to_offset!r}")
    if not isinstance(verify_crc, bool):
        raise InvalidInputError(f"verify_crc must be a bool, got {verify_crc!r}")
    if on_damage is not None and not callable(on_damage):
        raise InvalidInputError(f"on_damage must be callable, got {on_damage!r}")
    # the parts' messages chained in C (a generator re-yielding each costs ~70 ns)
    return chain.from_iterable(store._scan_parts(from_offset, to_offset, verify_crc,
                                                on_damage))

def scan_parts(store, from_offset: int, to_offset: int | None, verify_crc: bool,
                on_damage: Callable[[int, str], None] | None) -> Iterator[Iterable]:
    """What ``scan`` yields, a part at a time: the tier's history, then the local log's
    batches (the limit is taken when the scan starts)."""
    limit = store.confirmed_offset()
    stop = to_offset if to_offset is not None and to_offset < limit else None
    low = store._local_min_phys()
    if from_offset < low and store.config.tier_url is not None:
        h = store._tier_history()   # what retention deleted, as far as the tier holds it
        if h is not None:
            yield h.scan(from_offset, min(low, limit if stop is None else stop))
    # A damaged record is skipped with a logged error (README "Durability").
    yield from store.log.scan_batches(from_offset, limit,
                                     verify_crc=verify_crc or store.config.verify_crc_on_read,
                                     on_damage=on_damage, stop=stop)

def queue(store, topic: str, queue_id: int):
    if not isinstance(queue_id, int) or isinstance(queue_id, bool):
        raise InvalidInputError(f"queue_id must be an int, got {queue_id!r}")
    rec.encode_topic(topic)
    if store.readonly:
        store.topic_table.reload()
    n = store.topic_table.queues.get(topic)
    if n is None or not 0 <= queue_id < n:
        return None, False
    cq = store.queues.get(topic, queue_id)
    if store.readonly and cq is not None:
        # The writer's retention moved the log's minimum: correct this view's min offset too.
        cq.correct_min_offset(store._readonly_min_offset())
    return cq, True

def readonly_min_offset(store) -> int:
    """Read-only openers: the log's minimum as the writer last published it."""
    mn = store.log.min_offset()
    if store._live_writer:
        mn = max(mn, store.state.read()[3])
    return mn

def min_offset(store, topic: str, queue_id: int) -> int:
    """The smallest queue offset still stored (0 for an unknown or empty queue)."""
    store._check_open()
    cq, _ = store._queue(topic, queue_id)
    if cq is None:
        return 0
    mn = cq.min_offset()
    h = store._tier_older(topic, queue_id, mn)
    return mn if h is None else h.min_offset(topic, queue_id)

def max_offset(store, topic: str, queue_id: int) -> int:
    """The next queue offset (= number of messages ever dispatched to the queue)."""
    store._check_open()
    cq, _ = store._queue(topic, queue_id)
    return cq.max_offset() if cq is not None else 0

def store_time_at(store, phys: int) -> int:
    try:
        ts = store.log.store_time_at(phys)
    except ValueError:
        return -1
    return -1 if ts is None else ts

def earliest_time(store, topic: str, queue_id: int) -> int:
    """Store time (ms) of the oldest message still in the queue; -1 if none."""
    store._check_open()
    cq, _ = store._queue(topic, queue_id)
    if cq is None:
        return -1
    h = store._tier_older(topic, queue_id, cq.min_offset())
    if h is not None:
        return h.earliest_time(topic, queue_id)
    if cq.max_offset() <= cq.min_offset():
        return -1
    off, _size, _t = cq.unit(cq.min_offset())
    return store._store_time_at(off)

def tier_history(store) -> tier_link.TierHistory | None:
    """The tier's history of this store (None without a tier); a read-only opener makes
    its own, on first use, from the tier the store remembers."""
    if store._local_only:
        return None
    if store.tier is not None:
        return store.tier.history
    if not store.readonly or store.config.tier_url is None:
        return None
    if store._history is None:
        factory = tier_link.history_factory()
        if factory is None:
            return None
        store._history = factory(store)
    return store._history

def local_min_phys(store) -> int:
    """The first commit-log offset still in the local files."""
    return store._readonly_min_offset() if store.readonly else store.log.min_offset()

def tier_older(store, topic: str, queue_id: int,
                local_min: int) -> tier_link.TierHistory | None:
    """The tier's history if it holds messages of the queue below ``local_min`` (the
    queue's first local offset), else None."""
    if local_min <= 0 or store.config.tier_url is None or store._local_only:
        return None
    h = store._tier_history()
    if h is None or not h.holds(topic, queue_id) or \
            h.min_offset(topic, queue_id) >= local_min:
        return None
    return h

def get_from_tier(store, h: tier_link.TierHistory, topic: str, queue_id: int,
                   offset: int, max_messages: int, wanted: frozenset[str] | None,
                   local_min: int, mx: int) -> GetResult:
    """``get`` below the queue's first local offset: the tier answers. A damaged tier
    record is passed over and listed in ``corrupt`` (naming the tier object)."""
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
    passed = tuple(c for c in corrupt if c.queue_offset < nxt)
    for c in passed:
        log.error("store %s: get %s/%d passed over offset %d: %s", store.path, topic,
                  queue_id, c.queue_offset, c.error())
    status = GetStatus.FOUND if msgs else GetStatus.NO_MATCHED_MESSAGE
    return GetResult(status, msgs, nxt, tmin, mx, passed)

def parse_tags(tags) -> frozenset[str] | None:
    if tags is None:
        return None
    if isinstance(tags, str):
        parts = [t.strip() for t in tags.split("||")]
    elif isinstance(tags, (list, tuple, set, frozenset)):
        parts = [t.strip() if isinstance(t, str) else t for t in tags]
    else:
        raise InvalidInputError(f"tags must be a str or a list of str, got {tags!r}")
    if any(not isinstance(t, str) for t in parts):
        raise InvalidInputError(f"tags must be strings, got {tags!r}")
    parts = [t for t in parts if t]
    if not parts or "*" in parts:
        return None
    return frozenset(parts)

def get(store, topic: str, queue_id: int, offset: int, max_messages: int = 32, *,
        tags=None) -> GetResult:
    """Up to ``max_messages`` messages of a queue from ``offset``, optionally by tag."""
    store._check_open()
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise InvalidInputError(f"offset must be an int, got {offset!r}")
    if not isinstance(max_messages, int) or isinstance(max_messages, bool) or \
            max_messages < 1:
        raise InvalidInputError(f"max_messages must be a positive int, got {max_messages!r}")
    wanted = store._parse_tags(tags)
    cq, exists = store._queue(topic, queue_id)
    if cq is None:
        status = GetStatus.NO_MESSAGE_IN_QUEUE if exists else GetStatus.NO_MATCHED_LOGIC_QUEUE
        return GetResult(status, [], 0, 0, 0)
    mn, mx = cq.min_offset(), cq.max_offset()
    if mx == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, mn, mx)
    h = store._tier_older(topic, queue_id, mn)
    if h is not None:   # retention deleted the oldest local files; the tier holds them
        if offset < mn:
            return store._get_from_tier(h, topic, queue_id, offset, max_messages, wanted,
                                       mn, mx)
        mn = h.min_offset(topic, queue_id)
    if offset < mn:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, [], mn, mn, mx)
    if offset == mx:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, mn, mx)
    if offset > mx:
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, [], mx, mn, mx)
    try:
        units = cq.read_units(offset, max(max_messages, MAX_SCAN_UNITS) if wanted
                              else max_messages)
    except ValueError:  # retention deleted that file just now: answer from the new state
        return store.get(topic, queue_id, offset, max_messages, tags=tags)
    if len(units) == 0:
        return GetResult(GetStatus.OFFSET_FOUND_NULL, [], cq.file_end_unit(offset), mn, mx)
    limit = store.confirmed_offset()
    verify = store.config.verify_crc_on_read
    candidates = units["size"] != BLANK_SIZE
    if wanted is not None:
        candidates &= np.isin(units["tag"], [tag_hash(t) for t in wanted])
    picked = np.flatnonzero(candidates)
    phys = np.ascontiguousarray(units["offset"])   # (indexing the packed field view: ~5x slower)
    nxt = offset + len(units)

    corrupt: list[CorruptRecord] = []

    def read(rows: np.ndarray) -> tuple[Sequence, int | None]:
        """The messages of units ``rows``: a MessageBatch when every unit leads to its
        own intact record (the usual case), else a list with None for a damaged record
        (which goes to ``corrupt``); a read-only opener's are cut before a unit the
        writer is still copying, and then the offset to go on from comes too."""
        # One compiled pass checks each record and that it is the unit's own message
        # (topic, queue, queue offset): GOOD, OTHER (another record), or no record.
        found = store.log.read_offsets(phys[rows], limit, verify_crc=verify, topic=topic,
                                      queue_id=queue_id, queue_offsets=offset + rows)
        if found.all_good:
            return found.messages, None
        damaged = found.damaged
        msgs = found.as_list()
        leads = found.status == GOOD
        present = found.status <= OTHER   # an intact record is there (maybe another's)
        stop = None
        if store.readonly:  # over the records that are not damaged
            good = [j for j in range(len(rows)) if j not in damaged] if damaged else None
            stop = store._first_unit_in_flight(
                topic, queue_id, offset, rows if good is None else rows[good], phys,
                present if good is None else present[good], limit,
                leads if good is None else leads[good])
            if stop is not None and good is not None:
                stop = good[stop]
        else:  # the writer: a unit damaged on disk is re-derived from the log, or passed
            #        over; never is a record another unit's served
            for j in np.flatnonzero(~leads).tolist():
                q, at = offset + int(rows[j]), int(phys[rows[j]])
                if j in damaged or (not present[j] and at < store.log.min_offset()):
                    continue    # (deleted by retention since the units were read)
                if rederive_unit(cq, store.log, q, limit):
                    msgs[j] = store.log.read(cq.unit(q)[0], limit, verify_crc=verify)
                    log.warning("store %s: %s/%d offset %d: its consume-queue unit led to "
                                "commit-log offset %d, not to its record; rewritten from "
                                "the log", store.path, topic, queue_id, q, at)
                    if msgs[j] is not None:
                        continue
                msgs[j] = None
                damaged[j] = ("its consume-queue unit leads to another record (repair "
                              "with `strata spark rebuild-index`)")
        for j, why in damaged.items():
            if stop is None or j < stop:
                corrupt.append(CorruptRecord(offset + int(rows[j]), int(phys[rows[j]]), why))
        return (msgs, None) if stop is None else (msgs[:stop], offset + int(rows[stop]))

    if wanted is None:  # at most max_messages units were read
        msgs, cut = read(picked)
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
    passed = tuple(sorted(c for c in corrupt if c.queue_offset < nxt))
    for c in passed:
        log.error("store %s: get %s/%d passed over offset %d: %s", store.path, topic,
                  queue_id, c.queue_offset, c.error())
    return GetResult(status, out, nxt, mn, mx, passed)

def get_columns(store, topic: str, queue_id: int, offset: int, max_messages: int = 1024
                ) -> arrow_read.ColumnsResult:
    """``get`` for consumers that want arrays: up to ``max_messages`` messages of a queue
    from ``offset`` as one Arrow record batch (``strata.store.arrow_read.schema()``:
    queue and commit-log offsets, store and born timestamps, body, keys, the encoded
    properties), with ``get``'s status and offsets. Each record is checked as ``get``
    checks it (CRC32C with ``verify_crc_on_read``) and its body and properties are copied
    once, in compiled code, into the buffers the Arrow arrays wrap. Records ``get`` would
    pass over as damaged are left out the same way (that case, and reads from a tier, go
    through ``get``'s messages). Needs pyarrow."""
    store._check_open()
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise InvalidInputError(f"offset must be an int, got {offset!r}")
    if not isinstance(max_messages, int) or isinstance(max_messages, bool) or \
            max_messages < 1:
        raise InvalidInputError(f"max_messages must be a positive int, got {max_messages!r}")
    arrow_read.pyarrow()
    cq, _exists = store._queue(topic, queue_id)
    read = None
    if cq is not None and store._tier_older(topic, queue_id, cq.min_offset()) is None:
        mn, mx = cq.min_offset(), cq.max_offset()
        if mn <= offset < mx:
            try:
                units = cq.read_units(offset, max_messages)
            except ValueError:   # retention deleted that file just now
                units = None
            if units is not None and len(units) and \
                    not (units["size"] == BLANK_SIZE).any():
                read = store.log.read_columns(
                    units["offset"], store.confirmed_offset(),
                    verify_crc=store.config.verify_crc_on_read, topic=topic,
                    queue_id=queue_id,
                    queue_offsets=offset + np.arange(len(units), dtype=np.int64))
    if read is not None:
        batch = arrow_read.arrow_batch(read)
        if batch is not None:
            return arrow_read.ColumnsResult(GetStatus.FOUND, batch, offset + len(units),
                                            mn, mx)
    r = store.get(topic, queue_id, offset, max_messages)
    batch = arrow_read.batch_of_messages(r.messages) if r.messages else \
        arrow_read.empty_batch()
    return arrow_read.ColumnsResult(r.status, batch, r.next_offset, r.min_offset,
                                    r.max_offset)

def first_unit_in_flight(store, topic: str, queue_id: int, offset: int, rows: np.ndarray,
                          phys: np.ndarray, present: np.ndarray, limit: int,
                          leads: np.ndarray) -> int | None:
    """Read-only openers: the index among units ``rows`` (their positions after
    ``offset``; records read up to commit-log offset ``limit``, ``present`` where an
    intact record was found) of the first whose consume-queue unit does not lead to its
    own record (``leads`` False); None if all do.

    The writer copies a run of units with one memcpy, whose stores can land in any order,
    so for an instant a unit can show its size while its commit-log offset is still zero
    or half written: it would lead to another queue's record, an older record of this
    queue, or none. While a writer holds the store, such a unit is one it is still
    copying, and the answer stops before it (the next get reads it complete), as it does
    before a unit whose record lies past what this opener may read yet. With no writer it
    can only be damage, and is reported instead of answered with the wrong message.
    """
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
            f"{topic}/{queue_id}: the consume-queue unit of offset {offset + i} leads to "
            f"commit-log offset {at}, which does not hold that message (repair with "
            "`strata spark rebuild-index`)", at)
    return None

def query(store, topic: str, key: str, *, begin_ms: int = 0, end_ms: int | None = None,
          max_results: int = 64) -> list[rec.StoredMessage]:
    """Messages of ``topic`` with key (or unique key) ``key`` stored in [begin, end] ms,
    newest first. Only exact topic and key matches are returned; a damaged record is
    passed over (and logged), never returned."""
    store._check_open()
    rec.encode_topic(topic)
    if not isinstance(key, str) or not key:
        raise InvalidInputError(f"key must be a non-empty str, got {key!r}")
    if end_ms is None:
        end_ms = 2**62
    for name, ms in (("begin_ms", begin_ms), ("end_ms", end_ms)):
        if not isinstance(ms, int) or isinstance(ms, bool):
            raise InvalidInputError(f"{name} must be ms since the epoch (an int), got {ms!r}")
    if not isinstance(max_results, int) or isinstance(max_results, bool) or max_results < 1:
        raise InvalidInputError(f"max_results must be a positive int, got {max_results!r}")
    if store.readonly:
        store.topic_table.reload()
    if topic not in store.topic_table.queues:
        return []
    if store._index_rebuild is not None and store._index_rebuild.active:
        store._index_rebuild.check_query()   # never an answer from a partial index
    elif store.readonly and key_index_rebuild.marker_says_rebuilding(store.key_index.directory):
        raise IndexRebuildingError(
            f"the key index of {store.path} is being rebuilt from the commit log by its "
            "writer (or was, when the writer stopped: its next open resumes it); query "
            "again once it is done")
    since = store.topic_table.since.get(topic, 0)
    limit = store.confirmed_offset()
    out: list[rec.StoredMessage] = []
    seen: set[int] = set()
    for phys in store.key_index.candidates(f"{topic}#{key}", begin_ms, end_ms):
        if phys in seen or phys < since:
            continue
        seen.add(phys)
        try:
            m = store.log.read(phys, limit, verify_crc=store.config.verify_crc_on_read,
                              strict=True)
        except ValueError:
            m = None
        except CorruptRecordError as exc:   # never served; the other candidates are
            log.error("store %s: query %s#%s passed over a candidate: %s", store.path,
                      topic, key, exc)
            continue
        if m is None or m.topic != topic or not begin_ms <= m.store_timestamp <= end_ms:
            continue
        if key not in m.keys and m.properties.get(rec.PROP_UNIQ_KEY) != key:
            continue
        out.append(m)
        if len(out) >= max_results:
            break
    low = store._local_min_phys()
    h = store._tier_history() if len(out) < max_results and low > 0 else None
    if h is not None:   # older matches: the tier's (what it holds above ``low`` is here)
        for m in h.query(topic, key, begin_ms=begin_ms, end_ms=end_ms,
                         max_results=max_results + len(out), below=low):
            if since <= m.commitlog_offset < low:
                out.append(m)
                if len(out) >= max_results:
                    break
    return out

def offset_for_time(store, topic: str, queue_id: int, timestamp_ms: int,
                    boundary: str = "lower") -> int:
    """Queue offset of a store time: ``lower`` = first message at or after it, ``upper`` =
    last message at or before it (binary search over store time)."""
    store._check_open()
    if boundary not in ("lower", "upper"):
        raise InvalidInputError(f'boundary must be "lower" or "upper", got {boundary!r}')
    if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
        raise InvalidInputError(f"timestamp_ms must be an int, got {timestamp_ms!r}")
    cq, _ = store._queue(topic, queue_id)
    if cq is None:
        return 0
    lo, hi = cq.min_offset(), cq.max_offset()
    h = store._tier_older(topic, queue_id, lo)
    if h is not None:   # the tier answers times before the local files' first message
        if boundary == "lower":
            r = h.offset_for_time(topic, queue_id, timestamp_ms, "lower")
            if r < min(h.max_offset(topic, queue_id), lo):
                return r
        elif lo >= hi or timestamp_ms < store._store_time_at(cq.unit(lo)[0]):
            return h.offset_for_time(topic, queue_id, timestamp_ms, "upper")
    if lo >= hi:
        return lo
    first = lo
    ts_of = store._store_time_at
    if boundary == "lower":   # first unit with time >= ts
        while lo < hi:
            mid = (lo + hi) // 2
            if ts_of(cq.unit(mid)[0]) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo
    while lo < hi:            # first unit with time > ts, minus one
        mid = (lo + hi) // 2
        if ts_of(cq.unit(mid)[0]) <= timestamp_ms:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1 if lo > first else first  # before the first message: the first offset
