"""The chunk builder's compiled pass (numba): a queue's records in one commit-log segment are
checked, gathered into the chunk's ``.log`` buffer and their key entries computed, in one loop
with no Python per record (``chunk.build_chunk`` calls it once per segment).

Per record: ``record_kernels``' checks (magic, lengths at both ends, field lengths adding up,
the commit-log offset it must carry, CRC32C unless its sealed segment's footer CRC already
matched), then the unit's size, the queue id, the queue offset and the topic's bytes; its
properties section is walked entry by entry (u16 name length, name, u16 value length, value)
for ``KEYS`` values and the ``UNIQ_KEY`` value (the last one, if not empty), each hashed as
``layout.key_hash`` does (compiled BLAKE2b, ``blake2b``). Records that follow one another in
the log are copied as one piece. Imported on first use, as the record kernels are.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from strata.format import record as rec
from strata.format.record_kernels import (
    CRC_MISMATCH, GOOD, _check, load_i32, load_i64, load_u16, load_u32, load_u64, memcpy)
from strata.tiered.blake2b import BLOCK, blake2b64

# why build_run stopped
DONE = 0          # every record checked, copied and its keys computed
BAD_RECORD = 1    # the record at the returned index is damaged or not the queue's
KEYS_FULL = 2     # the key arrays are full before the record at the returned index
# what was wrong with a bad record (``detail``)
NOT_A_RECORD = 0  # no whole message record of that commit-log offset there
CRC_FAILS = 1     # whole, its CRC32C does not match
OTHER_SIZE = 2    # whole, of another size than its unit says
OTHER_MESSAGE = 3  # whole, another queue's or offset's or topic's message
BAD_PROPERTIES = 4  # its properties section's entries overrun the section

_HEADER = rec.HEADER_SIZE
_P_QID, _P_QOFF, _P_SYS = rec.POS_QUEUE_ID, rec.POS_QUEUE_OFFSET, rec.POS_SYS_FLAG
_P_STORE = rec.POS_STORE_TIMESTAMP
_P_TOPIC_LEN, _P_PROPS_LEN = rec.POS_TOPIC_LENGTH, rec.POS_PROPERTIES_LENGTH
_BORN_V6, _STORE_V6 = rec.SYSFLAG_BORN_HOST_V6, rec.SYSFLAG_STORE_HOST_V6
_KEYS = int.from_bytes(rec.PROP_KEYS.encode(), "little")
_UNIQ = int.from_bytes(rec.PROP_UNIQ_KEY.encode(), "little")
assert len(rec.PROP_KEYS) == 4 and len(rec.PROP_UNIQ_KEY) == 8


def scratch_for(topic: bytes) -> np.ndarray:
    """The hash input buffer of ``build_run``: ``topic#`` then room for the longest value a
    properties section holds and the last block's zero padding."""
    prefix = topic + b"#"
    out = np.zeros(len(prefix) + 65536 + 2 * BLOCK, np.uint8)
    out[:len(prefix)] = np.frombuffer(prefix, np.uint8)
    return out


@njit(cache=True, nogil=True, boundscheck=False)
def _hash_value(scratch, plen, src, n):
    """``blake2b64`` of the scratch's prefix (its first ``plen`` bytes) and the ``n`` bytes
    at address ``src``; the scratch is zero after the prefix again when it returns."""
    s0 = scratch.ctypes.data
    memcpy(s0 + plen, src, n)
    h = blake2b64(s0, plen + n)
    for j in range(plen, plen + n):
        scratch[j] = 0
    return h


@njit(cache=True, nogil=True, boundscheck=False)
def build_run(data, pos, phys, sizes, limit, crc, topic, queue_id, first_offset, out, out_at,
              store_ts, start, scratch, plen, key_hash, key_ts, key_offset, nkeys):
    """Check the records at ``pos[start:]`` of ``data`` (a segment's map, readable below
    ``limit``; record ``i`` must carry commit-log offset ``phys[i]``, be ``sizes[i]`` bytes
    long and be message ``first_offset + i`` of ``queue_id`` with topic bytes ``topic``; its
    CRC32C too with ``crc``), copy each to ``out[out_at[i]:]``, its store time to
    ``store_ts[i]`` and its key entries to ``key_*[nkeys:]``.

    Returns (index, key entries in all, why, detail): why DONE with index ``len(pos)``;
    BAD_RECORD naming the first damaged record (detail: what is wrong); KEYS_FULL when the
    record at index has more key entries than are left (``nkeys``: those before it; the
    caller gives larger arrays and starts again there)."""
    base = data.ctypes.data
    o0 = out.ctypes.data
    limit = min(limit, len(data))
    tl = len(topic)
    cap = len(key_hash)
    run_src = np.int64(0)
    run_dst = np.int64(0)
    run_len = np.int64(0)
    i = start
    n = len(pos)
    while i < n:
        p = pos[i]
        st, total = _check(base, p, phys[i], limit, crc)
        if st != GOOD:
            memcpy(o0 + run_dst, base + run_src, run_len)
            return i, nkeys, BAD_RECORD, CRC_FAILS if st == CRC_MISMATCH else NOT_A_RECORD
        if total != sizes[i]:
            memcpy(o0 + run_dst, base + run_src, run_len)
            return i, nkeys, BAD_RECORD, OTHER_SIZE
        a = base + p
        flags = load_i32(a + _P_SYS)
        topic_at = p + _HEADER + (18 if flags & _BORN_V6 else 6) + \
            (18 if flags & _STORE_V6 else 6)
        same = load_i32(a + _P_QID) == queue_id and \
            load_i64(a + _P_QOFF) == first_offset + i and \
            np.int64(load_u16(a + _P_TOPIC_LEN)) == tl
        if same:
            for j in range(tl):
                if data[topic_at + j] != topic[j]:
                    same = False
                    break
        if not same:
            memcpy(o0 + run_dst, base + run_src, run_len)
            return i, nkeys, BAD_RECORD, OTHER_MESSAGE
        # the key entries: KEYS values and the last UNIQ_KEY value, if not empty
        ts = load_i64(a + _P_STORE)
        q = topic_at + tl
        end = q + np.int64(load_u16(a + _P_PROPS_LEN))
        k = nkeys
        uniq_at = np.int64(0)
        uniq_len = np.int64(0)
        while q < end:
            if q + 2 > end:
                memcpy(o0 + run_dst, base + run_src, run_len)
                return i, nkeys, BAD_RECORD, BAD_PROPERTIES
            name_len = np.int64(load_u16(base + q))
            name_at = q + 2
            q = name_at + name_len
            if q + 2 > end:
                memcpy(o0 + run_dst, base + run_src, run_len)
                return i, nkeys, BAD_RECORD, BAD_PROPERTIES
            value_len = np.int64(load_u16(base + q))
            value_at = q + 2
            q = value_at + value_len
            if q > end:
                memcpy(o0 + run_dst, base + run_src, run_len)
                return i, nkeys, BAD_RECORD, BAD_PROPERTIES
            if name_len == 4 and load_u32(base + name_at) == _KEYS:
                if k == cap:
                    memcpy(o0 + run_dst, base + run_src, run_len)
                    return i, nkeys, KEYS_FULL, 0
                key_hash[k] = _hash_value(scratch, plen, base + value_at, value_len)
                key_ts[k] = ts
                key_offset[k] = first_offset + i
                k += 1
            elif name_len == 8 and load_u64(base + name_at) == _UNIQ:
                uniq_at = value_at
                uniq_len = value_len
        if uniq_len > 0:
            if k == cap:
                memcpy(o0 + run_dst, base + run_src, run_len)
                return i, nkeys, KEYS_FULL, 0
            key_hash[k] = _hash_value(scratch, plen, base + uniq_at, uniq_len)
            key_ts[k] = ts
            key_offset[k] = first_offset + i
            k += 1
        nkeys = k
        store_ts[i] = ts
        # the bytes: one copy per run of records that follow each other in the log
        if run_len and p == run_src + run_len and out_at[i] == run_dst + run_len:
            run_len += total
        else:
            memcpy(o0 + run_dst, base + run_src, run_len)
            run_src = p
            run_dst = out_at[i]
            run_len = total
        i += 1
    memcpy(o0 + run_dst, base + run_src, run_len)
    return n, nkeys, DONE, 0
