"""Compiled loops of a Fetch's store side (numba): how many of a store read's messages fit
the partition's byte budget, and the record table of plain messages (value and timestamp
only) straight from the store's field table, each in one pass instead of a dozen numpy
calls over the batch (numpy was ~12 % of the broker's CPU samples in a consume, ``perf``).

The field table's rows are ``strata.format.record_table``'s, the record table's
``batch_layout``'s. Compiled on first use and cached beside this file (``cache=True``).
"""

from __future__ import annotations

from numba import njit

from strata.broker.kafka.batch_layout import (
    R_TIMESTAMP, R_OFFSET_DELTA, R_KEY_AT, R_KEY_LEN, R_VALUE_AT, R_VALUE_LEN, R_HEADER_FIRST,
    R_HEADER_COUNT, R_HEADERS_AT)
from strata.format.record_table import (F_PROPS_AT, F_BODY_AT, F_BODY_END, F_BORN_TS,
                                        F_STORE_TS)


# The field table a store read returns is a view of a larger one (rows longer than its
# columns), so numba sees it as non-contiguous: indexing it [row, i] inside a loop computes
# and checks two indices per access (measured 18.7 ns a message for the record table below).
# Each loop takes its rows as 1-d arrays once and walks them one at a time (~2.5 ns).


@njit(cache=True, nogil=True)
def fitting(fields, size, limit, overhead, out):
    """Of the messages of ``fields`` (a field table), how many fit when ``size`` bytes are
    taken and ``limit`` is the budget, each counted as its body plus ``overhead``: the
    count into ``out[0]``, the bytes taken after them into ``out[1]``."""
    body, end = fields[F_BODY_AT], fields[F_BODY_END]
    take = 0
    for i in range(fields.shape[1]):
        grown = size + end[i] - body[i] + overhead
        if grown > limit:
            break
        size = grown
        take += 1
    out[0] = take
    out[1] = size


@njit(cache=True, nogil=True)
def plain_records(fields, records):
    """The record table of the messages of ``fields`` into ``records`` (R_FIELDS rows, a
    column each): value = body, no key, no headers, timestamp = born time (store time when
    there is none), offset deltas 0, 1, ... Returns False, writing nothing, when a message
    has a key, tags or properties (its properties section is not empty)."""
    n = fields.shape[1]
    props, body, end = fields[F_PROPS_AT], fields[F_BODY_AT], fields[F_BODY_END]
    born, stored = fields[F_BORN_TS], fields[F_STORE_TS]
    for i in range(n):
        if props[i] != body[i]:
            return False
    ts, delta = records[R_TIMESTAMP], records[R_OFFSET_DELTA]
    value_at, value_len, key_len = records[R_VALUE_AT], records[R_VALUE_LEN], records[R_KEY_LEN]
    for i in range(n):
        b = born[i]
        ts[i] = b if b > 0 else stored[i]
    for i in range(n):
        delta[i] = i
    for i in range(n):
        value_at[i] = body[i]
        value_len[i] = end[i] - body[i]
    for i in range(n):
        key_len[i] = -1
    for row in (R_KEY_AT, R_HEADER_FIRST, R_HEADER_COUNT, R_HEADERS_AT):
        zero = records[row]
        for i in range(n):
            zero[i] = 0
    return True


def warm() -> None:
    """Load both loops (numba's cached machine code) on a one-message table."""
    import numpy as np

    from strata.broker.kafka.batch_layout import R_FIELDS
    from strata.format.record_table import FIELDS
    fields = np.zeros((FIELDS, 1), np.int64)
    fitting(fields, 0, 1 << 20, 70, np.zeros(2, np.int64))
    plain_records(fields, np.empty((R_FIELDS, 1), np.int64))
