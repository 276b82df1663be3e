"""The store's read path: get, get_columns, query, time and offset lookups, scan, read_at,
get_by_id (functions taking the MessageStore, which it binds as its methods). Arguments are
checked here; the answers come from ``store.history`` (``strata.store.history``), which alone
knows whether the local files or the tier hold a message. Reads never write."""
from __future__ import annotations

import logging
from itertools import chain
from typing import Callable, Iterator

from strata.errors import CorruptRecordError, IndexRebuildingError, InvalidInputError
from strata.format import record as rec
from strata.format.consume_queue import BLANK_SIZE, UNIT_DTYPE
from strata.index import key_index_rebuild
from strata.store import arrow_read, time_search
from strata.store.lifecycle import writer_alive  # noqa: F401 (re-exported)
from strata.store.message import GetResult, GetStatus
from strata.store.queue_source import MAX_SCAN_UNITS, every_row  # noqa: F401 (re-exported)

log = logging.getLogger("strata.store.message_store")   # the same logger as before the split


def read_at(store, commitlog_offset: int) -> rec.StoredMessage | None:
    """The message whose record starts at ``commitlog_offset``, or None; CorruptRecordError
    (naming the offset) if the record there is damaged."""
    store._check_open()
    if not isinstance(commitlog_offset, int) or isinstance(commitlog_offset, bool):
        raise InvalidInputError(f"commitlog_offset must be an int, got {commitlog_offset!r}")
    return store.history.read_at(commitlog_offset)

def get_by_id(store, msg_id: str) -> rec.StoredMessage | None:
    """The message with this offset message id, or None; CorruptRecordError (naming the
    commit-log offset) if the record there is damaged."""
    store._check_open()
    _host, offset = rec.parse_msg_id(msg_id)
    m = store.history.read_at(offset)
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
    return chain.from_iterable(store.history.scan_parts(from_offset, to_offset, verify_crc,
                                                      on_damage))

def queue(store, topic: str, queue_id: int):
    if not isinstance(queue_id, int) or isinstance(queue_id, bool):
        raise InvalidInputError(f"queue_id must be an int, got {queue_id!r}")
    if store.readonly:
        store.topic_table.reload()
    queues = store.topic_table.queues
    n = queues.get(topic) if type(topic) is str else None   # a topic's name: valid
    if n is None:   # else the name is checked (InvalidTopicError saying what is wrong)
        rec.encode_topic(topic)
        n = queues.get(topic)
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
    return 0 if cq is None else store.history.queue(topic, queue_id, cq).min_offset()

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
    return -1 if cq is None else store.history.queue(topic, queue_id, cq).earliest_time()

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
    wanted = parse_tags(tags)
    cq, exists = store._queue(topic, queue_id)
    if cq is None:
        status = GetStatus.NO_MESSAGE_IN_QUEUE if exists else GetStatus.NO_MATCHED_LOGIC_QUEUE
        return GetResult(status, [], 0, 0, 0)
    return store.history.queue(topic, queue_id, cq).get(offset, max_messages, wanted)

def get_columns(store, topic: str, queue_id: int, offset: int, max_messages: int = 1024, *,
                views: bool = True) -> arrow_read.ColumnsResult:
    """``get`` for consumers that want arrays: up to ``max_messages`` messages of a queue
    from ``offset`` as one Arrow record batch (``strata.store.arrow_read.schema(views)``:
    queue and commit-log offsets, store and born timestamps, body, keys, the encoded
    properties), with ``get``'s status and offsets. Each record is checked as ``get``
    checks it (CRC32C with ``verify_crc_on_read``). With ``views`` (the default) the body
    and properties columns are ``binary_view`` arrays, the units read in the consume-queue
    file's map and the records checked in one compiled call: over the segment's map itself
    when the records lie back to back (zero-copy: the arrays keep the map alive, past a
    close or the segment's deletion), else over ONE copy of them (``arrow_read.units_batch``);
    ``views=False`` gives ``binary`` arrays (each body copied once more, into a packed
    buffer) for consumers and Arrow functions that do not take views. Records ``get`` would
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
    if cq is not None and store.history.all_local(topic, queue_id, cq):
        mn, mx = cq.min_offset(), cq.max_offset()   # the local files alone hold the queue
        if mn <= offset < mx:
            verify, limit = store.config.verify_crc_on_read, store.confirmed_offset()
            span = cq.unit_span(offset, max_messages)
            n = 0 if span is None else span[2]
            seen = None
            if n and views:   # the units read where they lie, the records as views
                seen = arrow_read.units_batch(store.log, span[0], span[1], n, limit,
                                              verify_crc=verify, topic=topic,
                                              queue_id=queue_id, first_offset=offset)
                if seen is not None and seen is not True and seen is not False:
                    return arrow_read.ColumnsResult(GetStatus.FOUND, seen, offset + n, mn, mx)
            if n and seen is not False:   # binary columns, or views cannot: read_columns
                try:
                    units = cq.read_unit_bytes(offset, n).view(UNIT_DTYPE)
                except ValueError:   # retention deleted that file just now
                    units = None
                if units is not None and len(units) and units["size"].max() != BLANK_SIZE:
                    n = len(units)
                    read = store.log.read_columns(
                        units["offset"], limit, verify_crc=verify, topic=topic,
                        queue_id=queue_id, queue_offsets=offset + every_row(n))
    if read is not None:
        batch = arrow_read.arrow_batch(read, views)
        if batch is not None:
            return arrow_read.ColumnsResult(GetStatus.FOUND, batch, offset + n, mn, mx)
    r = store.get(topic, queue_id, offset, max_messages)
    batch = arrow_read.batch_of_messages(r.messages, views) if r.messages else \
        arrow_read.empty_batch(views)
    return arrow_read.ColumnsResult(r.status, batch, r.next_offset, r.min_offset,
                                    r.max_offset)

_SLACK = 16     # candidates looked up beyond max_results in the one compiled walk (collisions)
_FIRST_MAX = 256   # at most this many from it (its scratch is files x this); then the Python walk


def _key_candidates(index, key: str, begin_ms: int, end_ms: int, limit: int) -> Iterator[int]:
    """The key index's candidates of ``key``, newest first: the first ``limit`` from one
    compiled walk (``KeyIndex.lookup``), then, only if more are asked for and there are
    more, all of them again from the Python walk (the caller skips those it has seen)."""
    first, complete = index.lookup(key, begin_ms, end_ms, limit)
    yield from first
    if not complete:
        yield from index.candidates(key, begin_ms, end_ms)


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
    read_keyed = store.log.read_keyed
    crc = store.config.verify_crc_on_read
    topic_bytes = topic.encode()
    key_bytes = key.encode("utf-8", "surrogatepass")
    out: list[rec.StoredMessage] = []
    seen: set[int] = set()
    for phys in _key_candidates(store.key_index, f"{topic}#{key}", begin_ms, end_ms,
                                min(max_results + _SLACK, _FIRST_MAX)):
        if phys in seen or phys < since:
            continue
        seen.add(phys)
        try:
            m = read_keyed(phys, limit, verify_crc=crc, topic=topic, topic_bytes=topic_bytes,
                           key=key, key_bytes=key_bytes, begin_ms=begin_ms, end_ms=end_ms)
        except ValueError:
            m = None
        except CorruptRecordError as exc:   # never served; the other candidates are
            log.error("store %s: query %s#%s passed over a candidate: %s", store.path,
                      topic, key, exc)
            continue
        if m is None:
            continue
        out.append(m)
        if len(out) >= max_results:
            break
    if len(out) < max_results:   # older matches: the tier's, below the local files
        for m in store.history.query_older(topic, key, begin_ms, end_ms,
                                           max_results + len(out), since):
            out.append(m)
            if len(out) >= max_results:
                break
    return out

def offset_for_time(store, topic: str, queue_id: int, timestamp_ms: int,
                    boundary: str = "lower") -> int:
    """Queue offset of a store time: ``lower`` = first message at or after it, ``upper`` =
    last message at or before it (binary search over store time)."""
    store._check_open()
    if boundary not in time_search.BOUNDARIES:
        raise InvalidInputError(f'boundary must be "lower" or "upper", got {boundary!r}')
    if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
        raise InvalidInputError(f"timestamp_ms must be an int, got {timestamp_ms!r}")
    cq, _ = store._queue(topic, queue_id)
    if cq is None:
        return 0
    return store.history.queue(topic, queue_id, cq).offset_for_time(timestamp_ms, boundary)


def first_commitlog_offset(store) -> int:
    """The smallest commit-log offset ``read_at`` and ``scan`` can answer: the tier's
    oldest record where retention deleted local files the tier holds, else the log's."""
    store._check_open()
    low = store.history.local_min_phys()
    h = store.history.tier_history() if low > 0 else None
    older = h.min_commitlog_offset() if h is not None else None
    return low if older is None else min(low, older)
