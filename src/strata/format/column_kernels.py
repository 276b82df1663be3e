"""Compiled encoding of message records from columns (numba): the put path's per-message work
done in one pass over a batch instead of a Python loop over messages.

``build_records`` lays the records of a batch back to back (fixed header and trailer left as
zeros for ``record_batch.seal_records``): the shared prefix (header, born and store host,
topic), then the properties section — a ``KEYS`` entry per key, a ``TAGS`` entry, the
pre-encoded user properties — then the body. ``utf8_bad`` and ``properties_bad`` check text and
pre-encoded property entries before anything is written, so bad input is refused with the
index of the message that carries it. ``choose_queues`` picks every message's queue (a
shard key's CRC32C, as the per-message path, or round-robin) and queue offset in one pass.

Pure functions over numpy arrays: no file I/O, no Python objects. Compiled on first use and
cached beside this file.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from strata.format import record as rec
from strata.format.record_kernels import check_at, crc32c_at, memcpy
from strata.format.record_table import F_BODY_AT as _F_BODY_AT, F_BODY_END as _F_BODY_END

_KEYS = np.frombuffer(rec.PROP_KEYS.encode(), np.uint8)
_TAGS = np.frombuffer(rec.PROP_TAGS.encode(), np.uint8)
_KEYS_LEN = len(_KEYS)
_TAGS_LEN = len(_TAGS)
_TRAILER = rec.TRAILER_SIZE


@njit(cache=True, nogil=True)
def _u16(out, p, v):
    out[p] = v & 0xFF
    out[p + 1] = (v >> 8) & 0xFF


@njit(cache=True, nogil=True)
def _entry(out, p, name, value_data, a, b):
    """One property entry at ``out[p]`` (u16 name length, name, u16 value length, value);
    returns the position after it."""
    nl = len(name)
    _u16(out, p, nl)
    for j in range(nl):
        out[p + 2 + j] = name[j]
    p += 2 + nl
    _u16(out, p, b - a)
    p += 2
    memcpy(out.ctypes.data + p, value_data.ctypes.data + a, b - a)
    return p + b - a


@njit(cache=True, nogil=True)
def build_records(prefix_data, prefix_off, prefix_of, body_data, body_off, key_data, key_off,
                  key_groups, tag_data, tag_off, prop_data, prop_off, totals, out):
    """Write record ``i`` for every message ``i`` into ``out`` back to back, its length in
    ``totals[i]`` (known beforehand: the caller sized ``out`` from the same lengths). Record
    ``i`` starts with prefix ``prefix_of[i]`` of column (``prefix_data``, ``prefix_off``): the
    fixed header's zeros, born and store host, topic.

    Columns are (data, offsets) pairs: item ``j`` is ``data[off[j]:off[j + 1]]``. Message ``i``
    has keys ``key_groups[i]`` .. ``key_groups[i + 1] - 1`` (empty keys are left out), tag
    ``i`` (empty: none), pre-encoded properties ``i`` and body ``i``. Key and tag columns with
    no items (``len(off) == 1``) mean none for every message."""
    n = len(body_off) - 1
    has_tags = len(tag_off) > 1
    has_props = len(prop_off) > 1
    base = out.ctypes.data
    p = 0
    for i in range(n):
        start = p
        pa = prefix_off[prefix_of[i]]
        plen = prefix_off[prefix_of[i] + 1] - pa
        memcpy(base + p, prefix_data.ctypes.data + pa, plen)
        p += plen
        for k in range(key_groups[i], key_groups[i + 1]):
            a = key_off[k]
            b = key_off[k + 1]
            if b > a:
                p = _entry(out, p, _KEYS, key_data, a, b)
        if has_tags:
            a = tag_off[i]
            b = tag_off[i + 1]
            if b > a:
                p = _entry(out, p, _TAGS, tag_data, a, b)
        if has_props:
            a = prop_off[i]
            b = prop_off[i + 1]
            memcpy(base + p, prop_data.ctypes.data + a, b - a)
            p += b - a
        a = body_off[i]
        b = body_off[i + 1]
        memcpy(base + p, body_data.ctypes.data + a, b - a)
        p += b - a
        for j in range(_TRAILER):
            out[p + j] = 0
        p += _TRAILER
        totals[i] = p - start
    return p


_KEY_ENTRY = 2 + _KEYS_LEN + 2
_TAG_ENTRY = 2 + _TAGS_LEN + 2


@njit(cache=True, nogil=True)
def record_lengths(prefix_off, prefix_of, body_off, key_off, key_groups, tag_off, prop_off,
                   limits, body_lens, props_lens, totals):
    """The lengths of the records ``build_records`` writes from the same columns: each
    message's body, properties section (KEYS entries of its non-empty keys, a TAGS entry if
    its tag is not empty, its pre-encoded properties) and whole record, into ``body_lens``,
    ``props_lens`` and ``totals``. ``limits``: the most bytes of a body, of a key or tag, of a
    properties section and of a record. Returns the records' total length, or -1 if some
    length is past its limit (the caller then finds and names it)."""
    max_body, max_text, max_props, max_record = limits[0], limits[1], limits[2], limits[3]
    for k in range(len(key_off) - 1):
        if key_off[k + 1] - key_off[k] > max_text:
            return -1
    has_tags = len(tag_off) > 1
    has_props = len(prop_off) > 1
    size = 0
    for i in range(len(body_off) - 1):
        bl = body_off[i + 1] - body_off[i]
        if bl > max_body:
            return -1
        pl = 0
        for k in range(key_groups[i], key_groups[i + 1]):
            kl = key_off[k + 1] - key_off[k]
            if kl > 0:
                pl += kl + _KEY_ENTRY
        if has_tags:
            tl = tag_off[i + 1] - tag_off[i]
            if tl > max_text:
                return -1
            if tl > 0:
                pl += tl + _TAG_ENTRY
        if has_props:
            pl += prop_off[i + 1] - prop_off[i]
        if pl > max_props:
            return -1
        t = prefix_off[prefix_of[i] + 1] - prefix_off[prefix_of[i]] + pl + bl + _TRAILER
        if t > max_record:
            return -1
        body_lens[i] = bl
        props_lens[i] = pl
        totals[i] = t
        size += t
    return size


@njit(cache=True, nogil=True)
def _utf8_end(data, i, b):
    """Where the UTF-8 sequence starting at ``data[i]`` ends (exclusive), or -1 if it is not a
    well-formed one (Python's strict decoder's rules: no overlong forms, no surrogates, nothing
    above U+10FFFF, nothing cut off by ``b``)."""
    c = data[i]
    if c < 0x80:
        return i + 1
    lo = 0x80
    hi = 0xBF
    if 0xC2 <= c <= 0xDF:
        need = 1
    elif c == 0xE0:
        need, lo = 2, 0xA0
    elif 0xE1 <= c <= 0xEC or 0xEE <= c <= 0xEF:
        need = 2
    elif c == 0xED:
        need, hi = 2, 0x9F
    elif c == 0xF0:
        need, lo = 3, 0x90
    elif 0xF1 <= c <= 0xF3:
        need = 3
    elif c == 0xF4:
        need, hi = 3, 0x8F
    else:
        return -1
    if i + need >= b:   # cut off
        return -1
    d = data[i + 1]
    if d < lo or d > hi:
        return -1
    for j in range(2, need + 1):
        d = data[i + j]
        if d < 0x80 or d > 0xBF:
            return -1
    return i + need + 1


@njit(cache=True, nogil=True)
def _utf8_ok(data, a, b):
    i = a
    while i < b:
        if data[i] < 0x80:
            i += 1
            continue
        i = _utf8_end(data, i, b)
        if i < 0:
            return False
    return True


@njit(cache=True, nogil=True)
def utf8_bad(data, off):
    """Index of the first item of column (``data``, ``off``) that is not well-formed UTF-8,
    or -1 if all are."""
    for j in range(len(off) - 1):
        if not _utf8_ok(data, off[j], off[j + 1]):
            return j
    return -1


# properties_bad's verdicts (with the index of the message)
PROPS_OK = 0
PROPS_TORN = 1        # an entry runs past the end of the message's properties
PROPS_EMPTY_NAME = 2  # a property with an empty name
PROPS_RESERVED = 3    # a property named KEYS or TAGS (those have their own columns)
PROPS_NOT_UTF8 = 4    # a name or value that is not well-formed UTF-8


@njit(cache=True, nogil=True)
def _is(data, a, b, word):
    if b - a != len(word):
        return False
    for j in range(b - a):
        if data[a + j] != word[j]:
            return False
    return True


@njit(cache=True, nogil=True)
def properties_bad(data, off):
    """Check every message's pre-encoded properties (entries of u16 name length, name, u16
    value length, value, back to back). Returns (index of the first bad message, verdict), or
    (-1, PROPS_OK)."""
    for i in range(len(off) - 1):
        p = off[i]
        end = off[i + 1]
        while p < end:
            if p + 2 > end:
                return i, PROPS_TORN
            nl = data[p] | (np.int64(data[p + 1]) << 8)
            na = p + 2
            nb = na + nl
            if nb + 2 > end:
                return i, PROPS_TORN
            vl = data[nb] | (np.int64(data[nb + 1]) << 8)
            va = nb + 2
            vb = va + vl
            if vb > end:
                return i, PROPS_TORN
            if nl == 0:
                return i, PROPS_EMPTY_NAME
            if _is(data, na, nb, _KEYS) or _is(data, na, nb, _TAGS):
                return i, PROPS_RESERVED
            if not _utf8_ok(data, na, nb) or not _utf8_ok(data, va, vb):
                return i, PROPS_NOT_UTF8
            p = vb
    return -1, PROPS_OK


@njit(cache=True, nogil=True)
def encode_entries(name_data, name_off, value_data, value_off, groups, out_off, out):
    """Property sections from name and value columns: message ``i``'s section holds entries
    ``groups[i]`` .. ``groups[i + 1] - 1`` (u16 name length, name, u16 value length, value),
    written at ``out[out_off[i]:out_off[i + 1]]`` (offsets the caller computed from the same
    lengths)."""
    base = out.ctypes.data
    for i in range(len(groups) - 1):
        p = out_off[i]
        for j in range(groups[i], groups[i + 1]):
            a = name_off[j]
            b = name_off[j + 1]
            _u16(out, p, b - a)
            memcpy(base + p + 2, name_data.ctypes.data + a, b - a)
            p += 2 + b - a
            a = value_off[j]
            b = value_off[j + 1]
            _u16(out, p, b - a)
            memcpy(base + p + 2, value_data.ctypes.data + a, b - a)
            p += 2 + b - a


@njit(cache=True, nogil=True)
def names_bad(data, off):
    """Index of the first property name in column (``data``, ``off``) that is empty or a
    reserved name (KEYS, TAGS), or -1."""
    for j in range(len(off) - 1):
        a = off[j]
        b = off[j + 1]
        if b == a or _is(data, a, b, _KEYS) or _is(data, a, b, _TAGS):
            return j
    return -1


@njit(cache=True, nogil=True)
def gather(data, starts, ends, out_off, out):
    """Copy ``data[starts[i]:ends[i]]`` to ``out[out_off[i]:]`` for every ``i`` (the caller
    made ``out_off`` from the same lengths): sections of many records made one column."""
    src = data.ctypes.data
    dst = out.ctypes.data
    for i in range(len(starts)):
        memcpy(dst + out_off[i], src + starts[i], ends[i] - starts[i])


@njit(cache=True, nogil=True)
def section_offsets(fields, first_row, end_row, body_off, prop_off):
    """Offsets of the bodies (rows ``F_BODY_AT`` .. ``F_BODY_END`` of the field table
    ``fields``, one column per record) and of the properties sections (``F_PROPS_AT`` ..
    ``F_BODY_AT``) packed one after another: ``body_off`` and ``prop_off`` get n + 1 entries."""
    body_off[0] = 0
    prop_off[0] = 0
    for i in range(fields.shape[1]):
        body_off[i + 1] = body_off[i] + fields[end_row, i] - fields[first_row, i]
        prop_off[i + 1] = prop_off[i] + fields[first_row, i] - fields[first_row - 1, i]


@njit(cache=True, nogil=True)
def gather_sections(data, fields, first, count, first_row, end_row, body_off, prop_off,
                    bodies, props):
    """Copy the bodies and properties sections of table columns ``first`` .. ``first +
    count - 1`` (positions in ``data``) to ``bodies`` / ``props`` at the offsets
    ``section_offsets`` gave."""
    src = data.ctypes.data
    for i in range(first, first + count):
        a = fields[first_row, i]
        memcpy(bodies.ctypes.data + body_off[i], src + a, fields[end_row, i] - a)
        p = fields[first_row - 1, i]
        memcpy(props.ctypes.data + prop_off[i], src + p, a - p)


@njit(cache=True, nogil=True)
def columns_at(data, pos, phys, limit, crc, topic, queue_id, queue_offsets, fields, status,
               body_off, prop_off):
    """``record_kernels.check_at`` of the records at ``pos`` and, when every one is GOOD,
    ``section_offsets`` and ``gather_sections`` of them, in one compiled call (a ``get_columns``
    of one segment). Returns (how many are GOOD, the bodies buffer, the properties buffer); the
    buffers are empty unless all are."""
    good, _nbytes = check_at(data, pos, phys, limit, crc, topic, queue_id, queue_offsets,
                             fields, status)
    n = len(pos)
    if good < n:
        return good, np.empty(0, np.uint8), np.empty(0, np.uint8)
    section_offsets(fields, _F_BODY_AT, _F_BODY_END, body_off, prop_off)
    bodies = np.empty(body_off[n], np.uint8)
    props = np.empty(prop_off[n], np.uint8)
    gather_sections(data, fields, 0, n, _F_BODY_AT, _F_BODY_END, body_off, prop_off, bodies,
                    props)
    return good, bodies, props


@njit(cache=True, nogil=True)
def split_joined(raw, data, off):
    """The items of ``raw`` (UTF-8 text items joined with NUL separators, none inside an item)
    packed into ``data`` without the separators: item ``j`` is ``data[off[j]:off[j + 1]]``.
    The caller sized ``data`` (``len(raw)`` less the separators) and ``off`` (items + 1) from
    the separator count. Returns the number of items."""
    j = 0
    q = 0
    off[0] = 0
    for p in range(len(raw)):
        c = raw[p]
        if c == 0:
            j += 1
            off[j] = q
        else:
            data[q] = c
            q += 1
    off[j + 1] = q
    return j + 1


@njit(cache=True, nogil=True)
def distinct_slices(data, at, end, codes, firsts):
    """Number the distinct byte strings ``data[at[i]:end[i]]`` (e.g. the topics of a batch's
    records) in order of first appearance: ``codes[i]`` gets the number of record ``i``'s,
    ``firsts[k]`` the first record holding string ``k``. Returns how many are distinct, or -1
    if more than ``len(firsts)`` (each record is compared with each distinct string so far)."""
    m = 0
    last = 0
    for i in range(len(at)):
        a = at[i]
        n = end[i] - a
        found = -1
        for t in range(m):
            k = (last + t) % m          # the previous record's string first
            r = at[firsts[k]]
            if end[firsts[k]] - r != n:
                continue
            same = True
            for j in range(n):
                if data[a + j] != data[r + j]:
                    same = False
                    break
            if same:
                found = k
                break
        if found < 0:
            if m == len(firsts):
                return -1
            firsts[m] = i
            found = m
            m += 1
        codes[i] = found
        last = found
    return m


@njit(cache=True, nogil=True)
def choose_queues(codes, shard_data, shard_off, has, n_q, rr_start, rr_count, base_at, nxt,
                  qids, qoffs):
    """Queue id and queue offset of every message of a batch in one pass, in batch order.

    Message ``i`` belongs to topic ``codes[i]``, which has ``n_q[t]`` queues whose next
    offsets are ``nxt[base_at[t]:base_at[t] + n_q[t]]`` (advanced here). A message with a
    shard key (column ``shard_data``/``shard_off``, one item per message; none if it has no
    items; ``has[i]`` says whether message i has one, all do if ``has`` is empty) goes to
    queue CRC32C(key) % n_q, as the per-message path; the others round-robin from
    ``rr_start[t]``, ``rr_count[t]`` counting them."""
    shards = len(shard_off) > 1
    every = len(has) == 0
    base = shard_data.ctypes.data
    for i in range(len(qids)):
        t = codes[i]
        nq = n_q[t]
        if shards and (every or has[i]):
            q = np.int64(crc32c_at(base + shard_off[i], shard_off[i + 1] - shard_off[i])) % nq
        else:
            q = (rr_start[t] + rr_count[t]) % nq
            rr_count[t] += 1
        j = base_at[t] + q
        qids[i] = q
        qoffs[i] = nxt[j]
        nxt[j] += 1
