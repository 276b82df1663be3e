"""A run of commit-log records as dispatchers see it: columns, not one object per record.

``read_batch`` takes the record offsets the writer just appended (``CommitLog.recent_appends``) or
walks the log from an offset (record lengths only), then reads every fixed header
of the run with one numpy take and checks them (magic, lengths at both ends, offsets) the way
``check_record`` does; records found by walking (not just appended by this process: a replay
after an open) get their CRC32C checked too. A record that fails, or whose topic is not a topic
name, is skipped as damage (logged), never dispatched. Only topics and non-empty properties
sections are read per record. Dispatchers work on the columns (``ConsumeQueueSet`` writes each queue's units in
one slice); ``requests()`` gives the per-record view for anything that wants it.
"""

from __future__ import annotations

import logging
import struct
from typing import Sequence

import numpy as np
from crc32c import crc32c

from strata.errors import CorruptRecordError
from strata.format import record as rec
from strata.format.consume_queue import tag_hash
from strata.format.record_batch import check_headers, u32_windows
from strata.format.segment import HEADER_AREA
from strata.log.record_walk import record_problem, resync

log = logging.getLogger(__name__)

_LENGTH_MAGIC = struct.Struct("<II")
_MIN_RECORD = rec.HEADER_SIZE + 12 + rec.TRAILER_SIZE
SMALL_BATCH = 16  # up to this many records, plain Python beats numpy's per-call cost
# What parsing a damaged record's topic or properties can raise.
PARSE_ERRORS = (CorruptRecordError, struct.error, UnicodeDecodeError, ValueError, IndexError)


class DispatchBatch:
    """Columns of consecutive records (all numpy arrays of equal length, log order).

    ``topic_codes`` index ``topics``; ``keyed`` lists ``(row, keys, unique key)`` for the
    records that have keys or a unique key (the key index only looks at those).
    """

    __slots__ = ("topics", "topic_codes", "queue_ids", "queue_offsets", "offsets", "sizes",
                 "tag_hashes", "store_timestamps", "sys_flags", "keyed")

    def __init__(self, topics: list[str], topic_codes, queue_ids, queue_offsets, offsets,
                 sizes, tag_hashes, store_timestamps, sys_flags,
                 keyed: list[tuple[int, list[str], str | None]]) -> None:
        self.topics = topics
        self.topic_codes = np.asarray(topic_codes, np.int64)
        self.queue_ids = np.asarray(queue_ids, np.int64)
        self.queue_offsets = np.asarray(queue_offsets, np.int64)
        self.offsets = np.asarray(offsets, np.int64)
        self.sizes = np.asarray(sizes, np.int64)
        self.tag_hashes = np.asarray(tag_hashes, np.int64)
        self.store_timestamps = np.asarray(store_timestamps, np.int64)
        self.sys_flags = np.asarray(sys_flags, np.int64)
        self.keyed = keyed

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def end(self) -> int:
        """Commit-log offset just past the last record."""
        return int(self.offsets[-1] + self.sizes[-1]) if len(self.offsets) else 0

    @classmethod
    def from_requests(cls, requests: Sequence) -> "DispatchBatch":
        """Columns from per-record ``DispatchRequest``s."""
        names: dict[str, int] = {}
        codes = [names.setdefault(r.topic, len(names)) for r in requests]
        keyed = [(i, list(r.keys), r.uniq_key) for i, r in enumerate(requests)
                 if r.keys or r.uniq_key is not None]
        return cls(list(names), codes, [r.queue_id for r in requests],
                   [r.queue_offset for r in requests], [r.commitlog_offset for r in requests],
                   [r.size for r in requests], [r.tag_hash for r in requests],
                   [r.store_timestamp for r in requests], [r.sys_flag for r in requests], keyed)

    def select(self, rows: np.ndarray) -> "DispatchBatch":
        """The records at ``rows`` (a boolean mask or ascending indices)."""
        idx = np.flatnonzero(rows) if rows.dtype == bool else rows
        where = {int(r): i for i, r in enumerate(idx.tolist())} if self.keyed else {}
        keyed = [(where[r], keys, u) for r, keys, u in self.keyed if r in where]
        return DispatchBatch(self.topics, self.topic_codes[idx], self.queue_ids[idx],
                             self.queue_offsets[idx], self.offsets[idx], self.sizes[idx],
                             self.tag_hashes[idx], self.store_timestamps[idx],
                             self.sys_flags[idx], keyed)

    def requests(self) -> list:
        """The per-record view (``DispatchRequest``s)."""
        from strata.index.dispatch import DispatchRequest
        keys: dict[int, tuple[list[str], str | None]] = {r: (k, u) for r, k, u in self.keyed}
        out = []
        for i, (code, q, qo, off, size, th, ts, sf) in enumerate(zip(
                self.topic_codes.tolist(), self.queue_ids.tolist(),
                self.queue_offsets.tolist(), self.offsets.tolist(), self.sizes.tolist(),
                self.tag_hashes.tolist(), self.store_timestamps.tolist(),
                self.sys_flags.tolist())):
            k, u = keys.get(i, ([], None))
            out.append(DispatchRequest(self.topics[code], q, qo, off, size, th, ts, k, u, sf))
        return out


EMPTY = DispatchBatch([], [], [], [], [], [], [], [], [], [])  # (never modified)


def walk_records(mm, pos: int, end: int, max_records: int) -> tuple[list[int], bool]:
    """Start positions of the message records from ``pos`` (bytes of ``mm``, data area
    included) up to ``end``, reading only each record's length and magic. Returns (positions,
    blank): ``blank`` is True when a blank record (the end of the segment's data) was reached.
    Stops early at anything that is not a plausible record; the header checks decide."""
    out: list[int] = []
    append = out.append
    unpack = _LENGTH_MAGIC.unpack_from
    message, blank = rec.MESSAGE_MAGIC, rec.BLANK_MAGIC
    last = end - 8
    for _ in range(max_records):
        if pos > last:
            break
        total, magic = unpack(mm, pos)
        if magic != message:
            return out, magic == blank
        nxt = pos + total
        if total < _MIN_RECORD or nxt > end:
            break
        append(pos)
        pos = nxt
    return out, False


class TopicNames:
    """Topic bytes to (name, code) for one reader; codes are small ints stable per reader."""

    def __init__(self) -> None:
        self.codes: dict[bytes, int] = {}
        self.names: list[str] = []

    def code(self, raw: bytes) -> int:
        """The code of topic bytes ``raw``; CorruptRecordError (nothing registered) if they are
        not a valid topic name, as only a damaged record's can be."""
        c = self.codes.get(raw)
        if c is None:
            raw = bytes(raw)
            name = rec.decode_topic(raw, 0)
            if not rec.is_topic_name(name):
                raise CorruptRecordError(f"topic bytes {raw[:40]!r} are not a topic name", 0)
            c = len(self.names)
            self.names.append(name)
            self.codes[raw] = c
        return c

    def codes_of(self, raws: list[bytes]) -> list[int]:
        codes = list(map(self.codes.get, raws))
        if None in codes:
            codes = list(map(self.code, raws))
        return codes


def first_bad_crc(seg, positions: list[int]) -> int | None:
    """Index of the first record at ``positions`` of ``seg`` (whole records, as
    ``walk_records`` gives them) whose CRC32C fails; None if every one is intact."""
    if not positions:
        return None
    mm, mv = seg.mm, seg.mv
    pos = np.asarray(positions, np.int64)
    stored = u32_windows(mm, len(mm))[pos + rec.POS_CRC]
    totals = u32_windows(mm, len(mm))[pos].astype(np.int64)
    starts = (pos + rec.CRC_START).tolist()
    ends = (pos + totals).tolist()
    actual = np.array([crc32c(mv[a:b]) for a, b in zip(starts, ends)], np.uint32)
    bad = np.flatnonzero(actual != stored)
    return int(bad[0]) if len(bad) else None


def read_segment_batch(mm, base_offset: int, positions: list[int], limit: int,
                       names: TopicNames) -> DispatchBatch:
    """The records at ``positions`` (from ``walk_records``) of one segment, checked as
    ``check_record`` does without the CRC; the batch ends before the first bad record."""
    if len(positions) <= SMALL_BATCH:
        return _read_few(mm, base_offset, positions, limit, names)
    pos = np.asarray(positions, np.int64)
    hdr, good, total, hosts = check_headers(mm, pos, pos - HEADER_AREA + base_offset, limit)
    sys_flag = hdr["sys_flag"].astype(np.int64)
    if not good.all():
        n = int(np.argmin(good))  # the first bad record ends the batch
        hdr, pos, total, sys_flag, hosts = hdr[:n], pos[:n], total[:n], sys_flag[:n], hosts[:n]
    topic_len = hdr["topic_len"].astype(np.int64)
    props_len = hdr["props_len"].astype(np.int64)
    topic_at = pos + rec.HEADER_SIZE + hosts
    topic_end = topic_at + topic_len
    codes = _topic_codes(mm, topic_at, topic_end, topic_len, names)
    tags = np.zeros(len(pos), np.int64)
    keyed: list[tuple[int, list[str], str | None]] = []
    with_props = np.flatnonzero(props_len)
    if len(with_props):
        ends = (topic_end + props_len)[with_props].tolist()
        starts = topic_end[with_props].tolist()
        for row, a, b in zip(with_props.tolist(), starts, ends):
            keys, tag, uniq = rec.dispatch_properties(mm[a:b])
            if tag:
                tags[row] = tag_hash(tag)
            if keys or uniq is not None:
                keyed.append((row, keys, uniq))
    return DispatchBatch(names.names, codes, hdr["queue_id"], hdr["queue_offset"], hdr["phys"],
                         total, tags, hdr["store_ts"], sys_flag, keyed)


def _topic_codes(mm, topic_at: np.ndarray, topic_end: np.ndarray, topic_len: np.ndarray,
                 names: TopicNames):
    """The topic code of every record. When all topic names have one length (the usual
    batch: one topic) they are gathered and compared as fixed-size byte strings in numpy and
    only the distinct ones are looked up; otherwise one slice per record."""
    if not len(topic_len):
        return np.zeros(0, np.int64)
    width = int(topic_len[0])
    if width and (topic_len == width).all():
        windows = np.ndarray(shape=(len(mm) - width + 1,), dtype=(np.void, width), buffer=mm,
                             strides=(1,))
        raw = windows[topic_at]
        first = raw[0]
        if (raw == first).all():
            return np.full(len(raw), names.code(first.tobytes()), np.int64)
        distinct, inverse = np.unique(raw, return_inverse=True)
        lookup = np.array([names.code(d.tobytes()) for d in distinct], np.int64)
        return lookup[inverse.ravel()]
    return names.codes_of([mm[a:b] for a, b in zip(topic_at.tolist(), topic_end.tolist())])


def _read_few(mm, base_offset: int, positions: list[int], limit: int,
              names: TopicNames) -> DispatchBatch:
    """``read_segment_batch`` record by record: for a handful of records numpy's per-call cost
    (tens of calls, microseconds each) is far more than the work. Same checks, same result."""
    unpack = rec.HEADER.unpack_from
    trailer_at = rec.U32.unpack_from
    rows = []
    tags: list[int] = []
    keyed: list[tuple[int, list[str], str | None]] = []
    for p in positions:
        if p + _MIN_RECORD > limit:
            break
        (total, magic, _crc, qid, _flag, qoff, phys, sys_flag, _born, store_ts, _tx, _again,
         body_len, topic_len, props_len) = unpack(mm, p)
        topic_at = p + rec.HEADER_SIZE + (18 if sys_flag & rec.SYSFLAG_BORN_HOST_V6 else 6) + \
            (18 if sys_flag & rec.SYSFLAG_STORE_HOST_V6 else 6)
        if (magic != rec.MESSAGE_MAGIC or phys != p - HEADER_AREA + base_offset
                or total != topic_at - p + topic_len + props_len + body_len + rec.TRAILER_SIZE
                or p + total > limit or trailer_at(mm, p + total - rec.TRAILER_SIZE)[0] != total):
            break
        props_at = topic_at + topic_len
        tag = 0
        if props_len:
            keys, tag_text, uniq = rec.dispatch_properties(mm[props_at:props_at + props_len])
            tag = tag_hash(tag_text) if tag_text else 0
            if keys or uniq is not None:
                keyed.append((len(rows), keys, uniq))
        rows.append((names.code(mm[topic_at:props_at]), qid, qoff, phys, total, store_ts,
                     sys_flag))
        tags.append(tag)
    if not rows:
        return EMPTY
    codes, qids, qoffs, offsets, sizes, stamps, flags = zip(*rows)
    return DispatchBatch(names.names, codes, qids, qoffs, offsets, sizes, tags, stamps, flags,
                         keyed)


def _take_hints(hints: dict, seg, start: int, max_records: int) -> np.ndarray | None:
    """The writer's offsets from ``start``: its hint there, followed by the hints of the
    appends right after it while they stay in ``seg`` and ``max_records`` is not reached (so a
    dispatcher that fell a few puts behind catches up in one batch)."""
    first = hints.pop(start, None)
    if first is None or len(first) >= max_records:
        return first
    parts, count = [first], len(first)
    while count < max_records:
        last = int(parts[-1][-1])
        if last >= seg.end_offset:
            break
        more = hints.pop(last + rec.U32.unpack_from(seg.mm, last - seg.base_offset +
                                                    HEADER_AREA)[0], None)
        if more is None:
            break
        parts.append(more)
        count += len(more)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def read_parseable(seg, positions: list[int], end: int, names: TopicNames) -> DispatchBatch:
    """``read_segment_batch``, ending before a record whose topic or properties cannot even be
    parsed (a damaged record that its header checks let through)."""
    try:
        return read_segment_batch(seg.mm, seg.base_offset, positions, end, names)
    except PARSE_ERRORS:
        pass
    good = 0
    for p in positions:
        try:
            read_segment_batch(seg.mm, seg.base_offset, [p], end, names)
        except PARSE_ERRORS:
            break
        good += 1
    return read_segment_batch(seg.mm, seg.base_offset, positions[:good], end, names) \
        if good else EMPTY


def _past_damage(seg, rel: int, end: int) -> int:
    """Where dispatch goes on when no record can be read at data byte ``rel`` of ``seg``: there
    if nothing is committed there yet, else past the damaged record (the next good one, found
    by ``resync``), logged as an error: a damaged record is skipped, never the rest of the log."""
    if HEADER_AREA + rel >= end:
        return seg.base_offset + rel
    _kind, size, why = record_problem(seg, rel, seg.committed, verify_crc=False)
    if why is None and HEADER_AREA + rel + size > end:
        return seg.base_offset + rel   # a whole record that is not confirmed yet: wait for it
    nxt = resync(seg, rel, end - HEADER_AREA)
    log.error("dispatch skips the damaged record at commit-log offset %d (%d bytes up to the "
              "next good record are not dispatched; `strata verify` lists the damage)",
              seg.base_offset + rel, nxt - rel)
    return seg.base_offset + nxt


def read_batch(clog, start: int, limit: int, max_records: int,
               names: TopicNames) -> tuple[DispatchBatch, int]:
    """Up to ``max_records`` records of ``clog`` from ``start`` (a record start) below
    ``limit``, within one segment; returns (batch, where the next batch starts). The next
    start equals ``start`` only when no whole record is there yet."""
    loc = clog.locate(max(start, clog.min_offset()))
    if loc is None:
        return EMPTY, start
    seg, rel = loc
    end = HEADER_AREA + min(seg.committed, limit - seg.base_offset)
    batch = None
    appended = _take_hints(clog.recent_appends, seg, seg.base_offset + rel, max_records)
    if appended is not None:  # offsets the writer just appended: no need to walk the log
        mine = appended[:min(max_records, int(np.searchsorted(
            appended, min(seg.end_offset, limit))))]
        if len(mine) < len(appended):
            rest = appended[len(mine):]
            clog.recent_appends[int(rest[0])] = rest
        positions, blank = (mine - seg.base_offset + HEADER_AREA).tolist(), False
        if positions:
            batch = read_parseable(seg, positions, end, names)
    if not batch:  # no hint, or one the headers contradict: walk the log
        positions, blank = walk_records(seg.mm, HEADER_AREA + rel, end, max_records)
        # Records found by walking (a replay after an open, a reader's catch-up) were not just
        # written by this process: their CRCs are checked, so a flipped bit (a topic or queue
        # that still parses) is skipped as damage, never dispatched to a queue.
        bad = first_bad_crc(seg, positions)
        if bad is not None:
            positions, blank = positions[:bad], False
        if not positions:
            if blank:   # the rest of this segment is a blank record
                return EMPTY, seg.end_offset if seg.end_offset <= limit else seg.base_offset + rel
            return EMPTY, _past_damage(seg, rel, end)
        batch = read_parseable(seg, positions, end, names)
        if not batch:
            return batch, _past_damage(seg, rel, end)
    nxt = batch.end
    if blank and len(batch) == len(positions) and nxt < seg.end_offset <= limit:
        nxt = seg.end_offset
    return batch, nxt
