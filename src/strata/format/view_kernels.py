"""Compiled read of records as Arrow ``binary_view`` columns (numba): ``get_columns``' one pass.

``views_at`` reads the records of consume-queue units. Records that lie back to back (as the
records of a queue written alone do) are read IN PLACE: the views point into the segment's
map, nothing is copied, and the caller's array of that map keeps it alive as long as any
view does (``MappedSegment.close`` leaves a map with live views to them; the segment files
are never truncated under a map: retention and tiering unlink whole files, and recovery,
at open, zeroes only what follows the last whole, checked record). Other records are copied into one
new buffer and read from it. Either way each record's structure is checked
(``record_kernels.frame``), that it is the unit's message, its CRC32C (three records at a
time), and its offsets, timestamps and the 16-byte Arrow views of its body and its
properties section are written. Arrow's ``binary_view`` layout (the Arrow columnar format,
"Variable-size Binary View Layout"): int32 length, then for a length ≤ 12 the bytes inline
(zero padded), else a 4-byte prefix, an int32 buffer index (0: the map's span or the copy)
and an int32 offset into it. No body is copied on its own and no offsets are packed.

Read in place, the span is laid out from the units' sizes (no record byte read before the
checks; each record's own length must match) and the map, cold in the CPU's caches, is asked
in ``PREFETCH`` bytes ahead of the checks. The compiled pass with CRC32C, 1000 records a call
(2026-11-27, in one process, against ``cb50d86``'s copying pass): 100 B 28–30 ns a record
against 43–46, 1 KiB 77–113 against 189–208 (an in-place pass without the prefetch: 167–231).
``PREFETCH`` is 2 KiB: with the records cold (a 64 MiB array summed before each pass, 1000
records a call, 2026-11-28) 1 KiB records took 74–83 ns at 2 KiB ahead against 100–106 at
8 KiB, 94–115 at 4 KiB, ~100 at 1 KiB, 109–118 at 512 B and ~190 without; 100 B 24.8–25.3
against 25.5–26.7 (further ahead, more lines are asked than the core can have in flight).

When copying: why copy first and check the copy, not copy while checking: folding the CRC into a word-by-word
copy was 1.6× slower for 1 KiB records read from memory than ``memcpy`` (which streams) and a
CRC over the copy in cache (three records at a time: the CRC instruction's latency is 3
cycles, its throughput 1 a cycle).

Pure functions over numpy arrays. Compiled on first use and cached beside this file.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from strata.format import record as rec
from strata.format.consume_queue import BLANK_SIZE, UNIT_SIZE
from strata.format.record_kernels import (
    crc3, frame, load_i32, load_i64, load_u16, load_u32, load_u64, load_u8, memcpy)
from strata.format.record_table import (
    V_BODY_AT, V_BORN_TS, V_PHYS, V_PROPS_AT, V_QUEUE_OFFSET, V_STORE_TS)

_CRC_START = rec.CRC_START
_P_CRC = rec.POS_CRC
_INLINE = 12                 # a view holds at most this many bytes itself
PAD = 16                     # bytes after the copy's last record (inline views read words)
PREFETCH = 2048              # read in place: how far ahead of the checks the cache is filled
MAX_SPAN = 2 ** 31 - 1       # a view's offset is an int32: larger reads take the binary path
_MASK = np.uint64(0xFFFFFFFF)
_UNIT = UNIT_SIZE            # a consume-queue unit: i64 commit-log offset, i32 size, i64 tag
_BLANK_UNIT = BLANK_SIZE
_HEADER = rec.HEADER_SIZE
_BORN_V6, _STORE_V6 = rec.SYSFLAG_BORN_HOST_V6, rec.SYSFLAG_STORE_HOST_V6
_P_SYS, _P_QID, _P_QOFF = rec.POS_SYS_FLAG, rec.POS_QUEUE_ID, rec.POS_QUEUE_OFFSET
_P_PHYS, _P_BORN, _P_STORE = rec.POS_PHYSICAL_OFFSET, rec.POS_BORN_TIMESTAMP, \
    rec.POS_STORE_TIMESTAMP
_P_TOPIC_LEN, _P_PROPS_LEN, _P_BODY_LEN = \
    rec.POS_TOPIC_LENGTH, rec.POS_PROPERTIES_LENGTH, rec.POS_BODY_LENGTH


def _unaligned_store(nbtype, width: int):
    """A compiled ``store(address, value)`` of one ``nbtype`` at any alignment."""
    @intrinsic
    def store(typingctx, addr, value):
        def codegen(context, builder, signature, args):
            ptr = builder.inttoptr(args[0], ir.IntType(width).as_pointer())
            builder.store(builder.trunc(args[1], ir.IntType(width)) if width < 64 else
                          args[1], ptr, align=1)
            return context.get_dummy_value()
        return types.void(types.uintp, nbtype), codegen
    return store


@intrinsic
def prefetch(typingctx, addr):
    """Ask the CPU to bring the cache line at ``addr`` in (``llvm.prefetch``: a read, kept
    in all levels); no effect on what a program computes."""
    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = builder.module.declare_intrinsic(
            "llvm.prefetch", [i8p], ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]))
        builder.call(fn, [builder.inttoptr(args[0], i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()
    return types.void(types.uintp), codegen


store_u64 = _unaligned_store(types.uint64, 64)
store_i32 = _unaligned_store(types.int64, 32)   # the low 32 bits of an int64


@njit(cache=True, nogil=True, inline="always")
def _view(vb, i, base, a, ln):
    """Write view ``i`` (16 bytes at address ``vb``) of the ``ln`` bytes at position ``a`` of
    the buffer at address ``base`` (buffer 0), with plain loads and stores: the inline bytes
    are read as one 8- and one 4-byte word and masked to ``ln`` (the copy has ``PAD`` bytes
    after its last record, so the words never reach past it)."""
    v = vb + 16 * i
    src = base + a
    store_i32(v, ln)
    if ln <= _INLINE:
        lo = load_u64(src)
        hi = np.uint64(load_u32(src + 8))
        if ln < 8:
            lo &= (np.uint64(1) << np.uint64(8 * ln)) - np.uint64(1)
            hi = np.uint64(0)
        else:
            hi &= (np.uint64(1) << np.uint64(8 * (ln - 8))) - np.uint64(1)
        store_u64(v + 4, lo)
        store_i32(v + 12, np.int64(hi))
    else:
        store_i32(v + 4, np.int64(load_u32(src)))
        store_i32(v + 8, 0)
        store_i32(v + 12, a)


@njit(cache=True, nogil=True, inline="always")
def _take(s0, q, i, topic, queue_id, queue_offset, phys, table, views):
    """Read the fields of the record copied at position ``q`` of the copy (address ``s0``)
    into column ``i`` of ``table`` and write its views; False unless it is message
    ``queue_offset`` of ``queue_id`` and ``topic``. Returns (ok, its properties' bytes)."""
    a = s0 + q
    tl = len(topic)
    flags = load_i32(a + _P_SYS)
    topic_at = q + _HEADER + (18 if flags & _BORN_V6 else 6) + (18 if flags & _STORE_V6 else 6)
    if load_i32(a + _P_QID) != queue_id or load_i64(a + _P_QOFF) != queue_offset or \
            np.int64(load_u16(a + _P_TOPIC_LEN)) != tl:
        return False, 0
    for j in range(tl):
        if load_u8(s0 + topic_at + j) != topic[j]:
            return False, 0
    props_at = topic_at + tl
    body_at = props_at + np.int64(load_u16(a + _P_PROPS_LEN))
    table[V_QUEUE_OFFSET, i] = queue_offset
    table[V_PHYS, i] = phys
    table[V_STORE_TS, i] = load_i64(a + _P_STORE)
    table[V_BORN_TS, i] = load_i64(a + _P_BORN)
    table[V_PROPS_AT, i] = props_at
    table[V_BODY_AT, i] = body_at
    _view(views.ctypes.data, i, s0, body_at, np.int64(load_u32(a + _P_BODY_LEN)))
    _view(views.ctypes.data + 16 * table.shape[1], i, s0, props_at, body_at - props_at)
    return True, body_at - props_at


@njit(cache=True, nogil=True)
def views_at(data, units, delta, limit, crc, topic, queue_id, first_offset, table, views,
             in_place):
    """Read the records of consume-queue ``units`` (their bytes, ``UNIT_SIZE`` each: the
    record's commit-log offset, its size) as views. A record's position in ``data`` (a uint8
    array, readable below byte ``limit``) is its offset less ``delta``. With ``in_place``,
    records that lie back to back (as a queue written alone does) are read where they are:
    the views point into ``data`` itself, nothing is copied. Otherwise they are copied into
    one new buffer (ONE ``memcpy`` when back to back, else one per record), and everything
    after is read from that copy, so the bytes handed out are the bytes checked. Either way
    each must be a whole record (``record_kernels.frame``), message ``first_offset + i`` of
    ``queue_id`` and ``topic``, and with ``crc`` carry the CRC32C of its bytes (three records
    at a time). ``table`` (``record_table.V_*`` rows) gets each record's offsets, timestamps
    and properties section (positions in the span read); ``views`` (2 × 4n int32) the views
    of its body (row 0) and properties section (row 1). Returns (how many records were read,
    the copy, the bytes of all properties sections, where the span starts in ``data`` when
    read in place, else -1 — the copy is then empty —, the span's length); the read stops at the first record that
    is not as it must be (the caller then takes the per-record path, which says why): fewer
    than n. The span is laid out from the units' sizes (no record byte is read for it);
    each record's own length must equal its unit's size. (-1, empty, 0, -1, 0) if the records add up to more than ``MAX_SPAN`` bytes (an int32
    view offset cannot reach past it)."""
    base = data.ctypes.data
    ub = units.ctypes.data
    limit = min(limit, len(data))
    n = len(units) // _UNIT
    at = np.empty(n, np.int64)   # each record's place in the span
    if in_place:
        got = _in_place(base, len(data), ub, n, at, delta, limit, crc, topic, queue_id,
                        first_offset, table, views)
        if got[0] != -2:
            return got
    return _copied(base, ub, n, at, delta, limit, crc, topic, queue_id, first_offset, table,
                   views)


@njit(cache=True, nogil=True)
def in_place(data, units, at, n, delta, limit, crc, topic, queue_id, first_offset, table,
             views, pos):
    """``views_at`` in place only, over the ``n`` units at byte ``at`` of ``units`` (the
    consume-queue file's map, read where it lies), ``pos`` (≥ n int64) the scratch for each
    record's place in the span: (how many records were read — -2 if they do not lie back to
    back, so cannot be read in place —, the bytes of all properties sections, where the span
    starts in ``data``, its length)."""
    good, _none, props, start, own = _in_place(
        data.ctypes.data, len(data), units.ctypes.data + at, n, pos, delta,
        min(limit, len(data)), crc, topic, queue_id, first_offset, table, views)
    return good, props, start, own


@njit(cache=True, nogil=True, inline="always")
def _in_place(base, size, ub, n, at, delta, limit, crc, topic, queue_id, first_offset, table,
              views):
    """``views_at`` in place (the map at ``base``, ``size`` bytes; ``n`` units at ``ub``):
    the span laid out from the units' sizes (no record byte read for it: ``_checked``
    compares each record's own length); (-2, ...) when the records do not lie back to back or
    end within ``PAD`` bytes of the map's end (then copied: the views' inline bytes are read
    as whole words)."""
    empty = np.empty(0, np.uint8)
    start = load_i64(ub) - delta
    own = 0
    for i in range(n):
        p = load_i64(ub + _UNIT * i) - delta
        total = np.int64(load_i32(ub + _UNIT * i + 8))
        if total == _BLANK_UNIT or total < 4 or p != start + own or p + total > limit:
            return -2, empty, 0, -1, 0
        at[i] = own
        own += total
    if own > MAX_SPAN or start < 0 or start + own + PAD > size:
        return -2, empty, 0, -1, 0
    good, props = _checked(base + start, at, own, n, ub, crc, topic, queue_id, first_offset,
                           table, views, PREFETCH)
    if good < n:
        return good, empty, 0, -1, 0
    return n, empty, props, start, own


@njit(cache=True, nogil=True, inline="always")
def _copied(base, ub, n, at, delta, limit, crc, topic, queue_id, first_offset, table, views):
    """``views_at`` over a copy of the records."""
    empty = np.empty(0, np.uint8)
    own = 0
    together = True
    prev_end = -1
    for i in range(n):   # each record's place in the copy (its length is checked there)
        p = load_i64(ub + _UNIT * i) - delta
        if load_i32(ub + _UNIT * i + 8) == _BLANK_UNIT or p < 0 or p + 4 > limit:
            return i, empty, 0, -1, 0
        total = np.int64(load_u32(base + p))
        if total < 4 or p + total > limit:
            return i, empty, 0, -1, 0
        together = together and (i == 0 or p == prev_end)
        prev_end = p + total
        at[i] = own
        own += total
    if own > MAX_SPAN:
        return -1, empty, 0, -1, 0
    span = np.empty(own + PAD, np.uint8)
    span[own:] = 0
    s0 = span.ctypes.data
    if together:   # a queue's records back to back (one queue written alone): one copy
        memcpy(s0, base + load_i64(ub) - delta, own)
    else:
        for i in range(n):
            memcpy(s0 + at[i], base + load_i64(ub + _UNIT * i) - delta,
                   (at[i + 1] if i + 1 < n else own) - at[i])
    good, props = _checked(s0, at, own, n, ub, crc, topic, queue_id, first_offset, table,
                           views, 0)
    if good < n:
        return good, empty, 0, -1, 0
    return n, span[:own], props, -1, own


@njit(cache=True, nogil=True, inline="always")
def _checked(s0, at, own, n, ub, crc, topic, queue_id, first_offset, table, views, ahead):
    """Check the ``n`` records at ``at`` of the span at address ``s0`` (``own`` bytes) and
    write their table columns and views: each a whole record of exactly its place's length,
    with ``crc`` its CRC32C (three at a time), the unit's message. ``ahead`` > 0: the span is
    read cold, keep that many bytes asked into the cache ahead of the checks. Returns (how
    many were good before the first that is not, the bytes of their properties sections)."""
    props = 0
    i = 0
    asked = 0
    while i < n:
        k = min(3, n - i)
        if ahead > 0:
            want = min(own, at[i] + ahead)
            while asked < want:
                prefetch(s0 + asked)
                asked += 64
        for t in range(k):
            phys = load_i64(ub + _UNIT * (i + t))
            size = (at[i + t + 1] if i + t + 1 < n else own) - at[i + t]
            if frame(s0, at[i + t], phys, own) != size:   # (its topic is compared below)
                return i + t, 0
        if crc:
            a0 = s0 + at[i]
            a1 = s0 + at[i + 1] if k > 1 else a0
            a2 = s0 + at[i + 2] if k > 2 else a0
            e = (at[i + k] if i + k < n else own)
            n0 = (at[i + 1] if k > 1 else e) - at[i]
            n1 = (at[i + 2] if k > 2 else e) - at[i + 1] if k > 1 else n0
            n2 = e - at[i + 2] if k > 2 else n0
            c0, c1, c2 = crc3(a0 + _CRC_START, n0 - _CRC_START, a1 + _CRC_START,
                              n1 - _CRC_START, a2 + _CRC_START, n2 - _CRC_START)
            if c0 != load_u32(a0 + _P_CRC) or c1 != load_u32(a1 + _P_CRC) or \
                    c2 != load_u32(a2 + _P_CRC):
                return i, 0
        for t in range(k):
            ok, pb = _take(s0, at[i + t], i + t, topic, queue_id, first_offset + i + t,
                           load_i64(ub + _UNIT * (i + t)), table, views)
            if not ok:
                return i + t, 0
            props += pb
        i += k
    return n, props
