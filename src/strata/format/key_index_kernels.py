"""Compiled key-index lookup (numba): every file's chain of one hash walked in one call.

``find`` does what ``KeyIndex._walk`` does in Python — for each file, newest first, follow the
chain of the key's slot from its head back to the end, yielding the physical offsets of the
counted entries whose hash and time second match, without duplicates — over a table of the
files' addresses and geometry (``FILE_*`` columns), so a lookup is one call instead of a
Python loop over files and entries. It never follows a damaged chain: a link out of its
slot, forwards or past the file's capacity makes it stop and report that file (the caller
then looks at every entry of that file, as ``_walk`` does).

Readers share the files with a writer in this or another process: the counters and the slot
heads are read with one aligned 4-byte load each (the writer stores them whole), the count
before any entry, and an entry at or past the count is followed but never returned. Entries
are read with unaligned loads (an entry's offset field is 4-aligned only). Pure over memory
the caller keeps mapped: no file I/O.

``match_key`` is the other half of a key query: whether the record at a candidate offset is
the message asked for (intact, of that topic, stored in the time range, with that key among
its KEYS entries or as its UNIQ_KEY), so that only the messages a query returns are decoded.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from strata.format import key_index as kfmt
from strata.format import record as rec
from strata.format.record_kernels import (_check, load_i32, load_i64, load_u16, load_u32,
                                          load_u8)
from strata.format.record_table import GOOD, NO_RECORD, OTHER

# The columns of a file table row (int64): one row per file, oldest first.
FILE_ADDRESS = 0     # address of byte 0 of the mapped file
FILE_SLOTS = 1
FILE_ENTRIES_AT = 2  # byte position of entry 0
FILE_CAPACITY = 3
FILE_BEGIN = 4       # begin_offset (checksummed in the header, unlike the counters)
FILE_BASE_TS = 5
FILE_COLUMNS = 6

# what ``find`` returns besides a count
MORE = -1            # ``out`` filled up before the walk ended
# -2 - i: file row i has a damaged chain of this hash (walk it the slow way from there)

_P_FLAGS = kfmt.POS_COUNTERS            # u32 flags
_P_COUNT = kfmt.POS_COUNTERS + 12       # u32 entry_count (after flags u32, end_offset i64)
_P_MIN_D = kfmt.POS_COUNTERS + 20       # i32 min_time_delta
_P_MAX_D = kfmt.POS_COUNTERS + 24       # i32 max_time_delta
_SLOTS_AT = kfmt.HEADER_BYTES
_ENTRY = kfmt.ENTRY_BYTES
_NOT_MONO = kfmt.FLAG_TIMES_NOT_MONOTONE
_DMIN = kfmt.DELTA_MIN
_DMAX = kfmt.DELTA_MAX
assert kfmt.COUNTERS.format == "<IqIIii" and _ENTRY == 20


@njit(cache=True, nogil=True)
def _clamp(d):
    return min(max(d, _DMIN), _DMAX)


@njit(cache=True, nogil=True)
def find(table, h, begin_ms, end_ms, out, first_file):
    """Walk the chain of hash ``h`` (31 bits) in files ``first_file``, ``first_file - 1``,
    ... 0 of ``table`` (rows oldest first), writing into ``out`` the physical offsets of the
    counted entries of hash ``h`` whose time second overlaps ``[begin_ms, end_ms]``, newest
    first, each once. Returns how many were written; ``MORE`` if ``out`` filled up first (it
    then holds the newest ``len(out)``); ``-2 - i`` if file ``i``'s chain is damaged (the
    caller then walks the slow way, which scans that file's entries).

    The files' chains are walked side by side, one entry of each a round: each step is a
    load from memory that is likely not in any cache, and the steps of different chains do
    not wait for one another, so the CPU has them in flight together."""
    nf = first_file + 1
    cap_out = len(out)
    # per file (row i): its walk's state; found[i, :got[i]] its matches, newest first
    state = np.zeros((7, max(nf, 1)), np.int64)
    pos, lo_, hi_, cnt, mono, got, full = (state[0], state[1], state[2], state[3], state[4],
                                           state[5], state[6])   # pos 0: done
    found = np.empty((max(nf, 1), cap_out), np.int64)
    active = 0
    for i in range(nf):
        a = table[i, FILE_ADDRESS]
        count = np.int64(load_u32(a + _P_COUNT))
        if count <= 1:
            continue
        base = table[i, FILE_BASE_TS]
        lo = _clamp(-((base + 999 - begin_ms) // 1000))   # format.key_index.delta_bounds
        hi = _clamp((end_ms - base) // 1000)
        if np.int64(load_i32(a + _P_MAX_D)) < lo or np.int64(load_i32(a + _P_MIN_D)) > hi:
            continue
        n = np.int64(load_u32(a + _SLOTS_AT + (h % table[i, FILE_SLOTS]) * 4))
        if n >= table[i, FILE_CAPACITY]:
            return -2 - i
        lo_[i], hi_[i], cnt[i] = lo, hi, count
        mono[i] = 1 if (load_u32(a + _P_FLAGS) & _NOT_MONO) == 0 else 0
        pos[i] = n
        if n:
            active += 1
    while active:
        for i in range(nf):
            n = pos[i]
            if n == 0:
                continue
            slots = table[i, FILE_SLOTS]
            e = table[i, FILE_ADDRESS] + table[i, FILE_ENTRIES_AT] + n * _ENTRY
            eh = np.int64(load_u32(e))
            d = np.int64(load_i32(e + 12))
            prev = np.int64(load_i32(e + 16))
            if n < cnt[i]:                  # entries past the counters are not yet visible
                if eh % slots != h % slots:  # a changed link or hash led out of the chain
                    return -2 - i
                if d < lo_[i]:
                    if mono[i] != 0 and d >= np.int64(load_i32(table[i, FILE_ADDRESS] + _P_MIN_D)):
                        prev = 0            # older entries are older still: done here
                elif eh == h and d <= hi_[i]:
                    phys = load_i64(e + 4)
                    if phys >= table[i, FILE_BEGIN]:
                        if got[i] == cap_out:
                            full[i] = 1
                            prev = 0
                        else:
                            found[i, got[i]] = phys
                            got[i] += 1
            if prev >= n or prev < 0:       # links always point backwards
                return -2 - i
            pos[i] = prev
            if prev == 0:
                active -= 1
    n_out = 0
    for i in range(nf - 1, -1, -1):         # newest file first
        for j in range(got[i]):
            phys = found[i, j]
            dup = False
            for k in range(n_out):
                if out[k] == phys:
                    dup = True
                    break
            if dup:
                continue
            if n_out == cap_out:
                return MORE
            out[n_out] = phys
            n_out += 1
        if full[i] != 0:
            return MORE if n_out == cap_out else -2 - i
    return n_out


_KEYS = np.frombuffer(rec.PROP_KEYS.encode(), np.uint8)
_UNIQ = np.frombuffer(rec.PROP_UNIQ_KEY.encode(), np.uint8)
_BORN_V6, _STORE_V6 = rec.SYSFLAG_BORN_HOST_V6, rec.SYSFLAG_STORE_HOST_V6
_HEADER = rec.HEADER_SIZE
_P_STORE_TS, _P_SYS = rec.POS_STORE_TIMESTAMP, rec.POS_SYS_FLAG
_P_TOPIC_LEN, _P_PROPS_LEN = rec.POS_TOPIC_LENGTH, rec.POS_PROPERTIES_LENGTH


@njit(cache=True, nogil=True)
def _same(a, word):
    """The ``len(word)`` bytes at address ``a`` equal ``word``."""
    for j in range(len(word)):
        if load_u8(a + j) != word[j]:
            return False
    return True


@njit(cache=True, nogil=True)
def match_key(data, pos, limit, phys, crc, topic, key, begin_ms, end_ms):
    """The record at byte ``pos`` of ``data`` (a segment's map as uint8; readable below byte
    ``limit``), which must carry commit-log offset ``phys``: GOOD if it is an intact message
    (its CRC32C checked with ``crc``) of topic ``topic`` stored in ``[begin_ms, end_ms]`` with
    a KEYS entry or a UNIQ_KEY equal to ``key`` (``topic`` and ``key``: UTF-8 bytes, as
    ``bytes`` or a uint8 array); OTHER if it is an intact
    message but not that; else what ``record_kernels`` says of it (NO_RECORD,
    CRC_MISMATCH) — also NO_RECORD when its properties section does not parse, so that the
    caller's own reading says what is wrong."""
    base = data.ctypes.data
    st, total = _check(base, pos, phys, min(limit, len(data)), crc)
    if st != GOOD:
        return st
    a = base + pos
    store_ts = load_i64(a + _P_STORE_TS)
    if store_ts < begin_ms or store_ts > end_ms:
        return OTHER
    flags = load_i32(a + _P_SYS)
    t = a + _HEADER + (18 if flags & _BORN_V6 else 6) + (18 if flags & _STORE_V6 else 6)
    tl = np.int64(load_u16(a + _P_TOPIC_LEN))
    if tl != len(topic) or not _same(t, topic):
        return OTHER
    p = t + tl
    end = p + np.int64(load_u16(a + _P_PROPS_LEN))
    kl = len(key)
    while p < end:
        if p + 2 > end:
            return NO_RECORD
        nl = np.int64(load_u16(p))
        if p + 2 + nl + 2 > end:
            return NO_RECORD
        vp = p + 2 + nl
        vl = np.int64(load_u16(vp))
        if vp + 2 + vl > end:
            return NO_RECORD
        if vl == kl and ((nl == len(_KEYS) and _same(p + 2, _KEYS)) or
                         (nl == len(_UNIQ) and _same(p + 2, _UNIQ))) and _same(vp + 2, key):
            return GOOD
        p = vp + 2 + vl
    return OTHER
