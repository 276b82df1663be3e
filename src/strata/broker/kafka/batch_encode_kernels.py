"""Compiled loops that write uncompressed Kafka record batches v2 from int64 column tables
(numba): the encoded size of each batch (every key, value and header range checked against the
data buffer first), the batches themselves, and the gather of plain values into one buffer.

The tables and the byte layout are ``batch_layout``'s; ``batch_kernels`` re-exports these loops
and ``record_batch`` is their Python face. Compiled on first use and cached beside this file
(``cache=True``).
"""

from __future__ import annotations

from numba import njit

from strata.broker.kafka.batch_layout import (
    HEADER_SIZE, LOG_OVERHEAD, P_LENGTH, P_LEADER_EPOCH, P_MAGIC, P_CRC, P_ATTRIBUTES,
    P_LAST_DELTA, P_BASE_TS, P_MAX_TS, P_PRODUCER_ID, P_PRODUCER_EPOCH, P_BASE_SEQUENCE,
    P_COUNT, R_TIMESTAMP, R_KEY_AT, R_KEY_LEN, R_VALUE_AT, R_VALUE_LEN, R_HEADER_FIRST,
    R_HEADER_COUNT, H_KEY_AT, H_KEY_LEN, H_VALUE_AT, H_VALUE_LEN, COLUMN_OUT_OF_RANGE, _put_be,
    _varint_size, _put_varint, _fail)
from strata.format.record_kernels import crc32c_at, memcpy


# --------------------------------------------------------------------------- encoding


@njit(cache=True, nogil=True, inline="always")
def _body_size(records, headers, r, delta, off):
    """Bytes of record ``r``'s body (after its length varint)."""
    klen = records[R_KEY_LEN, r]
    vlen = records[R_VALUE_LEN, r]
    hc = records[R_HEADER_COUNT, r]
    n = 1 + _varint_size(delta) + _varint_size(off) + _varint_size(klen) + max(klen, 0) + \
        _varint_size(vlen) + max(vlen, 0) + _varint_size(hc)
    h0 = records[R_HEADER_FIRST, r]
    for h in range(h0, h0 + hc):
        hk = headers[H_KEY_LEN, h]
        hv = headers[H_VALUE_LEN, h]
        n += _varint_size(hk) + hk + _varint_size(hv) + max(hv, 0)
    return n


@njit(cache=True, nogil=True, inline="always")
def _put_field(out, dst, p, src, n):
    """A length-prefixed field at ``p``: ``n`` as a varint (-1: null), then ``n`` bytes
    copied from address ``src``. Returns the position after it."""
    p = _put_varint(out, p, n)
    if n > 0:
        memcpy(dst + p, src, n)
        p += n
    return p


@njit(cache=True, nogil=True)
def batch_sizes(size, records, headers, firsts, counts, sizes, err):
    """The encoded size of each batch (records ``firsts[b] .. firsts[b] + counts[b]`` of the
    R_* table; R_TIMESTAMP, R_KEY_*, R_VALUE_*, R_HEADER_FIRST/COUNT are read) into
    ``sizes``. Every key, value and header range must lie within a data buffer of ``size``
    bytes (and the header rows within ``headers``), lengths >= -1 (header keys >= 0). Returns
    the total, or -1 with ``err`` set (COLUMN_OUT_OF_RANGE, the record)."""
    total = 0
    nh = headers.shape[1]
    nr = records.shape[1]
    for b in range(len(firsts)):
        f = firsts[b]
        c = counts[b]
        if f < 0 or c <= 0 or f + c > nr:
            _fail(err, COLUMN_OUT_OF_RANGE, b, -1, f, c)
            return -1
        base_ts = records[R_TIMESTAMP, f]
        n = HEADER_SIZE
        for i in range(c):
            r = f + i
            for at_row, len_row in ((R_KEY_AT, R_KEY_LEN), (R_VALUE_AT, R_VALUE_LEN)):
                at = records[at_row, r]
                ln = records[len_row, r]
                if ln < -1 or (ln > 0 and (at < 0 or at + ln > size)):
                    _fail(err, COLUMN_OUT_OF_RANGE, b, r, at, ln)
                    return -1
            h0 = records[R_HEADER_FIRST, r]
            hc = records[R_HEADER_COUNT, r]
            if hc < 0 or (hc > 0 and (h0 < 0 or h0 + hc > nh)):
                _fail(err, COLUMN_OUT_OF_RANGE, b, r, h0, hc)
                return -1
            for h in range(h0, h0 + hc):
                hk = headers[H_KEY_LEN, h]
                hv = headers[H_VALUE_LEN, h]
                ka = headers[H_KEY_AT, h]
                va = headers[H_VALUE_AT, h]
                if hk < 0 or (hk > 0 and (ka < 0 or ka + hk > size)) or hv < -1 or \
                        (hv > 0 and (va < 0 or va + hv > size)):
                    _fail(err, COLUMN_OUT_OF_RANGE, b, r, h, hk)
                    return -1
            body = _body_size(records, headers, r, records[R_TIMESTAMP, r] - base_ts, i)
            n += _varint_size(body) + body
        sizes[b] = n
        total += n
    return total


@njit(cache=True, nogil=True)
def write_batches(out, at, data, records, headers, firsts, counts, base_offsets,
                  leader_epoch, producer_id, producer_epoch, base_sequences, crc):
    """Write one uncompressed v2 batch per entry of ``firsts``/``counts`` (checked by
    ``batch_sizes``) back to back into ``out`` from byte ``at``: records as in ``records``
    (keys, values and header bytes copied from ``data``), offsets ``base_offsets[b] + i``,
    CreateTime, base timestamp the first record's, max timestamp the largest, CRC-32C over
    attributes..end (with ``crc``; else the caller stores it). Returns the position after the
    last batch."""
    src = data.ctypes.data
    dst = out.ctypes.data
    p = at
    for b in range(len(firsts)):
        f = firsts[b]
        c = counts[b]
        start = p
        base_ts = records[R_TIMESTAMP, f]
        max_ts = base_ts
        p += HEADER_SIZE
        for i in range(c):
            r = f + i
            ts = records[R_TIMESTAMP, r]
            if ts > max_ts:
                max_ts = ts
            body = _body_size(records, headers, r, ts - base_ts, i)
            p = _put_varint(out, p, body)
            out[p] = 0
            p = _put_varint(out, p + 1, ts - base_ts)
            p = _put_varint(out, p, i)
            p = _put_field(out, dst, p, src + records[R_KEY_AT, r], records[R_KEY_LEN, r])
            p = _put_field(out, dst, p, src + records[R_VALUE_AT, r],
                           records[R_VALUE_LEN, r])
            hc = records[R_HEADER_COUNT, r]
            p = _put_varint(out, p, hc)
            h0 = records[R_HEADER_FIRST, r]
            for h in range(h0, h0 + hc):
                p = _put_field(out, dst, p, src + headers[H_KEY_AT, h], headers[H_KEY_LEN, h])
                p = _put_field(out, dst, p, src + headers[H_VALUE_AT, h],
                               headers[H_VALUE_LEN, h])
        _put_be(out, start, base_offsets[b], 8)
        _put_be(out, start + P_LENGTH, p - start - LOG_OVERHEAD, 4)
        _put_be(out, start + P_LEADER_EPOCH, leader_epoch, 4)
        out[start + P_MAGIC] = 2
        _put_be(out, start + P_ATTRIBUTES, 0, 2)
        _put_be(out, start + P_LAST_DELTA, c - 1, 4)
        _put_be(out, start + P_BASE_TS, base_ts, 8)
        _put_be(out, start + P_MAX_TS, max_ts, 8)
        _put_be(out, start + P_PRODUCER_ID, producer_id, 8)
        _put_be(out, start + P_PRODUCER_EPOCH, producer_epoch, 2)
        _put_be(out, start + P_BASE_SEQUENCE, base_sequences[b], 4)
        _put_be(out, start + P_COUNT, c, 4)
        if crc:
            _put_be(out, start + P_CRC,
                    crc32c_at(dst + start + P_ATTRIBUTES, p - start - P_ATTRIBUTES), 4)
    return p


@njit(cache=True, nogil=True)
def gather_values(data, records, out):
    """Every record's value (``R_VALUE_AT`` / ``R_VALUE_LEN`` in ``data``; none may be
    null) back to back into ``out``: the bodies of a produce as one BytesColumn buffer,
    without a bytes object per record."""
    src = data.ctypes.data
    dst = out.ctypes.data
    p = 0
    for r in range(records.shape[1]):
        n = records[R_VALUE_LEN, r]
        if n > 0:
            memcpy(dst + p, src + records[R_VALUE_AT, r], n)
            p += n
    return p
