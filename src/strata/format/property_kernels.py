"""Compiled reading of records' properties sections for dispatch, and compiled key-index
entry writes (numba): the per-record and per-key work of dispatching keyed and tagged messages
done in one pass over a batch.

``scan_properties`` finds every record's tag (its consume-queue tag code, CRC32C of the tag's
bytes) and its keys and unique key, each with its key-index hash (CRC32C of
``topic#key``'s UTF-8 bytes, 31 bits) — what ``record.dispatch_properties``, ``tag_hash`` and
``key_index.key_hash`` compute message by message. ``put_entries`` appends key-index entries
to one index file's map as ``KeyIndex._put_locked`` does. Pure over buffers: no file I/O.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from strata.format import key_index as kfmt
from strata.format import record as rec
from strata.format.column_kernels import _utf8_ok
from strata.format.record_kernels import CRC_INSTRUCTION, _TABLE
from strata.format.record_kernels import crc_more as _crc_more

_KEYS = np.frombuffer(rec.PROP_KEYS.encode(), np.uint8)
_TAGS = np.frombuffer(rec.PROP_TAGS.encode(), np.uint8)
_UNIQ = np.frombuffer(rec.PROP_UNIQ_KEY.encode(), np.uint8)
_HASH_MASK = kfmt.HASH_MASK
_ENTRY = kfmt.ENTRY_BYTES

if CRC_INSTRUCTION is not None:
    from strata.format.record_kernels import _crc8

    @njit(cache=True, nogil=True)
    def _crc_more_byte(c, byte):
        """CRC32C state ``c`` carried over one byte (no buffer: this runs once a key)."""
        return _crc8(c, np.uint64(byte))
else:   # pragma: no cover - only on CPUs without a CRC32C instruction
    @njit(cache=True, nogil=True)
    def _crc_more_byte(c, byte):
        c = np.uint64(c)
        return np.uint64(_TABLE[(c ^ np.uint64(byte)) & np.uint64(0xFF)]) ^ (c >> np.uint64(8))


@njit(cache=True, nogil=True)
def _crc(address, n):
    return np.int64((_crc_more(np.uint64(0xFFFFFFFF), address, n) ^ np.uint64(0xFFFFFFFF))
                    & np.uint64(0xFFFFFFFF))


@njit(cache=True, nogil=True)
def _key_hash(base, topic_at, topic_len, a, n):
    """CRC32C of topic bytes, '#', key bytes; 31 bits (``key_index.key_hash``)."""
    c = _crc_more(np.uint64(0xFFFFFFFF), base + topic_at, topic_len)
    c = _crc_more_byte(c, 35)
    c = _crc_more(c, base + a, n)
    return np.int64(((c ^ np.uint64(0xFFFFFFFF)) & np.uint64(0xFFFFFFFF)) & _HASH_MASK)


@njit(cache=True, nogil=True)
def _is(data, a, n, word):
    if n != len(word):
        return False
    for j in range(n):
        if data[a + j] != word[j]:
            return False
    return True


@njit(cache=True, nogil=True)
def scan_properties(data, topic_at, props_at, body_at, tags, key_row, key_hash, key_at,
                    key_end, key_uniq):
    """For every record ``i`` (sections ``data[topic_at[i]:props_at[i]]`` topic and
    ``data[props_at[i]:body_at[i]]`` properties): ``tags[i]`` = its tag code (0: no tag), and
    for each key, then the unique key, one item ``k``: ``key_row[k] = i``, ``key_hash[k]``,
    the value at ``data[key_at[k]:key_end[k]]``, ``key_uniq[k]`` 1 for the unique key. Returns the number of items, or ``-1 - i``
    for the first record ``i`` whose properties do not parse cleanly or whose key or tag is not
    UTF-8 (the caller then reads them in Python, which says what is wrong)."""
    base = data.ctypes.data
    m = 0
    for i in range(len(props_at)):
        p = props_at[i]
        end = body_at[i]
        tags[i] = 0
        uniq_a = -1
        uniq_b = -1
        while p < end:
            if p + 2 > end:
                return -1 - i
            nl = np.int64(data[p]) | (np.int64(data[p + 1]) << 8)
            na = p + 2
            if na + nl + 2 > end:
                return -1 - i
            vp = na + nl
            vl = np.int64(data[vp]) | (np.int64(data[vp + 1]) << 8)
            va = vp + 2
            vb = va + vl
            if vb > end:
                return -1 - i
            if _is(data, na, nl, _KEYS):
                if not _utf8_ok(data, va, vb):
                    return -1 - i
                if m >= len(key_row):
                    return -1 - i
                key_row[m] = i
                key_hash[m] = _key_hash(base, topic_at[i], props_at[i] - topic_at[i], va, vl)
                key_at[m] = va
                key_end[m] = vb
                key_uniq[m] = 0
                m += 1
            elif _is(data, na, nl, _TAGS):
                if not _utf8_ok(data, va, vb):
                    return -1 - i
                tags[i] = _crc(base + va, vl) if vl > 0 else 0
            elif _is(data, na, nl, _UNIQ):
                if not _utf8_ok(data, va, vb):
                    return -1 - i
                uniq_a = va
                uniq_b = vb
            p = vb
        if uniq_a >= 0:
            if m >= len(key_row):
                return -1 - i
            key_row[m] = i
            key_hash[m] = _key_hash(base, topic_at[i], props_at[i] - topic_at[i], uniq_a,
                                    uniq_b - uniq_a)
            key_at[m] = uniq_a
            key_end[m] = uniq_b
            key_uniq[m] = 1
            m += 1
    return m


@njit(cache=True, nogil=True)
def put_entries(mm, slots_at, slots, epos, base_ts, cap, state, hashes, phys, ts, start,
                dmin, dmax):
    """Append key-index entries ``start``, ``start + 1``, ... (``hashes`` 31-bit, physical
    offsets, store times) to one file's map ``mm`` until its ``cap`` entries are used.
    ``state`` = [count, used, min_d, max_d, last_d, not_mono] of the file, updated in place.
    Returns the index of the first item not written."""
    count, used, min_d, max_d, last_d, not_mono = (state[0], state[1], state[2], state[3],
                                                   state[4], state[5])
    k = start
    n = len(hashes)
    while k < n and count < cap:
        h = hashes[k]
        spos = slots_at + (h % slots) * 4
        head = np.int64(mm[spos]) | (np.int64(mm[spos + 1]) << 8) | \
            (np.int64(mm[spos + 2]) << 16) | (np.int64(mm[spos + 3]) << 24)
        d = (ts[k] - base_ts) // 1000
        if d != last_d:
            if not dmin <= d <= dmax:
                d = dmax if d > 0 else dmin
            if d < last_d:
                not_mono = 1
                if d < min_d:
                    min_d = d
            elif d > max_d:
                max_d = d
            last_d = d
        e = epos + count * _ENTRY
        v = np.uint32(h)
        for j in range(4):
            mm[e + j] = (v >> np.uint32(8 * j)) & np.uint32(0xFF)
        o = np.uint64(phys[k])
        for j in range(8):
            mm[e + 4 + j] = (o >> np.uint64(8 * j)) & np.uint64(0xFF)
        dv = np.uint32(np.int64(d) & 0xFFFFFFFF)
        for j in range(4):
            mm[e + 12 + j] = (dv >> np.uint32(8 * j)) & np.uint32(0xFF)
        hv = np.uint32(head)
        for j in range(4):
            mm[e + 16 + j] = (hv >> np.uint32(8 * j)) & np.uint32(0xFF)
        cv = np.uint32(count)
        for j in range(4):
            mm[spos + j] = (cv >> np.uint32(8 * j)) & np.uint32(0xFF)
        if head == 0:
            used += 1
        count += 1
        k += 1
    state[0], state[1], state[2], state[3], state[4], state[5] = (count, used, min_d, max_d,
                                                                  last_d, not_mono)
    return k
