"""Compiled grouping of a dispatch batch's consume-queue units by queue (numba): one pass
instead of a dozen numpy calls (mask, key, stable argsort, diff, gathers) per batch.

``group_units`` lays every record's unit (``format.consume_queue``'s 20 bytes) out queue by
queue — each queue's units in log order, queues in the order they first appear — and fills a
row per queue: its key (topic code << 32 | queue id), where its units are, its first queue
offset, whether its offsets are one run of consecutive numbers, and the end of its last record
in the commit log. Prepared and rolled-back transactional records get no unit.

Pure functions over numpy arrays: no file I/O, no Python objects. Compiled on first use and
cached beside this file.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# columns of group_units' per-queue table
G_KEY, G_LO, G_HI, G_FIRST, G_RUN, G_END = range(6)
MAX_GROUPS = 64   # queues a batch may touch for the compiled grouping (more: numpy's)


@njit(cache=True, nogil=True)
def _put_le(out, p, v, n):
    for b in range(n):
        out[p + b] = (v >> (8 * b)) & 0xFF


@njit(cache=True, nogil=True)
def group_units(codes, qids, flags, queue_offsets, offsets, sizes, tags, units, unit_qo,
                groups, gid, tx_mask, tx_prepared, tx_rollback):
    """Units of the records (columns of equal length) into ``units`` (uint8, 20 a unit) and
    their queue offsets into ``unit_qo``, grouped by queue; ``groups`` (MAX_GROUPS × 6, int64)
    gets a row per queue (the ``G_*`` columns); ``gid`` is scratch (one int64 a record). A
    record whose ``flags & tx_mask`` is ``tx_prepared`` or ``tx_rollback`` gets no unit.
    Returns (queues, units), or (-1, 0) if the batch touches more than MAX_GROUPS queues."""
    n = len(codes)
    m = 0
    for i in range(n):
        tx = flags[i] & tx_mask
        if tx == tx_prepared or tx == tx_rollback:
            gid[i] = -1
            continue
        key = (codes[i] << 32) | qids[i]
        g = 0
        while g < m and groups[g, G_KEY] != key:
            g += 1
        if g == m:
            if m == MAX_GROUPS:
                return -1, 0
            groups[g, G_KEY] = key
            groups[g, G_HI] = 0            # count, for now
            groups[g, G_FIRST] = queue_offsets[i]
            m += 1
        groups[g, G_HI] += 1
        groups[g, G_RUN] = queue_offsets[i]   # last queue offset, for now
        groups[g, G_END] = offsets[i] + sizes[i]
        gid[i] = g
    at = 0
    for g in range(m):
        count = groups[g, G_HI]
        groups[g, G_RUN] = 1 if groups[g, G_RUN] - groups[g, G_FIRST] == count - 1 else 0
        groups[g, G_LO] = at
        groups[g, G_HI] = at        # the fill position, then the end
        at += count
    for i in range(n):
        g = gid[i]
        if g < 0:
            continue
        k = groups[g, G_HI]
        groups[g, G_HI] = k + 1
        unit_qo[k] = queue_offsets[i]
        p = k * 20
        _put_le(units, p, offsets[i], 8)
        _put_le(units, p + 8, sizes[i], 4)
        _put_le(units, p + 12, tags[i], 8)
    return m, at
