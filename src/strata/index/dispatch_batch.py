"""A run of commit-log records as dispatchers see it: columns, not one object per record.

``read_batch`` takes the record offsets the writer just appended (``CommitLog.take_appended``)
and checks those records without their CRC, or walks the log from an offset with CRC32C checked
(records not just appended by this process: a replay after an open); both through
``strata.log.record_fields``, the compiled record reader's field table.
``DispatchBatch.from_fields`` builds the columns from that table; only topics (the distinct
ones) and non-empty properties sections are read per record. A record that fails, or whose topic
or properties cannot be parsed, is skipped as damage (logged), never dispatched. Dispatchers
work on the columns (``ConsumeQueueSet`` writes each queue's units in one slice);
``requests()`` gives the per-record view for anything that wants it.
"""

from __future__ import annotations

import logging
import struct
from typing import Sequence

import numpy as np

from strata.errors import CorruptRecordError
from strata.format import record as rec
from strata.format.consume_queue import tag_hash
from strata.format.record_table import (F_BODY_AT, F_PHYS, F_PROPS_AT, F_QUEUE_ID,
                                        F_QUEUE_OFFSET, F_STORE_TS, F_SYS_FLAG, F_TOPIC_AT,
                                        F_TOTAL, WALK_BLANK)
from strata.log.record_fields import FieldRun, fields_at, past_damage, walk_fields
from strata.log.record_walk import scratch

log = logging.getLogger(__name__)

_TAG_HASH = tag_hash
SMALL_BATCH = 16  # up to this many records, plain Python beats numpy's per-call cost
# What parsing a damaged record's topic or properties can raise.
PARSE_ERRORS = (CorruptRecordError, struct.error, UnicodeDecodeError, ValueError, IndexError)


class DispatchBatch:
    """Columns of consecutive records (all numpy arrays of equal length, log order).

    ``topic_codes`` index ``topics``; ``keyed`` lists ``(row, keys, unique key)`` for the
    records that have keys or a unique key (the key index only looks at those).
    """

    __slots__ = ("topics", "topic_codes", "queue_ids", "queue_offsets", "offsets", "sizes",
                 "tag_hashes", "store_timestamps", "sys_flags", "_keyed", "keys")

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
        self._keyed = keyed
        self.keys: KeyColumns | None = None

    @property
    def keyed(self) -> list[tuple[int, list[str], str | None]]:
        """``(row, keys, unique key)`` of the records with keys or a unique key (made from
        ``keys`` when the compiled reader found them)."""
        if self._keyed is None:
            self._keyed = self.keys.keyed()
        return self._keyed

    @keyed.setter
    def keyed(self, value: list[tuple[int, list[str], str | None]]) -> None:
        self._keyed = value

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

    @classmethod
    def from_fields(cls, run: FieldRun, names: TopicNames) -> DispatchBatch:
        """Columns straight from the field table of checked records (``run``, from
        ``strata.log.record_fields``): only topics (the distinct ones) and non-empty properties
        sections are read per record. The batch ends before the first record whose topic is no
        topic name or whose properties cannot be parsed (damage that the checks without CRC
        let through)."""
        f = run.fields   # the reader's scratch: _columns takes its rows out as copies
        if not f.shape[1]:
            return EMPTY
        try:
            return _columns(run, f, names)
        except PARSE_ERRORS:
            pass
        good = 0
        for row in range(f.shape[1]):
            try:
                _columns(run, f[:, row:row + 1], names)
            except PARSE_ERRORS:
                break
            good += 1
        return _columns(run, f[:, :good], names) if good else EMPTY

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


class KeyColumns:
    """The keys of a batch's records as columns (from the compiled properties reader): key
    ``k`` belongs to row ``rows[k]``, hashes to ``hashes[k]`` in the key index (``topic#key``),
    its text is ``text[at[k]:at[k + 1]]`` and ``uniq[k]`` marks a unique key; in row order,
    each row's keys before its unique key.

    The key index with its default hash needs only the hashes, so the text is gathered from
    the records (``data[key_at[k]:key_end[k]]``) when first asked for (``keyed``, a custom
    hash); until then the columns pin the segment's map, as the batch's reader does."""

    __slots__ = ("rows", "hashes", "uniq", "_data", "_key_at", "_key_end", "_text", "_at")

    def __init__(self, rows: np.ndarray, hashes: np.ndarray, data: np.ndarray,
                 key_at: np.ndarray, key_end: np.ndarray, uniq: np.ndarray) -> None:
        self.rows, self.hashes, self.uniq = rows, hashes, uniq
        self._data, self._key_at, self._key_end = data, key_at, key_end
        self._text: bytes | None = None
        self._at: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def _gather(self) -> None:
        """Every key's bytes copied in one compiled pass."""
        from strata.format import column_kernels as ck
        at = np.zeros(len(self.rows) + 1, np.int64)
        np.cumsum(self._key_end - self._key_at, out=at[1:])
        text = np.empty(int(at[-1]), np.uint8)
        ck.gather(self._data, self._key_at, self._key_end, at, text)
        self._text, self._at, self._data = text.tobytes(), at, None

    @property
    def text(self) -> bytes:
        if self._text is None:
            self._gather()
        return self._text

    @property
    def at(self) -> np.ndarray:
        if self._at is None:
            self._gather()
        return self._at

    def keyed(self) -> list[tuple[int, list[str], str | None]]:
        out: list[tuple[int, list[str], str | None]] = []
        text, at = self.text, self.at.tolist()
        last = -1
        for k, (row, u) in enumerate(zip(self.rows.tolist(), self.uniq.tolist())):
            value = text[at[k]:at[k + 1]].decode("utf-8")
            if row != last:
                out.append((row, [], None))
                last = row
            if u:
                out[-1] = (row, out[-1][1], value)
            else:
                out[-1][1].append(value)
        return out


def _scan_keys(run: FieldRun, rows: np.ndarray, topic_at: np.ndarray, props_at: np.ndarray,
               body_at: np.ndarray, tags: np.ndarray) -> tuple[KeyColumns | None, bool]:
    """Tags (into ``tags[rows]``) and keys of the records at ``rows`` (non-empty properties)
    in compiled code. (keys or None if none, True), or (None, False) if some section did not
    parse cleanly (the Python reader then reads them all and finds what is wrong).

    The reader writes into this thread's scratch arrays (sized for the most keys the sections
    could hold, hundreds of KiB for a large batch): fresh arrays of that size per batch cost
    more in page faults than the scan itself. Only the ``m`` keys found are copied out."""
    from strata.format import property_kernels as pk
    ta, pa, ba = topic_at[rows], props_at[rows], body_at[rows]
    cap = int((ba - pa).sum()) // 8 + 1     # a key entry takes at least 8 bytes
    t = scratch("scan_tags", (len(rows),), np.int64)
    k_row, k_hash, k_at, k_end = scratch("scan_keys", (4, cap), np.int64)
    k_uniq = scratch("scan_uniq", (cap,), np.uint8)
    m = pk.scan_properties(run.data, ta, pa, ba, t, k_row, k_hash, k_at, k_end, k_uniq)
    if m < 0:
        return None, False
    tags[rows] = t
    if m == 0:
        return None, True
    return KeyColumns(rows[k_row[:m]], k_hash[:m].copy(), run.data, k_at[:m].copy(),
                      k_end[:m].copy(), k_uniq[:m].astype(bool)), True


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


def _topic_codes(run: FieldRun, topic_at: np.ndarray, props_at: np.ndarray,
                 names: TopicNames) -> np.ndarray:
    """The topic code of every record (topic bytes ``run.data[topic_at:props_at]``): the
    distinct topics numbered in one compiled pass and only those looked up; with very many
    distinct topics in one batch, one slice per record."""
    from strata.format import column_kernels as ck
    codes = np.empty(len(topic_at), np.int64)
    firsts = np.empty(MAX_BATCH_TOPICS, np.int64)
    m = ck.distinct_slices(run.data, topic_at, props_at, codes, firsts)
    if m < 0:
        return np.array(names.codes_of(run.slices(topic_at.tolist(), props_at.tolist())),
                        np.int64)
    f = firsts[:m].tolist()
    lookup = np.array(names.codes_of(run.slices(topic_at[f].tolist(), props_at[f].tolist())),
                      np.int64)
    return lookup[codes]


MAX_BATCH_TOPICS = 64   # distinct topics numbered in compiled code; more: one slice per record
_COLUMN_ROWS = [F_QUEUE_ID, F_QUEUE_OFFSET, F_PHYS, F_TOTAL, F_STORE_TS, F_SYS_FLAG]
_AT_ROWS = [F_TOPIC_AT, F_PROPS_AT, F_BODY_AT]


def _columns(run: FieldRun, f: np.ndarray, names: TopicNames) -> DispatchBatch:
    """``DispatchBatch.from_fields`` over ``f``, ``run``'s table (or some of its columns); the
    batch's columns are copies (``f[_COLUMN_ROWS]`` is fancy indexing), so it outlives the
    table. Raises one of ``PARSE_ERRORS`` if a record's topic or properties cannot be
    parsed."""
    n = f.shape[1]
    keyed: list[tuple[int, list[str], str | None]] = []
    key_cols = None
    tags: list[int] | np.ndarray
    if n <= SMALL_BATCH:   # a handful: plain Python beats numpy's per-call cost
        topic_at, props_at, body_at = f[_AT_ROWS].tolist()
        codes = list(map(names.code, run.slices(topic_at, props_at)))
        tags = [0] * n
        _properties(run, range(n), props_at, body_at, tags, keyed)
    else:
        topic_at, props_at, body_at = f[_AT_ROWS]
        codes = _topic_codes(run, topic_at, props_at, names)
        tags = np.zeros(n, np.int64)
        rows = np.flatnonzero(body_at - props_at)
        # the compiled reader computes format.consume_queue's tag code; one replaced here
        # (tests force collisions so) sends the batch to the Python reader
        key_cols, scanned = _scan_keys(run, rows, topic_at, props_at, body_at, tags) \
            if len(rows) and tag_hash is _TAG_HASH else (None, not len(rows))
        if not scanned:
            _properties(run, rows.tolist(), props_at[rows].tolist(), body_at[rows].tolist(),
                        tags, keyed)
    batch = DispatchBatch.__new__(DispatchBatch)   # the rows are int64 already: no asarray
    batch.topics = names.names
    batch.keys = None
    if n > SMALL_BATCH and key_cols is not None:
        batch.keys, batch._keyed = key_cols, None
    else:
        batch._keyed = keyed
    batch.topic_codes = np.asarray(codes, np.int64)
    batch.tag_hashes = np.asarray(tags, np.int64)
    (batch.queue_ids, batch.queue_offsets, batch.offsets, batch.sizes, batch.store_timestamps,
     batch.sys_flags) = f[_COLUMN_ROWS]
    return batch


def _properties(run: FieldRun, rows, starts: list[int], ends: list[int], tags,
                keyed: list[tuple[int, list[str], str | None]]) -> None:
    """Tag hashes (into ``tags[row]``) and keys (appended to ``keyed``) from the properties
    sections ``[starts[i], ends[i])`` of ``rows`` (empty sections are passed over)."""
    for row, raw in zip(rows, run.slices(starts, ends)):
        if not raw:
            continue
        keys, tag, uniq = rec.dispatch_properties(raw)
        if tag:
            tags[row] = tag_hash(tag)
        if keys or uniq is not None:
            keyed.append((row, keys, uniq))


def _past_damage(seg, rel: int, end: int) -> int:
    """Where dispatch goes on when no record can be read at data byte ``rel`` of ``seg`` (data
    bytes below ``end`` confirmed): there if nothing whole is confirmed there yet, else past the
    damaged record (the next good one), logged as an error: a damaged record is skipped, never
    the rest of the log."""
    nxt = past_damage(seg, rel, end)
    if nxt is None:
        return seg.base_offset + rel
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
    end = min(seg.committed, limit - seg.base_offset)
    batch = EMPTY
    blank = False
    appended = clog.take_appended(seg.base_offset + rel, min(seg.end_offset, limit),
                                  max_records)
    if appended is not None and len(appended):   # the writer's offsets: no need to walk
        run = fields_at(seg, appended, end, verify_crc=False)
        batch = DispatchBatch.from_fields(run, names)
    if not batch:  # no hint, or one the records contradict: walk the log
        # Records found by walking (a replay after an open, a reader's catch-up) were not just
        # written by this process: their CRCs are checked, so a flipped bit (a topic or queue
        # that still parses) is skipped as damage, never dispatched to a queue.
        run = walk_fields(seg, rel, end, max_records, verify_crc=True)
        if not len(run):
            if run.why == WALK_BLANK:   # the rest of this segment is a blank record
                return EMPTY, seg.end_offset if seg.end_offset <= limit else seg.base_offset + rel
            return EMPTY, _past_damage(seg, rel, end)
        batch = DispatchBatch.from_fields(run, names)
        if not batch:
            return batch, _past_damage(seg, rel, end)
        blank = run.why == WALK_BLANK and len(batch) == len(run)
    nxt = batch.end
    if blank and nxt < seg.end_offset <= limit:
        nxt = seg.end_offset
    return batch, nxt
