"""Compiled checks of commit-log message records (numba): the one pass every reader runs.

``check_at`` checks records whose start positions are known (consume-queue units: ``get``);
``walk`` checks the records that follow one another from a position (``scan``, recovery,
``verify``). Both test what ``record.check_record`` tests — magic, length at both ends, field
lengths adding up, the record's own commit-log offset, and the CRC32C of bytes
``[CRC_START, total)`` — and write each good record's fixed fields and section positions into
one int64 table (rows ``F_*``), from which messages are built only when asked for
(``record_batch.MessageBatch``). Every position is checked against the readable limit before a
byte is read, so damaged bytes are reported, never read out of bounds.

CRC32C runs on the CPU's instruction (SSE 4.2 ``crc32``; ARMv8 ``crc32c``) where there is one,
8 bytes a step; elsewhere on a table, a byte a step. Loads are native-endian, which is the
format's little-endian on the x86-64 and arm64 machines strata runs on. Compiled on first use
and cached beside this file (``cache=True``). Pure functions over buffers: no file I/O.
"""

from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from strata.format import record as rec
from strata.format.record_table import (  # noqa: F401 - the kernels' interface
    CRC_MISMATCH, F_BODY_AT, F_BODY_END, F_BORN_TS, F_FLAG, F_HOSTS_AT, F_PHYS, F_PROPS_AT,
    F_QUEUE_ID, F_QUEUE_OFFSET, F_RECONSUME, F_STORE_TS, F_SYS_FLAG, F_TOPIC_AT, F_TOTAL,
    F_TX_OFFSET, FIELDS, GOOD, NO_RECORD, OTHER, WALK_BAD, WALK_BLANK, WALK_END)

# --------------------------------------------------------------------------- raw loads


@intrinsic
def memcpy(typingctx, dst, src, n):
    """``memcpy(dst address, src address, n)``."""
    def codegen(context, builder, signature, args):
        d, s, k = args
        i8p = ir.IntType(8).as_pointer()
        fn = builder.module.declare_intrinsic("llvm.memcpy", [i8p, i8p, ir.IntType(64)])
        builder.call(fn, [builder.inttoptr(d, i8p), builder.inttoptr(s, i8p), k,
                          ir.Constant(ir.IntType(1), 0)])
        return context.get_dummy_value()
    return types.void(types.uintp, types.uintp, types.int64), codegen


def _unaligned_load(nbtype):
    """A compiled ``load(address)`` of one ``nbtype`` at any alignment."""
    @intrinsic
    def load(typingctx, addr):
        def codegen(context, builder, signature, args):
            ptr = builder.inttoptr(args[0], context.get_value_type(nbtype).as_pointer())
            return builder.load(ptr, align=1)
        return nbtype(types.uintp), codegen
    return load


load_u8 = _unaligned_load(types.uint8)
load_u16 = _unaligned_load(types.uint16)
load_u32 = _unaligned_load(types.uint32)
load_i32 = _unaligned_load(types.int32)
load_i64 = _unaligned_load(types.int64)
load_u64 = _unaligned_load(types.uint64)

# --------------------------------------------------------------------------- CRC32C

_MACHINE = platform.machine().lower()
CRC_INSTRUCTION = ("sse4.2" if _MACHINE in ("x86_64", "amd64") else
                   "armv8-crc" if _MACHINE in ("aarch64", "arm64") else None)


def _crc_intrinsic(width: int):
    """``step(crc, value)``: the CPU's CRC32C of ``width`` bits of ``value`` onto ``crc``."""
    @intrinsic
    def step(typingctx, crc, value):
        def codegen(context, builder, signature, args):
            i32, iw = ir.IntType(32), ir.IntType(width)
            c = builder.trunc(args[0], i32)
            v = builder.trunc(args[1], iw) if width < 64 else args[1]
            if CRC_INSTRUCTION == "sse4.2":
                acc = ir.IntType(64) if width == 64 else i32
                fnty = ir.FunctionType(acc, [acc, iw])
                fn = builder.module.declare_intrinsic(
                    f"llvm.x86.sse42.crc32.{'64' if width == 64 else '32'}.{width}", fnty=fnty)
                out = builder.call(fn, [builder.zext(c, acc) if width == 64 else c, v])
                out = builder.trunc(out, i32) if width == 64 else out
            else:   # armv8: crc32cb / crc32ch / crc32cw / crc32cx
                arg = ir.IntType(64) if width == 64 else i32
                fnty = ir.FunctionType(i32, [i32, arg])
                name = "llvm.aarch64.crc32c" + {8: "b", 16: "h", 32: "w", 64: "x"}[width]
                fn = builder.module.declare_intrinsic(name, fnty=fnty)
                out = builder.call(fn, [c, v if width >= 32 else builder.zext(v, i32)])
            return builder.zext(out, ir.IntType(64))
        return types.uint64(types.uint64, types.uint64), codegen
    return step


def _crc_table() -> np.ndarray:
    table = np.zeros(256, np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table[i] = c
    return table


_TABLE = _crc_table()


@njit(cache=True, nogil=True)
def crc32c_table(address, n):
    """CRC32C of ``n`` bytes at ``address``, a byte at a time on a table (any CPU)."""
    c = np.uint32(0xFFFFFFFF)
    for i in range(n):
        c = _TABLE[(c ^ load_u8(address + i)) & 0xFF] ^ (c >> np.uint32(8))
    return np.uint32(c ^ np.uint32(0xFFFFFFFF))


if CRC_INSTRUCTION is not None:
    _crc64 = _crc_intrinsic(64)
    _crc32 = _crc_intrinsic(32)
    _crc16 = _crc_intrinsic(16)
    _crc8 = _crc_intrinsic(8)

    @njit(cache=True, nogil=True, inline="always")
    def crc_more(c, address, n):
        """CRC32C state ``c`` (uint64; not inverted at the end) carried over ``n`` bytes at
        ``address``, 8 bytes a step, the last 0–7 in at most three steps (4, 2, 1 bytes:
        byte by byte, up to 7 dependent steps of the instruction's 3-cycle latency, cost
        a 193-byte record about a third of its CRC)."""
        i = 0
        while i + 8 <= n:
            c = _crc64(c, load_u64(address + i))
            i += 8
        if i + 4 <= n:
            c = _crc32(c, np.uint64(load_u32(address + i)))
            i += 4
        if i + 2 <= n:
            c = _crc16(c, np.uint64(load_u16(address + i)))
            i += 2
        if i < n:
            c = _crc8(c, np.uint64(load_u8(address + i)))
        return c

    @njit(cache=True, nogil=True)
    def crc32c_at(address, n):
        """CRC32C of ``n`` bytes at ``address`` on the CPU's CRC instruction."""
        return np.uint32(crc_more(np.uint64(0xFFFFFFFF), address, n) ^ np.uint64(0xFFFFFFFF))

    @njit(cache=True, nogil=True, inline="always")
    def crc3(a0, n0, a1, n1, a2, n2):
        """The CRC32C of three byte runs (``n*`` bytes at address ``a*``) as three
        independent chains in one loop: the CPU overlaps the CRC instruction's latency (3
        cycles; one issued a cycle), so records go up to three times as fast as one by one."""
        m = min(n0, min(n1, n2)) & ~7
        c0 = np.uint64(0xFFFFFFFF)
        c1 = np.uint64(0xFFFFFFFF)
        c2 = np.uint64(0xFFFFFFFF)
        j = 0
        while j < m:
            c0 = _crc64(c0, load_u64(a0 + j))
            c1 = _crc64(c1, load_u64(a1 + j))
            c2 = _crc64(c2, load_u64(a2 + j))
            j += 8
        c0 = crc_more(c0, a0 + m, n0 - m)
        c1 = crc_more(c1, a1 + m, n1 - m)
        c2 = crc_more(c2, a2 + m, n2 - m)
        mask = np.uint64(0xFFFFFFFF)
        return np.uint32(c0 ^ mask), np.uint32(c1 ^ mask), np.uint32(c2 ^ mask)
else:   # pragma: no cover - only on CPUs without a CRC32C instruction
    crc32c_at = crc32c_table

    @njit(cache=True, nogil=True)
    def crc_more(c, address, n):
        """CRC32C state ``c`` carried over ``n`` bytes at ``address`` (table)."""
        c = np.uint64(c)
        for i in range(n):
            c = np.uint64(_TABLE[(c ^ load_u8(address + i)) & 0xFF]) ^ (c >> np.uint64(8))
        return c

    @njit(cache=True, nogil=True, inline="always")
    def crc3(a0, n0, a1, n1, a2, n2):
        """The CRC32C of three byte runs (table)."""
        return crc32c_at(a0, n0), crc32c_at(a1, n1), crc32c_at(a2, n2)


@njit(cache=True, nogil=True)
def crc32c_of(data, start, end):
    """CRC32C of ``data[start:end]`` (``data`` a uint8 array)."""
    return crc32c_at(data.ctypes.data + start, end - start)


@njit(cache=True, nogil=True)
def crc32c_ranges(data, starts, stops, out):
    """``out[i]`` = CRC32C of ``data[starts[i]:stops[i]]`` (``data`` a uint8 array): the
    records' CRCs of a batch in one call instead of one Python call each."""
    base = data.ctypes.data
    for i in range(len(starts)):
        out[i] = crc32c_at(base + starts[i], stops[i] - starts[i])


# --------------------------------------------------------------------------- the record checks

# The field table's rows and the verdicts: strata.format.record_table.

_HEADER = rec.HEADER_SIZE
_TRAILER = rec.TRAILER_SIZE
_MIN_RECORD = rec.HEADER_SIZE + 12 + rec.TRAILER_SIZE
_MAGIC = rec.MESSAGE_MAGIC
_BLANK = rec.BLANK_MAGIC
_BORN_V6 = rec.SYSFLAG_BORN_HOST_V6
_STORE_V6 = rec.SYSFLAG_STORE_HOST_V6
_P_MAGIC, _P_CRC, _P_QID, _P_FLAG = rec.POS_MAGIC, rec.POS_CRC, rec.POS_QUEUE_ID, rec.POS_FLAG
_P_QOFF, _P_PHYS, _P_SYS = rec.POS_QUEUE_OFFSET, rec.POS_PHYSICAL_OFFSET, rec.POS_SYS_FLAG
_P_BORN, _P_STORE = rec.POS_BORN_TIMESTAMP, rec.POS_STORE_TIMESTAMP
_P_TX, _P_RECONSUME = rec.POS_TX_OFFSET, rec.POS_RECONSUME_TIMES
_P_BODY_LEN, _P_TOPIC_LEN, _P_PROPS_LEN = \
    rec.POS_BODY_LENGTH, rec.POS_TOPIC_LENGTH, rec.POS_PROPERTIES_LENGTH
_CRC_START = rec.CRC_START


@njit(cache=True, nogil=True, inline="always")
def frame(base, p, phys, limit):
    """The structure of the record at byte ``p`` (address ``base + p``) below ``limit``:
    magic, length at both ends, field lengths adding up, its own commit-log offset ``phys``.
    Returns its length, or 0 if one of those does not hold."""
    if p < 0 or p + _MIN_RECORD > limit:
        return 0
    a = base + p
    total = np.int64(load_u32(a))
    if load_u32(a + _P_MAGIC) != _MAGIC or total < _MIN_RECORD or p + total > limit or \
            load_i64(a + _P_PHYS) != phys or np.int64(load_u32(a + total - _TRAILER)) != total:
        return 0
    flags = load_i32(a + _P_SYS)
    hosts = (18 if flags & _BORN_V6 else 6) + (18 if flags & _STORE_V6 else 6)
    if _HEADER + hosts + np.int64(load_u16(a + _P_TOPIC_LEN)) + \
            np.int64(load_u16(a + _P_PROPS_LEN)) + np.int64(load_u32(a + _P_BODY_LEN)) + \
            _TRAILER != total:
        return 0
    return total


@njit(cache=True, nogil=True)
def _check(base, p, phys, limit, crc):
    """The record at byte ``p`` (address ``base + p``) below ``limit``: (status, total)."""
    total = frame(base, p, phys, limit)
    if total == 0:
        return NO_RECORD, 0
    a = base + p
    if crc and crc32c_at(a + _CRC_START, total - _CRC_START) != load_u32(a + _P_CRC):
        return CRC_MISMATCH, total
    flags = load_i32(a + _P_SYS)
    t = a + _HEADER + (18 if flags & _BORN_V6 else 6) + (18 if flags & _STORE_V6 else 6)
    for j in range(np.int64(load_u16(a + _P_TOPIC_LEN))):   # a topic name is ASCII
        if load_u8(t + j) >= 0x80:                          # (record.decode_topic)
            return NO_RECORD, 0
    return GOOD, total


@njit(cache=True, nogil=True)
def _fill(base, p, total, fields, r):
    """Write the fields of the (checked) record at byte ``p`` into column ``r``."""
    a = base + p
    flags = load_i32(a + _P_SYS)
    hosts_at = p + _HEADER
    topic_at = hosts_at + (18 if flags & _BORN_V6 else 6) + (18 if flags & _STORE_V6 else 6)
    props_at = topic_at + np.int64(load_u16(a + _P_TOPIC_LEN))
    body_at = props_at + np.int64(load_u16(a + _P_PROPS_LEN))
    fields[F_TOTAL, r] = total
    fields[F_QUEUE_ID, r] = load_i32(a + _P_QID)
    fields[F_FLAG, r] = load_i32(a + _P_FLAG)
    fields[F_QUEUE_OFFSET, r] = load_i64(a + _P_QOFF)
    fields[F_PHYS, r] = load_i64(a + _P_PHYS)
    fields[F_SYS_FLAG, r] = flags
    fields[F_BORN_TS, r] = load_i64(a + _P_BORN)
    fields[F_STORE_TS, r] = load_i64(a + _P_STORE)
    fields[F_TX_OFFSET, r] = load_i64(a + _P_TX)
    fields[F_RECONSUME, r] = load_i32(a + _P_RECONSUME)
    fields[F_HOSTS_AT, r] = hosts_at
    fields[F_TOPIC_AT, r] = topic_at
    fields[F_PROPS_AT, r] = props_at
    fields[F_BODY_AT, r] = body_at
    fields[F_BODY_END, r] = body_at + np.int64(load_u32(a + _P_BODY_LEN))


@njit(cache=True, nogil=True)
def check_at(data, pos, phys, limit, crc, topic, queue_id, queue_offsets, fields, status):
    """Check the records at ``pos`` (byte positions in ``data``, a uint8 array; ``phys`` the
    commit-log offset each must carry) below byte ``limit``, CRC32C too with ``crc``, into
    ``status[i]`` (GOOD, OTHER, NO_RECORD, CRC_MISMATCH) and ``fields[:, i]`` (filled for GOOD
    and OTHER). With ``queue_id`` >= 0 a record is GOOD only if it is message
    ``queue_offsets[i]`` of ``queue_id`` and its topic bytes equal ``topic``; else OTHER.
    Returns (how many are GOOD, the bytes of their variable parts: hosts to body end)."""
    base = data.ctypes.data
    limit = min(limit, len(data))
    tl = len(topic)
    good = 0
    nbytes = 0
    for i in range(len(pos)):
        p = pos[i]
        st, total = _check(base, p, phys[i], limit, crc)
        status[i] = st
        if st != GOOD:
            continue
        _fill(base, p, total, fields, i)
        if queue_id >= 0:
            same = fields[F_QUEUE_ID, i] == queue_id and \
                fields[F_QUEUE_OFFSET, i] == queue_offsets[i] and \
                fields[F_PROPS_AT, i] - fields[F_TOPIC_AT, i] == tl
            if same:
                t = fields[F_TOPIC_AT, i]
                for j in range(tl):
                    if data[t + j] != topic[j]:
                        same = False
                        break
            if not same:
                status[i] = OTHER
                continue
        good += 1
        nbytes += fields[F_BODY_END, i] - fields[F_HOSTS_AT, i]
    return good, nbytes


@njit(cache=True, nogil=True)
def pack(data, fields, status, out):
    """Copy the variable parts (hosts to body end) of the GOOD records (``fields`` columns
    where ``status`` is GOOD, positions in ``data``) one after another into ``out``, and move
    their columns to the front of ``fields`` with positions relative to ``out``. Returns how
    many were packed. The caller checked every range against ``data`` and sized ``out``."""
    return pack_to(data, fields, status, out.ctypes.data)


@njit(cache=True, nogil=True)
def pack_to(data, fields, status, o0):
    """``pack`` into the memory at address ``o0`` (a new bytes object's, say: see
    ``record_objects.new_bytes``), which the caller sized."""
    return _pack_to(data, fields, status, o0, F_BODY_END)


@njit(cache=True, nogil=True)
def pack_heads_to(data, fields, status, o0):
    """``pack_to`` of each record's hosts, topic and properties only (not its body: a reader
    that makes the bodies straight from ``data`` keeps the rest in one small buffer); each
    packed column's body position and end are both where its properties end."""
    return _pack_to(data, fields, status, o0, F_BODY_AT)


@njit(cache=True, nogil=True, inline="always")
def _pack_to(data, fields, status, o0, end_row):
    s0 = data.ctypes.data
    at = 0
    r = 0
    for i in range(len(status)):
        if status[i] != GOOD:
            continue
        start = fields[F_HOSTS_AT, i]
        n = fields[end_row, i] - start
        memcpy(o0 + at, s0 + start, n)
        if r != i:
            for k in range(FIELDS):
                fields[k, r] = fields[k, i]
        for k in range(F_HOSTS_AT, end_row + 1):
            fields[k, r] += at - start
        if end_row != F_BODY_END:
            fields[F_BODY_END, r] = fields[F_BODY_AT, r]
        at += n
        r += 1
    return r


@njit(cache=True, nogil=True)
def walk(data, start, end, base_offset, crc_from, fields, first, rows):
    """Check the records that follow one another from byte ``start`` of ``data`` (a segment's
    map) up to byte ``end``; a record at byte ``p`` must carry commit-log offset
    ``base_offset + p``. CRC32C is checked for records that end after byte ``crc_from``. The
    fields of at most ``rows`` good records go to ``fields[:, first:]``.

    Returns (records found, stop position, why: WALK_END, WALK_BLANK or WALK_BAD)."""
    addr = data.ctypes.data
    end = min(end, len(data))
    p = start
    n = 0
    while p < end:
        if n == rows:
            return n, p, WALK_END
        if p + 8 <= end and load_u32(addr + p + _P_MAGIC) == _BLANK:
            return n, p, WALK_BLANK
        st, total = _check(addr, p, base_offset + p, end, False)
        if st != GOOD:
            return n, p, WALK_BAD
        if p + total > crc_from and \
                crc32c_at(addr + p + _CRC_START, total - _CRC_START) != \
                load_u32(addr + p + _P_CRC):
            return n, p, WALK_BAD
        _fill(addr, p, total, fields, first + n)
        n += 1
        p += total
    return n, p, WALK_END
