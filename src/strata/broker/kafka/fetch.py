"""Fetch (key 1): messages of a partition from the fetch offset, as uncompressed v2 record
batches built in compiled code (``record_batch``'s batch writer), one batch per run of
consecutive offsets within each store read. The response is a ``FetchAnswer`` that encodes
itself into one buffer sized before writing (the batches' bytes copied once, from the
store's buffers into it). A partition answers at least one message even past its byte limit
(KIP-74), then stops at ``partition_max_bytes`` and the request's ``max_bytes``. Nothing past
the high watermark is served: the queue's dispatched end, which never passes what the store
counts as confirmed (the fsync'd end under ``--flush sync``). An offset outside [log start,
high watermark] is OFFSET_OUT_OF_RANGE. Below ``min_bytes`` the request waits (up to
``max_wait_ms``) and is woken when new messages are dispatched, not by polling.
"""

from __future__ import annotations

import asyncio
import struct
import time

import numpy as np

from strata.broker.kafka import api
from strata.broker.kafka import errors as ke
from strata.broker.kafka.mapping import from_message
from strata.broker.kafka import batch_kernels as bk
from strata.broker.kafka import record_batch as rb
from strata.broker.kafka.record_batch import RecordColumns
from strata.format import record_table as rk
from strata.format.record_batch import MessageBatch
from strata.broker.kafka.topics import partitions
from strata.errors import StrataError
from strata.store.message import GetStatus

FIRST_CHUNK = 1024                 # messages of a partition's first store.get (sizes unknown)
READ_CHUNK = 4096                  # at most this many per later store.get, as sizes allow
RECORD_OVERHEAD = 70               # bytes of a v2 record beside its value (an estimate)
CATCH_UP_S = 30.0                  # at most this long for dispatch to reach what was acknowledged


def _plain_columns(parts: list) -> RecordColumns | None:
    """Columns straight from the store's field table, without a message object each, when
    every message is plain (no keys, tags or properties: the value and a timestamp only);
    else None."""
    tables = []
    for part in parts:
        t = part.table() if isinstance(part, MessageBatch) else None
        if t is None:
            return None
        tables.append(t)
    datas, recs = [], []
    base = 0
    for buf, f in tables:
        if (f[rk.F_PROPS_AT] != f[rk.F_BODY_AT]).any():
            return None
        n = f.shape[1]
        r = np.zeros((bk.R_FIELDS, n), np.int64)
        born = f[rk.F_BORN_TS]
        r[bk.R_TIMESTAMP] = np.where(born > 0, born, f[rk.F_STORE_TS])
        r[bk.R_KEY_LEN] = -1
        r[bk.R_VALUE_AT] = f[rk.F_BODY_AT] + base
        r[bk.R_VALUE_LEN] = f[rk.F_BODY_END] - f[rk.F_BODY_AT]
        recs.append(r)
        datas.append(np.frombuffer(buf, np.uint8))
        base += len(buf)
    data = datas[0] if len(datas) == 1 else np.concatenate(datas)
    records = recs[0] if len(recs) == 1 else np.concatenate(recs, axis=1)
    records[bk.R_OFFSET_DELTA] = np.arange(records.shape[1])
    return RecordColumns(data, np.zeros((bk.B_FIELDS, 0), np.int64), records,
                         np.zeros((bk.H_FIELDS, 0), np.int64))


def _columns(msgs) -> RecordColumns:
    ts, keys, values, headers = [], [], [], []
    for m in msgs:
        k, v, t, h = from_message(m)
        ts.append(t)
        keys.append(k)
        values.append(v)
        headers.append([(hk.encode("utf-8"), hv) for hk, hv in h])
    return RecordColumns.from_lists(ts, keys, values, headers)


def _read(store, topic: str, part: int, offset: int, limit: int) -> tuple[list, int]:
    """The store's batches of messages from ``offset`` while they stay within ``limit``
    bytes (at least one message), and the bytes they take. Batches are kept as the store
    returns them (a MessageBatch makes no message object until one is asked for)."""
    parts: list = []
    size = count = 0
    while size < limit:
        want = FIRST_CHUNK if not count else max(1, min(READ_CHUNK, (limit - size) // max(
            1, size // count) + 1))
        got = store.get(topic, part, offset, want)
        if got.status is not GetStatus.FOUND or not got.messages:
            if got.status is GetStatus.OFFSET_FOUND_NULL and got.next_offset > offset:
                offset = got.next_offset
                continue
            break
        batch = got.messages
        t = batch.table() if isinstance(batch, MessageBatch) else None
        if t is not None:
            f = t[1]
            sizes = (f[rk.F_BODY_END] - f[rk.F_BODY_AT] + RECORD_OVERHEAD).tolist()
        else:
            sizes = [len(m.body) + RECORD_OVERHEAD for m in batch]
        take = 0
        for n in sizes:
            if (count or take) and size + n > limit:
                break
            size += n
            take += 1
        if take < len(sizes):
            batch = MessageBatch(t[0], t[1][:, :take], topic) if t is not None \
                else list(batch)[:take]
            parts.append(batch)
            return parts, size
        parts.append(batch)
        count += take
        offset = got.next_offset
    return parts, size


def _pieces(parts: list) -> list[tuple]:
    """What a partition's answer writes: per store batch, (columns, plan, base offsets) —
    plain batches as columns over the store's own buffer (no concatenation: the bytes are
    copied once, by the batch writer, into the response), others as columns of their
    messages; one record batch per run of consecutive offsets."""
    pieces = []
    for p in parts:
        t = p.table() if isinstance(p, MessageBatch) else None
        cols = _plain_columns([p]) if t is not None else None
        if t is not None:
            offsets = t[1][rk.F_QUEUE_OFFSET]
        else:
            offsets = np.fromiter((m.queue_offset for m in p), np.int64)
        if cols is None:
            cols = _columns(list(p))
        if len(offsets) and offsets[-1] - offsets[0] == len(offsets) - 1:
            firsts = _ZERO
            counts = np.array([len(offsets)], np.int64)
        else:
            breaks = np.flatnonzero(np.diff(offsets) != 1) + 1
            firsts = np.concatenate(([0], breaks)).astype(np.int64)
            counts = np.diff(np.concatenate((firsts, [len(offsets)]))).astype(np.int64)
        plan = rb._plan(cols, firsts, counts)
        pieces.append((cols, plan, offsets[firsts]))
    return pieces


_ZERO = np.zeros(1, np.int64)


class PartitionAnswer:
    """One partition of the answer: its codes and offsets, and the record batches to write
    (None: null records, as on an error)."""

    __slots__ = ("partition_index", "error_code", "high_watermark", "log_start_offset",
                 "pieces", "size")

    def __init__(self, partition_index: int, error_code: int, high_watermark: int = -1,
                 log_start_offset: int = -1, pieces: list | None = None) -> None:
        self.partition_index = partition_index
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset
        self.pieces = pieces
        self.size = sum(pc[1][3] for pc in pieces) if pieces else 0


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">iihi")         # frame size, correlation id, error code, session id
_PART_V5 = struct.Struct(">ihqqqi")    # index, error, hw, last stable, log start, aborted
_PART_V4 = struct.Struct(">ihqqi")     # the same without the log start offset
_I32x2 = struct.Struct(">ii")


def _uvarint_len(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def _put_uvarint(out: np.ndarray, at: int, n: int) -> int:
    while n >= 0x80:
        out[at] = (n & 0x7F) | 0x80
        n >>= 7
        at += 1
    out[at] = n
    return at + 1


class FetchAnswer:
    """A Fetch response (versions 4-12) that encodes itself: every size is known before
    writing, so the frame is one buffer allocated once, its fixed fields packed in place
    and each partition's record batches written straight into it by the compiled batch
    writer (``record_batch._write``) from the store's buffers — no intermediate bytes per
    partition and no generic encoder regrowing its output. ``api.encode_response`` calls
    ``encode_framed``."""

    __slots__ = ("topics",)

    def __init__(self, topics: list[tuple[str, list[PartitionAnswer]]]) -> None:
        self.topics = topics

    def has_error(self) -> bool:
        return any(p.error_code != ke.NONE for _t, parts in self.topics for p in parts)

    def encode_framed(self, version: int, correlation_id: int) -> memoryview:
        if not 4 <= version <= 12:
            raise ValueError(f"Fetch v{version} is not encoded here")
        flex = version >= 12
        names = [t.encode("utf-8") for t, _p in self.topics]
        # sizes first
        size = 4 + 4 + (1 if flex else 0)                     # size, correlation id, tags
        size += 4 + (6 if version >= 7 else 0)                # throttle, error, session
        size += _uvarint_len(len(self.topics) + 1) if flex else 4
        part_fixed = 4 + 2 + 8 + 8 + (8 if version >= 5 else 0) + (1 if flex else 4) + \
            (4 if version >= 11 else 0)
        for name, (_t, parts) in zip(names, self.topics):
            size += (_uvarint_len(len(name) + 1) if flex else 2) + len(name)
            size += _uvarint_len(len(parts) + 1) if flex else 4
            for p in parts:
                size += part_fixed + p.size
                if flex:
                    size += 1 + (_uvarint_len(p.size + 1) if p.pieces is not None else 1)
                else:
                    size += 4
            size += 1 if flex else 0
        size += 1 if flex else 0
        out = np.empty(size, np.uint8)
        # then write
        if version >= 7:
            _HEAD.pack_into(out, 0, size - 4, correlation_id, 0, 0)   # throttle = 0
            at = 4 + 4
            if flex:
                out[at] = 0
                at += 1
            _I32.pack_into(out, at, 0)
            _I16.pack_into(out, at + 4, ke.NONE)
            _I32.pack_into(out, at + 6, 0)
            at += 10
        else:
            _I32x2.pack_into(out, 0, size - 4, correlation_id)
            _I32.pack_into(out, 8, 0)
            at = 12
        if flex:
            at = _put_uvarint(out, at, len(self.topics) + 1)
        else:
            _I32.pack_into(out, at, len(self.topics))
            at += 4
        for name, (_t, parts) in zip(names, self.topics):
            if flex:
                at = _put_uvarint(out, at, len(name) + 1)
            else:
                _I16.pack_into(out, at, len(name))
                at += 2
            out[at:at + len(name)] = np.frombuffer(name, np.uint8)
            at += len(name)
            if flex:
                at = _put_uvarint(out, at, len(parts) + 1)
            else:
                _I32.pack_into(out, at, len(parts))
                at += 4
            for p in parts:
                hw = p.high_watermark
                if version >= 5:
                    _PART_V5.pack_into(out, at, p.partition_index, p.error_code, hw, hw,
                                       p.log_start_offset, -1)
                    at += _PART_V5.size
                else:                          # no log start offset before v5
                    _PART_V4.pack_into(out, at, p.partition_index, p.error_code, hw, hw, -1)
                    at += _PART_V4.size
                if flex:                       # compact nullable array: 0 is null
                    at -= 4
                    out[at] = 0
                    at += 1
                if version >= 11:
                    _I32.pack_into(out, at, -1)          # preferred read replica
                    at += 4
                if p.pieces is None:
                    if flex:
                        out[at] = 0
                        at += 1
                    else:
                        _I32.pack_into(out, at, -1)
                        at += 4
                else:
                    if flex:
                        at = _put_uvarint(out, at, p.size + 1)
                    else:
                        _I32.pack_into(out, at, p.size)
                        at += 4
                    for cols, plan, bases in p.pieces:
                        at = rb._write(out, at, cols, plan, bases)
                if flex:
                    out[at] = 0
                    at += 1
            if flex:
                out[at] = 0
                at += 1
        if flex:
            out[at] = 0
            at += 1
        if at != size:
            raise AssertionError(f"Fetch answer: wrote {at} of {size} bytes")
        return memoryview(out)


def _partition(broker, topic: str, code: int, n: int, fp, budget: int) -> PartitionAnswer:
    store = broker.store
    p = fp.partition
    if code == ke.NONE and not 0 <= p < n:
        code = ke.UNKNOWN_TOPIC_OR_PARTITION
    if code != ke.NONE:
        return PartitionAnswer(p, code)
    hw = store.max_offset(topic, p)
    start = store.min_offset(topic, p)
    offset = fp.fetch_offset
    pieces: list = []
    if not start <= offset <= hw:
        code = ke.OFFSET_OUT_OF_RANGE
    elif offset < hw and budget > 0:
        try:
            parts, _size = _read(store, topic, p, offset,
                                 min(fp.partition_max_bytes, budget))
            pieces = _pieces(parts)
        except StrataError as exc:
            pieces, code = [], ke.code_for(exc)
    return PartitionAnswer(p, code, hw, start, pieces)


async def _answer(broker, request) -> FetchAnswer:
    budget = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    total = 0
    topics = []
    for ft in request.topics:
        code, n = await partitions(broker, ft.topic, create=False)
        parts = []
        for fp in ft.partitions:
            pa = _partition(broker, ft.topic, code, n, fp, budget - total)
            total += pa.size
            parts.append(pa)
        topics.append((ft.topic, parts))
    return FetchAnswer(topics)


@api.handles(1, 4, 12, flexible_from=12)
async def fetch(ctx: api.RequestContext, request):
    broker = ctx.broker
    deadline = time.monotonic() + max(0, request.max_wait_ms) / 1000
    target = broker.store.confirmed_offset()
    if broker.dispatched < target:
        # what was acknowledged before this fetch (a RocketMQ send, which is answered before
        # dispatch) is served by it: wait for dispatch to reach it, woken by the dispatch
        try:
            await asyncio.wait_for(broker.until_dispatched(target), CATCH_UP_S)
        except asyncio.TimeoutError:
            pass
    while True:
        arrival = broker.arrival()
        answer = await _answer(broker, request)
        total = sum(p.size for _t, parts in answer.topics for p in parts)
        left = deadline - time.monotonic()
        if total >= max(1, request.min_bytes) or left <= 0 or broker.stopping or \
                answer.has_error():
            broker.release()
            break
        await broker.wait_on(arrival, left)
    return answer
