"""Compiled read of records as Arrow ``binary_view`` columns (numba): ``get_columns``' one pass.

``views_at`` reads the records at known positions (consume-queue units) in ONE pass over their
bytes: each record's structure is checked (``record_kernels``' checks), the record is copied
8 bytes at a time into one new buffer, back to back, while its CRC32C is computed over the
same 8-byte words (so the bytes handed out are exactly the bytes checked, and the segment's
bytes are read once), its fields are read from the copy, and the 16-byte Arrow views of its
body and its properties section are written. Arrow's ``binary_view`` layout (the Arrow
columnar format, "Variable-size Binary View Layout"): int32 length, then for a length ≤ 12 the
bytes inline (zero padded), else a 4-byte prefix, an int32 buffer index (0: the one copy) and
an int32 offset into it. No body is copied on its own and no offsets are packed.

Pure functions over numpy arrays. Compiled on first use and cached beside this file.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from strata.format import record as rec
from strata.format import record_kernels as rk
from strata.format.record_kernels import (
    GOOD, _check, crc32c_at, load_i32, load_i64, load_u16, load_u32, load_u64, load_u8, memcpy)
from strata.format.record_table import (
    V_BODY_AT, V_BORN_TS, V_PHYS, V_PROPS_AT, V_QUEUE_OFFSET, V_STORE_TS)

_CRC_START = rec.CRC_START
_P_CRC = rec.POS_CRC
_INLINE = 12                 # a view holds at most this many bytes itself
MAX_SPAN = 2 ** 31 - 1       # a view's offset is an int32: larger reads take the binary path
_MASK = np.uint64(0xFFFFFFFF)
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


store_u64 = _unaligned_store(types.uint64, 64)
store_i32 = _unaligned_store(types.int64, 32)   # the low 32 bits of an int64


if rk.CRC_INSTRUCTION is not None:
    _crc64 = rk._crc64
    _crc8 = rk._crc8

    @njit(cache=True, nogil=True, inline="always")
    def copy_crc(dst, src, n):
        """Copy ``n`` bytes from address ``src`` to ``dst`` and return their CRC32C, in one
        pass: each 8-byte word loaded once, stored and folded into the CRC."""
        c = _MASK
        i = 0
        while i + 8 <= n:
            v = load_u64(src + i)
            store_u64(dst + i, v)
            c = _crc64(c, v)
            i += 8
        while i < n:
            b = load_u8(src + i)
            c = _crc8(c, np.uint64(b))
            memcpy(dst + i, src + i, 1)
            i += 1
        return np.uint32(c ^ _MASK)
else:   # pragma: no cover - only on CPUs without a CRC32C instruction
    @njit(cache=True, nogil=True, inline="always")
    def copy_crc(dst, src, n):
        """Copy ``n`` bytes from ``src`` to ``dst`` and return their CRC32C (table)."""
        memcpy(dst, src, n)
        return crc32c_at(dst, n)


@njit(cache=True, nogil=True, inline="always")
def _view(vb, i, base, a, ln):
    """Write view ``i`` (16 bytes at address ``vb``, zeroed by the caller) of the ``ln``
    bytes at position ``a`` of the buffer at address ``base`` (buffer 0)."""
    v = vb + 16 * i
    store_i32(v, ln)
    if ln <= _INLINE:
        memcpy(v + 4, base + a, ln)
    else:
        memcpy(v + 4, base + a, 4)
        store_i32(v + 12, a)


@njit(cache=True, nogil=True)
def views_at(data, pos, phys, limit, crc, topic, queue_id, queue_offsets, table,
             body_views, prop_views):
    """Read the records at ``pos`` (byte positions in ``data``, a uint8 array; ``phys`` the
    commit-log offset each must carry; below byte ``limit``) as views, in one pass: each must
    be a whole record (``record_kernels._check``), message ``queue_offsets[i]`` of
    ``queue_id`` and ``topic``, and with ``crc`` carry the CRC32C of its bytes, computed while
    they are copied into the one buffer returned. ``table`` (``record_table.V_*`` rows) gets
    each record's offsets, timestamps and properties section (positions in the copy);
    ``body_views`` / ``prop_views`` (4 × n int32, zeroed by the caller) the views of its body
    and properties section. Returns (how many records were read, the copy, the bytes of all
    properties sections); the read stops at the first record that is not as it must be (the
    caller then takes the per-record path, which says why): fewer than n and an empty copy.
    (-1, empty, 0) if the records add up to more than ``MAX_SPAN`` bytes (an int32 view
    offset cannot reach past it)."""
    empty = np.empty(0, np.uint8)
    base = data.ctypes.data
    limit = min(limit, len(data))
    n = len(pos)
    own = 0
    for i in range(n):   # the copy's size: each record's own length (checked below)
        p = pos[i]
        if p < 0 or p + 4 > limit:
            return i, empty, 0
        own += np.int64(load_u32(base + p))
    if own > MAX_SPAN:
        return -1, empty, 0
    span = np.empty(own, np.uint8)
    s0 = span.ctypes.data
    bv = body_views.ctypes.data
    pv = prop_views.ctypes.data
    tp = topic.ctypes.data
    tl = len(topic)
    q = 0
    props = 0
    for i in range(n):
        p = pos[i]
        st, total = _check(base, p, phys[i], limit, False)
        if st != GOOD or q + total > own:
            return i, empty, 0
        a = s0 + q
        memcpy(a, base + p, _CRC_START)
        if crc:
            if copy_crc(a + _CRC_START, base + p + _CRC_START, total - _CRC_START) != \
                    load_u32(a + _P_CRC):
                return i, empty, 0
        else:
            memcpy(a + _CRC_START, base + p + _CRC_START, total - _CRC_START)
        # the fields, from the copy: is it message queue_offsets[i] of queue_id and topic?
        flags = load_i32(a + _P_SYS)
        topic_at = q + _HEADER + (18 if flags & _BORN_V6 else 6) + \
            (18 if flags & _STORE_V6 else 6)
        if load_i32(a + _P_QID) != queue_id or load_i64(a + _P_QOFF) != queue_offsets[i] or \
                np.int64(load_u16(a + _P_TOPIC_LEN)) != tl:
            return i, empty, 0
        for j in range(tl):
            if load_u8(s0 + topic_at + j) != load_u8(tp + j):
                return i, empty, 0
        props_at = topic_at + tl
        body_at = props_at + np.int64(load_u16(a + _P_PROPS_LEN))
        table[V_QUEUE_OFFSET, i] = queue_offsets[i]
        table[V_PHYS, i] = phys[i]
        table[V_STORE_TS, i] = load_i64(a + _P_STORE)
        table[V_BORN_TS, i] = load_i64(a + _P_BORN)
        table[V_PROPS_AT, i] = props_at
        table[V_BODY_AT, i] = body_at
        _view(bv, i, s0, body_at, np.int64(load_u32(a + _P_BODY_LEN)))
        _view(pv, i, s0, props_at, body_at - props_at)
        props += body_at - props_at
        q += total
    return n, span, props
