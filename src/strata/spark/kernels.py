"""Compiled loops of the Spark decoder (numba): one pass over a batch's record headers, one
over their properties sections, and a byte-range gather into an Arrow data buffer.

numpy needs a pass per operation (gather the 76-byte headers, then every field, sum, compare,
offset arithmetic, gather the bodies), and per-row Python for the properties; here one loop
reads each header where it lies and copies each body with memcpy. On a hot 65k-record batch
the header pass takes 9 ns per record instead of 29 and the value gather 13 instead of 22; a
whole read's decode is about a fifth faster (the rest is memory-bound), and the metadata
columns about ten times (docs/spark.md, Performance). Records are read by address inside a
segment's memory map; every position and length is checked against the map's size, or the
section holding it, before it is read, so a damaged record or consume-queue unit is reported,
never read out of bounds.

Loads are native-endian, which is the format's little-endian on the x86-64 and arm64
machines strata runs on. Compiled on first use and cached next to this file (numba's
``cache=True``); a Spark Python worker loads the cached code in well under a second.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from strata.format import record as rec
from strata.format import record_kernels as rk

# Rows of the header-field table that scan_headers fills (one column per record).
QUEUE_OFFSET, STORE_TS, BORN_TS, SYS_FLAG, BODY_START, BODY_LEN, PROPS_START, PROPS_LEN, \
    KEY_START, KEY_LEN = range(10)
FIELDS = 10
NO_KEY = -1   # KEY_LEN of a record whose properties hold no KEYS entry


_memcpy = rk.memcpy
_check = rk._check
_u16, _u32, _i32, _i64 = rk.load_u16, rk.load_u32, rk.load_i32, rk.load_i64
GOOD, NO_RECORD, CRC_MISMATCH = rk.GOOD, rk.NO_RECORD, rk.CRC_MISMATCH

_HEADER = rec.HEADER_SIZE
_BORN_V6 = rec.SYSFLAG_BORN_HOST_V6
_STORE_V6 = rec.SYSFLAG_STORE_HOST_V6
_P_SYS, _P_QOFF = rec.POS_SYS_FLAG, rec.POS_QUEUE_OFFSET
_P_BORN, _P_STORE, _P_BODY_LEN, _P_TOPIC_LEN, _P_PROPS_LEN = \
    rec.POS_BORN_TIMESTAMP, rec.POS_STORE_TIMESTAMP, rec.POS_BODY_LENGTH, \
    rec.POS_TOPIC_LENGTH, rec.POS_PROPERTIES_LENGTH
# A properties section that starts with the KEYS entry: u16 name length 4, "KEYS", u16 length.
_KEYS_PREFIX = int.from_bytes(b"\x04\x00KEYS", "little")


@njit(cache=True, nogil=True, boundscheck=False)
def scan_headers(data, pos, phys, fields, first, crc):
    """Check and read the records at ``pos`` (byte positions in ``data``, a segment's map;
    ``phys`` their commit-log offsets) into ``fields[:, first:first + len(pos)]``. Each record
    is judged by the record reader's own check (``record_kernels._check``: magic, length at
    both ends, field lengths adding up, its own offset, ASCII topic; its CRC32C too with
    ``crc``), so Spark takes a record as intact exactly when get/scan do. Returns (-1, GOOD),
    or the index in ``pos`` of the first record that fails and its verdict (NO_RECORD,
    CRC_MISMATCH; also for a KEYS entry running past its properties section: NO_RECORD)."""
    base = data.ctypes.data
    size = len(data)
    for i in range(len(pos)):
        p = pos[i]
        st, _ = _check(base, p, phys[i], size, crc)
        if st != GOOD:
            return i, st
        a = base + p
        flags = _i32(a + _P_SYS)
        hosts = (18 if flags & _BORN_V6 else 6) + (18 if flags & _STORE_V6 else 6)
        props_at = p + _HEADER + hosts + _u16(a + _P_TOPIC_LEN)
        props_len = np.int64(_u16(a + _P_PROPS_LEN))
        body_at = props_at + props_len
        body_len = np.int64(_u32(a + _P_BODY_LEN))
        r = first + i
        fields[QUEUE_OFFSET, r] = _i64(a + _P_QOFF)
        fields[STORE_TS, r] = _i64(a + _P_STORE)
        fields[BORN_TS, r] = _i64(a + _P_BORN)
        fields[SYS_FLAG, r] = flags
        fields[BODY_START, r] = body_at
        fields[BODY_LEN, r] = body_len
        fields[PROPS_START, r] = props_at
        fields[PROPS_LEN, r] = props_len
        key_len = NO_KEY
        if props_len >= 8 and (_i64(base + props_at) & 0xFFFFFFFFFFFF) == _KEYS_PREFIX:
            key_len = np.int64(_u16(base + props_at + 6))
            if 8 + key_len > props_len:
                return i, NO_RECORD
        fields[KEY_START, r] = props_at + 8
        fields[KEY_LEN, r] = key_len
    return -1, GOOD


@njit(cache=True, nogil=True, boundscheck=False)
def gather(src, starts, lens, out, offsets, first, at):
    """Copy ``src[starts[i]:starts[i] + lens[i]]`` for every i to ``out`` from byte ``at`` on,
    one after another, writing each one's start to ``offsets[first + i]`` (Arrow offsets).
    Returns the byte after the last one. The caller checked every range against ``src``."""
    s0 = src.ctypes.data
    o0 = out.ctypes.data
    for i in range(len(starts)):
        offsets[first + i] = at
        n = lens[i]
        if n > 0:
            _memcpy(o0 + at, s0 + starts[i], n)
            at += n
    return at


_KEYS_NAME = int.from_bytes(b"KEYS", "little")
_TAGS_NAME = int.from_bytes(b"TAGS", "little")


@njit(cache=True, nogil=True, boundscheck=False)
def scan_properties(data, props_start, props_len, key_count, user_count, tag_start, tag_len,
                    first):
    """Walk the properties section of every record (entries: u16 name length, name, u16 value
    length, value): how many KEYS entries and how many user properties (every other name but
    TAGS) it holds and where its TAGS value is (``tag_len`` -1: none), into ``[first + i]``.
    Returns -1, or the index of the first record whose section is damaged (an entry runs past
    its end). The sections lie inside the map (scan_headers checked that)."""
    base = data.ctypes.data
    for i in range(len(props_start)):
        p = props_start[i]
        end = p + props_len[i]
        keys = 0
        users = 0
        ts = 0
        tl = -1
        while p < end:
            if p + 2 > end:
                return i
            name_len = np.int64(_u16(base + p))
            q = p + 2 + name_len
            if q + 2 > end:
                return i
            value_len = np.int64(_u16(base + q))
            v = q + 2
            if v + value_len > end:
                return i
            name = _u32(base + p + 2) if name_len == 4 else 0
            if name_len == 4 and name == _KEYS_NAME:
                keys += 1
            elif name_len == 4 and name == _TAGS_NAME:
                ts = v
                tl = value_len
            else:
                users += 1
            p = v + value_len
        r = first + i
        key_count[r] = keys
        user_count[r] = users
        tag_start[r] = ts
        tag_len[r] = tl
    return -1


@njit(cache=True, nogil=True, boundscheck=False)
def property_spans(data, props_start, props_len, users, at, name_starts, name_lens,
                   value_starts, value_lens):
    """Write where the entries of every record lie, in order, from index ``at`` on: with
    ``users`` false the KEYS entries (values only), with it true the user properties (names
    and values). Returns the index after the last. The sections were checked by
    scan_properties."""
    base = data.ctypes.data
    j = at
    for i in range(len(props_start)):
        p = props_start[i]
        end = p + props_len[i]
        while p < end:
            name_len = np.int64(_u16(base + p))
            q = p + 2 + name_len
            value_len = np.int64(_u16(base + q))
            name = _u32(base + p + 2) if name_len == 4 else 0
            special = name_len == 4 and (name == _KEYS_NAME or name == _TAGS_NAME)
            if (users and not special) or (not users and name_len == 4 and name == _KEYS_NAME):
                name_starts[j] = p + 2
                name_lens[j] = name_len
                value_starts[j] = q + 2
                value_lens[j] = value_len
                j += 1
            p = q + 2 + value_len
    return j
