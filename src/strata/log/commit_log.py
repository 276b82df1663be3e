"""The commit log: every message of every topic, appended to one run of segment files.

Appends happen under the store's put lock (the log does not lock for appends itself); reads may
come from any thread and see only committed bytes (whole records). A record that does not fit
the rest of a segment is preceded by a blank record that closes the segment; the closed segment
is sealed (footer written) by the flush thread.
"""

from __future__ import annotations

import logging
import threading
from itertools import chain
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
from crc32c import crc32c

from strata.errors import CorruptRecordError
from strata.files.io import DEFAULT_FILE_OPS, PAGE, FileOps
from strata.files.segment import MappedSegment
from strata.files.segment_queue import SegmentQueue
from strata.format import key_index_kernels as kk
from strata.format import record as rec
from strata.format.record_batch import MessageBatch, seal_records
from strata.format.record_table import F_PHYS, GOOD, OTHER
from strata.format.segment import HEADER_AREA, KIND_COMMIT_LOG
from strata.log.batch_reader import OffsetsRead, read_columns, read_offsets
from strata.log.record_fields import check_offsets
from strata.log.record_walk import SCAN_ROWS, SCAN_RUN_BYTES, Run, record_start, walk_log, \
    walk_runs

log = logging.getLogger(__name__)

BLANK_MIN = rec.BLANK_MIN_SIZE
# Batches whose offsets are kept for the dispatcher: enough to cover the dispatch lag that
# back-pressure allows (64 MiB by default is ~0.5 M small records, ~500 batches of 1024), so a
# dispatcher that fell behind still finds them; at most 8 MiB of offsets with 1024-record
# batches. Only large (columnar) batches leave hints.
RECENT_APPENDS = 1024

# A prepared record, built by the store before it takes the put lock (queue offset filled in
# under the lock):
# (total, queue_id, flag, queue_offset, sys_flag, born_ts, tx_offset, reconsume,
#  body_len, topic_len, props_len, image); image = the whole record with its fixed header zeroed
PreparedRecord = tuple


class CommitLog:
    """One log of fixed-size segments; physical offsets are absolute byte positions."""

    def __init__(self, directory: Path, segment_size: int, *, readonly: bool = False,
                 file_ops: FileOps = DEFAULT_FILE_OPS, prefault: bool = True,
                 preallocate: bool = True) -> None:
        self.directory = Path(directory)
        self.segment_size = segment_size
        self.readonly = readonly
        self.file_ops = file_ops
        self.segments = SegmentQueue(self.directory, KIND_COMMIT_LOG, segment_size,
                                     readonly=readonly, file_ops=file_ops,
                                     preallocate=preallocate, prefault=prefault)
        self._flush_lock = threading.RLock()
        self._to_seal: list[MappedSegment] = []
        self.last_store_timestamp = 0
        self._topic_names: dict[bytes, str] = {}  # topic bytes -> name, for batch reads
        # Record offsets of recent appends, keyed by their first offset: the dispatcher takes
        # them instead of walking the log (it still checks every header). Bounded; the oldest
        # hint is forgotten first.
        self.recent_appends: dict[int, np.ndarray] = {}
        self._append_ends: dict[int, int] = {}   # first offset -> end of that append's last record

    def load(self) -> None:
        self.segments.load()

    # ------------------------------------------------------------------ positions

    def min_offset(self) -> int:
        return self.segments.min_offset()

    def max_offset(self) -> int:
        """End of the committed data (whole records only)."""
        return self.segments.max_offset()

    def flushed_offset(self) -> int:
        """Everything before this offset is durable."""
        segs = self.segments.segments
        for seg in segs:
            if seg.flushed < seg.committed or seg.flushed < seg.data_size:
                return seg.base_offset + seg.flushed
        return segs[-1].end_offset if segs else 0

    def max_record_size(self) -> int:
        return self.segment_size - BLANK_MIN

    # ------------------------------------------------------------------ append

    def _next_segment(self, after: MappedSegment | None) -> MappedSegment:
        base = 0 if after is None else after.end_offset
        if after is None and self.segments.segments:
            base = self.segments.last().end_offset
        return self.segments.new_segment(base)

    def append_batch(self, records: Sequence[PreparedRecord], store_ts: int) -> list[int]:
        """Append records (caller holds the put lock); returns their physical offsets.

        All or nothing: if a new segment cannot be created (disk full), the bytes this batch
        wrote are zeroed again and the error propagates, so the log is as before.
        """
        seg = self._open_segment()
        undo = self._undo_point(seg)
        pack_header = rec.HEADER.pack_into
        pack_u32 = rec.U32.pack_into
        magic = rec.MESSAGE_MAGIC
        offsets: list[int] = []
        append = offsets.append
        mm, mv = seg.mm, seg.mv
        base = seg.base_offset
        pos = seg.wrote
        limit = min(seg.data_size - BLANK_MIN, seg.reserved)   # (blocks reserved up to)
        count = 0
        rolled: list[MappedSegment] = []
        try:
            for r in records:
                total = r[0]
                if pos + total > limit:
                    if pos + total <= seg.data_size - BLANK_MIN:   # reserve more of the file
                        seg.reserve(pos + total)
                    else:   # close this segment with a blank record, go on in the next
                        seg.reserve(pos + BLANK_MIN)
                        rec.write_blank(mm, HEADER_AREA + pos, seg.data_size - pos)
                        self._account(seg, count, store_ts)
                        seg.wrote = seg.committed = seg.data_size
                        rolled.append(seg)
                        seg = self._next_segment(seg)
                        mm, mv, base, pos, count = seg.mm, seg.mv, seg.base_offset, 0, 0
                        seg.reserve(total)
                    limit = min(seg.data_size - BLANK_MIN, seg.reserved)
                p = HEADER_AREA + pos
                phys = base + pos
                # The record layout of strata.format.record, inlined: this is the hot loop.
                mm[p:p + total] = r[11]
                pack_header(mm, p, total, magic, 0, r[1], r[2], r[3], phys, r[4], r[5], store_ts,
                            r[6], r[7], r[8], r[9], r[10])
                pack_u32(mm, p + 8, crc32c(mv[p + 12:p + total]))
                append(phys)
                pos += total
                count += 1
        except BaseException:
            self._undo(undo)
            raise
        self._account(seg, count, store_ts)
        seg.wrote = pos
        seg.committed = pos
        for s in rolled:
            self._to_seal.append(s)
        self.last_store_timestamp = store_ts
        self.segments.keep_ahead(seg)
        return offsets

    def append_headers(self, headers: np.ndarray, blob: bytes, store_ts: int) -> np.ndarray:
        """``append_batch`` for large batches, vectorised: ``headers`` (HEADER_DTYPE, one per
        record, physical offset / store time / CRC filled in here) and ``blob``, the records
        back to back, each with its fixed header and trailer zeroed (``seal_records`` fills
        them in place: a writable blob is changed).
        Returns the physical offsets. All or nothing, as ``append_batch``."""
        n = len(headers)
        seg = self._open_segment()
        undo = self._undo_point(seg)
        headers["store_ts"] = store_ts
        ends = np.cumsum(headers["total"].astype(np.int64))  # end of record i, batch-relative
        rolled: list[MappedSegment] = []
        done = 0
        # the records are finished in memory and written with pwrite (MappedSegment.write_at);
        # a read-only blob (bytes) is copied once to be finished
        data = np.frombuffer(blob, np.uint8)
        if not data.flags.writeable:
            data = data.copy()
        try:
            while done < n:
                before = int(ends[done - 1]) if done else 0
                room = seg.data_size - BLANK_MIN - seg.wrote
                fit = int(np.searchsorted(ends[done:], before + room, side="right"))
                if fit == 0:  # close this segment with a blank record, go on in the next
                    seg.reserve(seg.wrote + BLANK_MIN)
                    rec.write_blank(seg.mm, HEADER_AREA + seg.wrote, seg.data_size - seg.wrote)
                    seg.wrote = seg.committed = seg.data_size
                    rolled.append(seg)
                    seg = self._next_segment(seg)
                    continue
                part = slice(done, done + fit)
                starts = seg.base_offset + seg.wrote - before + \
                    np.concatenate(([before], ends[done:done + fit - 1]))
                headers["phys"][part] = starts
                seg.reserve(seg.wrote + int(ends[done + fit - 1]) - before)
                piece = data[before:int(ends[done + fit - 1])]
                seal_records(piece, 0, len(piece), headers[part])
                seg.write_at(seg.wrote, piece)
                seg.wrote = int(starts[-1] - seg.base_offset + headers["total"][done + fit - 1])
                self._account(seg, fit, store_ts)
                done += fit
        except BaseException:
            self._undo(undo)
            raise
        for s in rolled:
            s.committed = s.data_size
            self._to_seal.append(s)
        seg.committed = seg.wrote
        self.last_store_timestamp = store_ts
        self.segments.keep_ahead(seg)
        offsets = headers["phys"].copy()
        self._remember(offsets, seg.base_offset + seg.wrote)
        return offsets

    def _remember(self, offsets: np.ndarray, end: int) -> None:
        hints, ends = self.recent_appends, self._append_ends
        while len(hints) >= RECENT_APPENDS:  # forget the oldest: a dispatcher that fell
            try:                             # behind walks that stretch, then finds the rest
                oldest = next(iter(hints))
                del hints[oldest]
                ends.pop(oldest, None)
            except (KeyError, StopIteration, RuntimeError):  # the dispatcher took it meanwhile
                pass
        ends[int(offsets[0])] = end
        hints[int(offsets[0])] = offsets

    def take_appended(self, start: int, stop: int, max_records: int) -> np.ndarray | None:
        """The offsets of the records this process appended from ``start`` (a hint left by a
        large append), followed by those of the appends right after it, up to ``max_records``
        and below offset ``stop`` (so a dispatcher that fell a few puts behind catches up in one
        batch); the rest stays for the next call. None when no append started at ``start``.
        The offsets are the writer's word only: the reader still checks each record."""
        hints, ends = self.recent_appends, self._append_ends
        first = hints.pop(start, None)
        if first is None:
            return None
        parts, count = [first], len(first)
        end = ends.pop(start, None)
        while count < max_records and end is not None and end < stop:
            more = hints.pop(end, None)
            if more is None:
                break
            parts.append(more)
            count += len(more)
            end = ends.pop(end, None)
        offsets = parts[0] if len(parts) == 1 else np.concatenate(parts)
        mine = offsets[:min(max_records, int(np.searchsorted(offsets, stop)))]
        if len(mine) < len(offsets):
            rest = offsets[len(mine):]
            if end is not None:
                ends[int(rest[0])] = end
            hints[int(rest[0])] = rest
        return mine

    @staticmethod
    def _account(seg: MappedSegment, count: int, store_ts: int) -> None:
        """Add ``count`` records stored at ``store_ts`` to the segment's footer statistics."""
        if count:
            if seg.record_count == 0:
                seg.min_store_timestamp = store_ts
            seg.record_count += count
            seg.max_store_timestamp = store_ts

    def _open_segment(self) -> MappedSegment:
        """The segment the next record goes to (a new one if the last is full or sealed)."""
        seg = self.segments.last()
        if seg is None or seg.wrote + BLANK_MIN > seg.data_size or seg.sealed:
            seg = self._next_segment(seg)
        return seg

    @staticmethod
    def _undo_point(seg: MappedSegment) -> tuple:
        """What ``_undo`` needs to forget a batch that starts now in ``seg``."""
        return (seg, seg.wrote, seg.record_count, seg.min_store_timestamp,
                seg.max_store_timestamp, seg.base_offset + seg.wrote)

    def _undo(self, point: tuple) -> None:
        """Forget a half-written batch: drop segments it rolled into, zero its bytes, restore
        positions and footer statistics."""
        seg, pos, count, min_ts, max_ts, batch_start = point
        self.segments.truncate(batch_start)
        seg.zero(pos, min(seg.data_size, seg.reserved))   # nothing was written past that
        seg.wrote = seg.committed = pos
        seg.record_count = count
        seg.min_store_timestamp = min_ts
        seg.max_store_timestamp = max_ts
        if seg.flushed > pos:
            seg.flushed = pos

    # ------------------------------------------------------------------ read

    def locate(self, offset: int) -> tuple[MappedSegment, int] | None:
        seg = self.segments.find(offset)
        if seg is None:
            return None
        return seg, offset - seg.base_offset

    def store_time_at(self, offset: int) -> int | None:
        """The store timestamp (ms) of the record starting at ``offset``; None if no segment
        holds ``offset``. The record is not checked (the offset comes from a consume queue or
        the log's own walk)."""
        loc = self.locate(offset)
        if loc is None:
            return None
        seg, pos = loc
        return rec.I64_AT.unpack_from(seg.mm, HEADER_AREA + pos + rec.POS_STORE_TIMESTAMP)[0]

    def decode_at(self, offset: int) -> rec.StoredMessage | None:
        """Decode the record starting at ``offset`` without checks (for offsets the log's own
        walk, ``iter_records``, just returned); None if no segment holds ``offset``."""
        loc = self.locate(offset)
        if loc is None:
            return None
        seg, pos = loc
        return rec.decode_record(seg.mm, HEADER_AREA + pos)

    def _readable(self, offset: int, limit: int) -> tuple[MappedSegment, int, int] | None:
        """(segment, position of ``offset`` in it, end of its readable data) if ``offset`` lies
        in [min offset, ``limit``); positions count from the segment's first data byte."""
        if offset < 0 or offset >= limit:
            return None
        loc = self.locate(offset)
        if loc is None:
            return None
        seg, pos = loc
        return seg, pos, min(seg.committed, limit - seg.base_offset)

    def check_at(self, offset: int, limit: int, *, verify_crc: bool = False) -> tuple[MappedSegment, int, int] | None:
        """(segment, position, size) of the message record at ``offset`` if it is whole and
        lies below ``limit``; None otherwise (not a record start, blank, beyond the end)."""
        found = self._readable(offset, limit)
        if found is None:
            return None
        seg, pos, end = found
        try:
            with seg.view(0, end) as mv:
                kind, size = rec.check_record(mv, pos, end, verify_crc=verify_crc)
                if kind != rec.RecordKind.MESSAGE:
                    return None
                if rec.I64_AT.unpack_from(mv, pos + rec.POS_PHYSICAL_OFFSET)[0] != offset:
                    return None
        except (CorruptRecordError, ValueError):
            return None
        return seg, pos, size

    def read(self, offset: int, limit: int, *, verify_crc: bool = False,
             strict: bool = False) -> rec.StoredMessage | None:
        """Decode the message at ``offset`` (None if there is no whole record there). A record
        of that offset that fails its checks (``rec.message_at``) is None too, or with
        ``strict`` raises CorruptRecordError naming the offset."""
        found = self._readable(offset, limit)
        if found is None:
            return None
        seg, pos, end = found
        try:
            return rec.message_at(seg.mm, HEADER_AREA + pos, HEADER_AREA + end, offset,
                                  verify_crc=verify_crc)
        except CorruptRecordError:
            if strict:
                raise
            return None
        except ValueError:  # closed by retention just now
            return None

    def read_keyed(self, offset: int, limit: int, *, verify_crc: bool, topic: str,
                   topic_bytes: bytes, key: str, key_bytes: bytes, begin_ms: int,
                   end_ms: int) -> rec.StoredMessage | None:
        """The message at ``offset`` if it is ``topic``'s, stored in ``[begin_ms, end_ms]``,
        with ``key`` among its keys or as its unique key (``topic_bytes`` and ``key_bytes``:
        their UTF-8 bytes); None otherwise. Judged in one compiled check
        (``key_index_kernels.match_key``), so only a match is decoded; a record that fails its
        checks raises CorruptRecordError naming the offset, as ``read(strict=True)``."""
        found = self._readable(offset, limit)
        if found is None:
            return None
        seg, pos, end = found
        try:
            st = kk.match_key(np.frombuffer(seg.mm, np.uint8), HEADER_AREA + pos,
                              HEADER_AREA + end, offset, verify_crc, topic_bytes, key_bytes,
                              begin_ms, end_ms)
            if st == GOOD:
                return rec.decode_record(seg.mm, HEADER_AREA + pos)
        except ValueError:   # closed by retention just now
            return None
        if st == OTHER:
            return None
        # not a whole message there, or a damaged one: the Python reading says which
        m = self.read(offset, limit, verify_crc=verify_crc, strict=True)
        if m is None or m.topic != topic or not begin_ms <= m.store_timestamp <= end_ms:
            return None
        if key not in m.keys and m.properties.get(rec.PROP_UNIQ_KEY) != key:
            return None
        return m

    def read_batch(self, offsets: np.ndarray, limit: int, *, verify_crc: bool = False,
                   damaged: dict[int, str] | None = None) -> list[rec.StoredMessage | None]:
        """Decode the messages at commit-log ``offsets`` (ascending, e.g. one queue's units);
        None where ``read`` would answer None. ``damaged`` (if given) gets the index and the
        reason of each None that is a damaged record (where ``read(strict=True)`` raises)."""
        found = self.read_offsets(offsets, limit, verify_crc=verify_crc)
        if damaged is not None:
            damaged.update(found.damaged)
        return found.as_list()

    def read_offsets(self, offsets: np.ndarray, limit: int, *, verify_crc: bool = False,
                     topic: str | None = None, queue_id: int = -1,
                     queue_offsets: np.ndarray | None = None) -> OffsetsRead:
        """The records at commit-log ``offsets`` (ascending) below ``limit``, checked in one
        compiled pass per segment (``strata.log.batch_reader.read_offsets``); with ``topic``,
        ``queue_id`` and ``queue_offsets`` each must be that queue's message of that offset."""
        return read_offsets(list(self.segments.segments), offsets, limit,
                            verify_crc=verify_crc, topic=topic, queue_id=queue_id,
                            queue_offsets=queue_offsets, topics=self._topic_names)

    def read_columns(self, offsets: np.ndarray, limit: int, *, verify_crc: bool, topic: str,
                     queue_id: int, queue_offsets: np.ndarray):
        """The records at ``offsets`` as columns (``strata.log.batch_reader.read_columns``):
        None unless each is that queue's intact message of that offset."""
        return read_columns(list(self.segments.segments), offsets, limit,
                            verify_crc=verify_crc, topic=topic, queue_id=queue_id,
                            queue_offsets=queue_offsets)

    def check_offsets(self, offsets: np.ndarray, limit: int, *, topic: bytes, queue_id: int,
                      queue_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Whether the records at commit-log ``offsets`` (below ``limit``) are messages
        ``queue_offsets`` of ``topic``/``queue_id``, without decoding them or checking CRCs:
        ``(status, sizes)`` (``strata.log.record_fields.check_offsets``)."""
        return check_offsets(list(self.segments.segments), offsets, limit, topic, queue_id,
                             queue_offsets)

    def iter_records(self, from_offset: int, limit: int, *, verify_crc: bool = False,
                     strict: bool = False) -> Iterator[tuple[MappedSegment, int, int]]:
        """Yield (segment, position, size) of each good message record in [from_offset, limit).

        Blank records move on to the next segment. A damaged record is passed over (the walk
        resynchronises at the next good one: ``strata.log.record_walk``); with ``strict`` it
        raises CorruptRecordError naming its offset instead.
        """
        for seg, pos, size, why in walk_log(self.segments, from_offset, limit,
                                            verify_crc=verify_crc):
            if why is None:
                yield seg, pos, size
            elif strict:
                raise CorruptRecordError(f"commit log offset {seg.base_offset + pos}: {why}",
                                         seg.base_offset + pos)

    def scan(self, from_offset: int, limit: int, *, verify_crc: bool,
             on_damage: Callable[[int, str], None] | None = None
             ) -> Iterator[rec.StoredMessage]:
        """Every message in ``[from_offset, limit)`` in log order. A damaged record (one that
        fails its checks, the CRC32C with ``verify_crc``, or cannot be decoded) is skipped with
        a logged error naming its offset (or handed to ``on_damage(offset, error)``); the walk
        goes on at the next good record (``strata.log.record_walk``). A ``from_offset`` inside
        a record starts at the next. (The batches are chained in C: a generator that
        re-yields every message costs more than making it.)"""
        return chain.from_iterable(self.scan_batches(from_offset, limit, verify_crc=verify_crc,
                                                     on_damage=on_damage))

    def scan_batches(self, from_offset: int, limit: int, *, verify_crc: bool,
                     on_damage: Callable[[int, str], None] | None = None,
                     rows: int = SCAN_ROWS, stop: int | None = None,
                     run_bytes: int | None = SCAN_RUN_BYTES) -> Iterator[MessageBatch]:
        """``scan`` a batch at a time: ``MessageBatch``es of up to ``rows`` messages (about
        ``run_bytes`` of records each once the walk knows their size), checked
        in one compiled pass (``strata.log.record_walk.walk_runs``), damage as ``scan``. With
        ``stop`` (which may fall inside a record) only what starts below ``stop`` is yielded,
        damage too; the walk still reads to ``limit``, so a record that ``stop`` cuts is whole,
        not taken for a torn one."""
        for item in walk_runs(self.segments, from_offset, limit, verify_crc=verify_crc,
                              rows=rows, run_bytes=run_bytes):
            if isinstance(item, Run):
                if stop is not None and item.fields[F_PHYS, -1] >= stop:
                    k = int(np.searchsorted(item.fields[F_PHYS], stop))
                    if k:
                        yield Run(item.seg, item.data, item.fields[:, :k]).messages(
                            self._topic_names)
                    return
                yield item.messages(self._topic_names)
                continue
            if stop is not None and item.offset >= stop:
                return
            seg = self.segments.find(item.offset)
            if item.offset == from_offset and seg is not None and \
                    not record_start(seg, item.offset - seg.base_offset):
                continue   # a from_offset inside a record: the scan starts at the next
            error = rec.damaged_record_error(item.offset, item.why)
            if on_damage is not None:
                on_damage(item.offset, str(error))
            else:
                log.error("commit log %s: scan skips a damaged record: %s", self.directory,
                          error)

    # ------------------------------------------------------------------ durability

    def flush(self, least_pages: int = 0) -> int:
        """msync committed-but-unflushed bytes, seal closed segments; returns flushed offset."""
        with self._flush_lock:
            segs = list(self.segments.segments)
            for seg in segs:
                if seg.closed or seg.flushed >= seg.committed:
                    continue
                if least_pages and seg is segs[-1]:
                    dirty = seg.committed // PAGE - seg.flushed // PAGE
                    if dirty < least_pages:
                        continue
                try:
                    seg.flush()
                except ValueError:  # mapping closed under us by retention
                    continue
            self.seal_pending()
            return self.flushed_offset()

    def seal_pending(self) -> None:
        with self._flush_lock:
            while self._to_seal:
                seg = self._to_seal[0]
                if not seg.closed and not seg.sealed:
                    seg.seal()
                    # Written, durable and sealed: let its pages leave this process's resident
                    # set (they stay in the page cache; a later read faults them back in).
                    seg.release_pages()
                self._to_seal.pop(0)

    def segment_list(self) -> list:
        """The log's segments, oldest first (a copy: retention may delete the first)."""
        return list(self.segments.segments)

    def delete_oldest(self) -> None:
        """Retention: delete the oldest segment (never while a flush walks the segments)."""
        with self._flush_lock:
            self.segments.delete_first()

    def close(self) -> None:
        with self._flush_lock:
            self.segments.close()
