"""Compiled loops over Kafka record batches v2 (numba): check batch headers, parse the records
and their headers into int64 column tables (the loops that write uncompressed batches from such
tables are ``batch_encode_kernels``', re-exported here).

The byte layout (big-endian header of 61 bytes, records of zigzag varints) is described in
``docs/kafka_records.md``; ``record_batch`` is the Python face of these loops. Every position and
length read from the input is checked against the bytes it must lie in before a byte is read,
so a damaged or hostile record set is reported (a reason code and where), never read out of
bounds. Varints are bounded: at most 5 bytes holding 32 bits (``varint``) or 10 bytes holding
64 bits (``varlong``), as Kafka's own reader requires.

The tables are column-major like the store's field table (``table[ROW, i]``): one column per
batch, record or header. Loops run once per batch and once per record in compiled code; no
Python runs per record. The CRC-32C of a batch runs here on the CPU's instruction
(``record_kernels.crc32c_at``, about 10 GB/s); ``record_batch`` hands the CRCs of a few large
batches to the ``crc32c`` package instead, which interleaves three streams (about 28 GB/s).
Compiled on first use and cached beside this file (``cache=True``).

The layout (positions, table rows, reason codes) and the varint/big-endian primitives live in
``batch_layout``, the writing loops in ``batch_encode_kernels``; both are re-exported here, so
``batch_kernels`` stays the one name the codec's callers import.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from strata.broker.kafka.batch_encode_kernels import (  # noqa: F401  (re-exported)
    batch_sizes, gather_values, write_batches)
from strata.broker.kafka.batch_layout import (  # noqa: F401  (re-exported)
    HEADER_SIZE, LOG_OVERHEAD, MIN_RECORD, P_LENGTH, P_LEADER_EPOCH, P_MAGIC, P_CRC,
    P_ATTRIBUTES, P_LAST_DELTA, P_BASE_TS, P_MAX_TS, P_PRODUCER_ID, P_PRODUCER_EPOCH,
    P_BASE_SEQUENCE, P_COUNT, CODEC_MASK, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, CONTROL_BIT,
    B_BASE_OFFSET, B_LEADER_EPOCH, B_ATTRIBUTES, B_LAST_DELTA, B_BASE_TS, B_MAX_TS,
    B_PRODUCER_ID, B_PRODUCER_EPOCH, B_BASE_SEQUENCE, B_COUNT, B_FIRST_RECORD, B_AT, B_SIZE,
    B_RECORDS_AT, B_RECORDS_END, B_CRC, B_FIELDS, R_TIMESTAMP, R_OFFSET_DELTA, R_KEY_AT,
    R_KEY_LEN, R_VALUE_AT, R_VALUE_LEN, R_HEADER_FIRST, R_HEADER_COUNT, R_HEADERS_AT, R_FIELDS,
    H_KEY_AT, H_KEY_LEN, H_VALUE_AT, H_VALUE_LEN, H_FIELDS, OK, SHORT_HEADER, BAD_BATCH_LENGTH,
    TRUNCATED_BATCH, OLD_MAGIC, BAD_MAGIC, BAD_CRC, BAD_CODEC, CONTROL_BATCH,
    TRANSACTIONAL_BATCH, BAD_COUNT, BAD_LAST_DELTA, COUNT_PAST_BYTES, VARINT_TRUNCATED,
    VARINT_TOO_LONG, BAD_RECORD_LENGTH, BAD_OFFSET_DELTA, BAD_KEY_LENGTH, BAD_VALUE_LENGTH,
    BAD_HEADER_COUNT, BAD_HEADER_KEY_LENGTH, BAD_HEADER_VALUE_LENGTH, RECORD_SIZE_MISMATCH,
    TRAILING_BYTES, COLUMN_OUT_OF_RANGE, HEADER_KEY_NOT_UTF8, F_LENGTH, F_TIMESTAMP,
    F_OFFSET_DELTA, F_KEY_LENGTH, F_VALUE_LENGTH, F_HEADER_COUNT, F_HEADER_KEY_LENGTH,
    F_HEADER_VALUE_LENGTH, _be, _be_i16, _be_i32, _be_i64, _varint, _fail)
from strata.format.record_kernels import crc32c_at, load_u8


# --------------------------------------------------------------------------- UTF-8


@njit(cache=True, nogil=True)
def utf8_error(addr, n):
    """-1 if the ``n`` bytes at ``addr`` are well-formed UTF-8 (no overlong forms, no
    surrogates, nothing past U+10FFFF: what Python's decoder accepts), else the position of
    the first byte of the bad sequence."""
    i = 0
    while i < n:
        c = load_u8(addr + i)
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2 or c > 0xF4:
            return i
        lo = 0x80
        hi = 0xBF
        if c < 0xE0:
            need = 1
        elif c < 0xF0:
            need = 2
            lo = 0xA0 if c == 0xE0 else 0x80
            hi = 0x9F if c == 0xED else 0xBF
        else:
            need = 3
            lo = 0x90 if c == 0xF0 else 0x80
            hi = 0x8F if c == 0xF4 else 0xBF
        if i + need >= n:
            return i
        c1 = load_u8(addr + i + 1)
        if c1 < lo or c1 > hi:
            return i
        for k in range(2, need + 1):
            ck = load_u8(addr + i + k)
            if ck < 0x80 or ck > 0xBF:
                return i
        i += need + 1
    return -1



# --------------------------------------------------------------------------- decoding


@njit(cache=True, nogil=True)
def scan_batches(data, batches, err):
    """Walk the batches of the record set ``data`` (uint8 array) one after another: each
    must have a whole header, magic 2 and a length within the record set. Fills
    ``batches[:, i]`` (B_* rows; B_RECORDS_AT/END are positions in ``data``, B_CRC the stored
    CRC); ``check_batches`` judges the rest. Returns the number of batches, or -1 with ``err``
    saying why and where."""
    addr = data.ctypes.data
    size = len(data)
    p = 0
    n = 0
    while p < size:
        a = addr + p
        if size - p < HEADER_SIZE:
            if size - p >= P_MAGIC + 1:
                magic = load_u8(a + P_MAGIC)
                if magic < 2:
                    _fail(err, OLD_MAGIC, n, -1, p, magic)
                    return -1
            _fail(err, SHORT_HEADER, n, -1, p, size - p)
            return -1
        length = _be_i32(a + P_LENGTH)
        magic = load_u8(a + P_MAGIC)
        if magic != 2:
            _fail(err, OLD_MAGIC if magic < 2 else BAD_MAGIC, n, -1, p, magic)
            return -1
        if length < HEADER_SIZE - LOG_OVERHEAD:
            _fail(err, BAD_BATCH_LENGTH, n, -1, p, length)
            return -1
        total = length + LOG_OVERHEAD
        if total > size - p:
            _fail(err, TRUNCATED_BATCH, n, -1, p, length)
            return -1
        batches[B_BASE_OFFSET, n] = _be_i64(a)
        batches[B_CRC, n] = np.int64(_be(a + P_CRC, 4))
        batches[B_LEADER_EPOCH, n] = _be_i32(a + P_LEADER_EPOCH)
        batches[B_ATTRIBUTES, n] = _be_i16(a + P_ATTRIBUTES)
        batches[B_LAST_DELTA, n] = _be_i32(a + P_LAST_DELTA)
        batches[B_BASE_TS, n] = _be_i64(a + P_BASE_TS)
        batches[B_MAX_TS, n] = _be_i64(a + P_MAX_TS)
        batches[B_PRODUCER_ID, n] = _be_i64(a + P_PRODUCER_ID)
        batches[B_PRODUCER_EPOCH, n] = _be_i16(a + P_PRODUCER_EPOCH)
        batches[B_BASE_SEQUENCE, n] = _be_i32(a + P_BASE_SEQUENCE)
        batches[B_COUNT, n] = _be_i32(a + P_COUNT)
        batches[B_FIRST_RECORD, n] = 0
        batches[B_AT, n] = p
        batches[B_SIZE, n] = total
        batches[B_RECORDS_AT, n] = p + HEADER_SIZE
        batches[B_RECORDS_END, n] = p + total
        n += 1
        p += total
    return n


@njit(cache=True, nogil=True)
def check_batches(data, batches, nbatches, check_crc, err):
    """Judge the batches ``scan_batches`` found, in order: the CRC-32C of attributes..end
    (with ``check_crc``; else the caller checked it), codec 0-4, neither control nor
    transactional, recordCount >= 1 and lastOffsetDelta = recordCount - 1. Returns how many
    are compressed, or -1 with ``err`` set."""
    addr = data.ctypes.data
    compressed = 0
    for n in range(nbatches):
        p = batches[B_AT, n]
        if check_crc:
            crc = np.int64(crc32c_at(addr + p + P_ATTRIBUTES, batches[B_SIZE, n] - P_ATTRIBUTES))
            if crc != batches[B_CRC, n]:
                _fail(err, BAD_CRC, n, -1, p, crc)
                return -1
        attributes = batches[B_ATTRIBUTES, n]
        if (attributes & CODEC_MASK) > 4:
            _fail(err, BAD_CODEC, n, -1, p, attributes & CODEC_MASK)
            return -1
        if attributes & CONTROL_BIT:
            _fail(err, CONTROL_BATCH, n, -1, p, attributes)
            return -1
        if attributes & TRANSACTIONAL_BIT:
            _fail(err, TRANSACTIONAL_BATCH, n, -1, p, attributes)
            return -1
        count = batches[B_COUNT, n]
        if count <= 0:
            _fail(err, BAD_COUNT, n, -1, p, count)
            return -1
        if batches[B_LAST_DELTA, n] != count - 1:
            _fail(err, BAD_LAST_DELTA, n, -1, p, batches[B_LAST_DELTA, n])
            return -1
        if attributes & CODEC_MASK:
            compressed += 1
    return compressed


@njit(cache=True, nogil=True)
def record_total(batches, nbatches, err):
    """The records the batches hold, once each batch's count is checked against its
    (decompressed) bytes: a record takes at least MIN_RECORD. Returns -1 with ``err`` set
    (COUNT_PAST_BYTES) otherwise, before anything is sized by a hostile count."""
    total = 0
    for n in range(nbatches):
        count = batches[B_COUNT, n]
        if count * MIN_RECORD > batches[B_RECORDS_END, n] - batches[B_RECORDS_AT, n]:
            _fail(err, COUNT_PAST_BYTES, n, -1, batches[B_AT, n], count)
            return -1
        total += count
    return total


@njit(cache=True, nogil=True)
def parse_records(buf, batches, nbatches, records, err):
    """Parse the records of the ``nbatches`` checked batches (their records lie in
    ``buf[B_RECORDS_AT:B_RECORDS_END]``, decompressed) into ``records[:, r]`` (R_* rows,
    positions in ``buf``, absolute timestamps) and set each batch's B_FIRST_RECORD. Every
    varint, length and offset delta is checked, and a batch's records must fill its bytes
    exactly. Header keys must be UTF-8 (Kafka's clients read them as strings). Headers are
    checked and counted, not yet stored (``fill_headers``). The caller
    sized ``records`` to the batches' counts and checked each count against its bytes.
    Returns (records, headers), or (-1, -1) with ``err`` set."""
    addr = buf.ctypes.data
    r = 0
    nh = 0
    for b in range(nbatches):
        p = batches[B_RECORDS_AT, b]
        end = batches[B_RECORDS_END, b]
        base_ts = batches[B_BASE_TS, b]
        batches[B_FIRST_RECORD, b] = r
        for i in range(batches[B_COUNT, b]):
            length, q = _varint(addr, p, end, 5)
            if q < 0:
                _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p, F_LENGTH)
                return -1, -1
            if length < MIN_RECORD - 1 or length > end - q:
                _fail(err, BAD_RECORD_LENGTH, b, i, p, length)
                return -1, -1
            rend = q + length
            p = q + 1                      # the record's attributes byte: unused
            delta, q = _varint(addr, p, rend, 10)
            if q < 0:
                _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                      F_TIMESTAMP)
                return -1, -1
            p = q
            off, q = _varint(addr, p, rend, 5)
            if q < 0:
                _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                      F_OFFSET_DELTA)
                return -1, -1
            if off != i:
                _fail(err, BAD_OFFSET_DELTA, b, i, p, off)
                return -1, -1
            p = q
            klen, q = _varint(addr, p, rend, 5)
            if q < 0:
                _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                      F_KEY_LENGTH)
                return -1, -1
            if klen < -1 or klen > rend - q:
                _fail(err, BAD_KEY_LENGTH, b, i, p, klen)
                return -1, -1
            key_at = q
            p = q + max(klen, 0)
            vlen, q = _varint(addr, p, rend, 5)
            if q < 0:
                _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                      F_VALUE_LENGTH)
                return -1, -1
            if vlen < -1 or vlen > rend - q:
                _fail(err, BAD_VALUE_LENGTH, b, i, p, vlen)
                return -1, -1
            value_at = q
            p = q + max(vlen, 0)
            hc, q = _varint(addr, p, rend, 5)
            if q < 0:
                _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                      F_HEADER_COUNT)
                return -1, -1
            if hc < 0 or 2 * hc > rend - q:   # a header takes at least 2 bytes
                _fail(err, BAD_HEADER_COUNT, b, i, p, hc)
                return -1, -1
            p = q
            headers_at = p
            for h in range(hc):
                hk, q = _varint(addr, p, rend, 5)
                if q < 0:
                    _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                          F_HEADER_KEY_LENGTH)
                    return -1, -1
                if hk < 0 or hk > rend - q:
                    _fail(err, BAD_HEADER_KEY_LENGTH, b, i, p, hk)
                    return -1, -1
                bad = utf8_error(addr + q, hk)
                if bad >= 0:
                    _fail(err, HEADER_KEY_NOT_UTF8, b, i, q, bad)
                    return -1, -1
                p = q + hk
                hv, q = _varint(addr, p, rend, 5)
                if q < 0:
                    _fail(err, VARINT_TRUNCATED if q == -1 else VARINT_TOO_LONG, b, i, p,
                          F_HEADER_VALUE_LENGTH)
                    return -1, -1
                if hv < -1 or hv > rend - q:
                    _fail(err, BAD_HEADER_VALUE_LENGTH, b, i, p, hv)
                    return -1, -1
                p = q + max(hv, 0)
            if p != rend:
                _fail(err, RECORD_SIZE_MISMATCH, b, i, rend - length, p - (rend - length))
                return -1, -1
            records[R_TIMESTAMP, r] = base_ts + delta
            records[R_OFFSET_DELTA, r] = off
            records[R_KEY_AT, r] = key_at
            records[R_KEY_LEN, r] = klen
            records[R_VALUE_AT, r] = value_at
            records[R_VALUE_LEN, r] = vlen
            records[R_HEADER_FIRST, r] = nh
            records[R_HEADER_COUNT, r] = hc
            records[R_HEADERS_AT, r] = headers_at
            nh += hc
            r += 1
        if p != end:
            _fail(err, TRAILING_BYTES, b, -1, p, end - p)
            return -1, -1
    return r, nh


@njit(cache=True, nogil=True)
def fill_headers(buf, records, nrecords, headers):
    """Store the headers of the records that ``parse_records`` checked into ``headers[:, h]``
    (H_* rows, positions in ``buf``), in record order."""
    addr = buf.ctypes.data
    for r in range(nrecords):
        hc = records[R_HEADER_COUNT, r]
        if hc == 0:
            continue
        p = records[R_HEADERS_AT, r]
        h = records[R_HEADER_FIRST, r]
        end = len(buf)
        for k in range(hc):
            hk, p = _varint(addr, p, end, 5)
            headers[H_KEY_AT, h + k] = p
            headers[H_KEY_LEN, h + k] = hk
            p += hk
            hv, p = _varint(addr, p, end, 5)
            headers[H_VALUE_AT, h + k] = p
            headers[H_VALUE_LEN, h + k] = hv
            p += max(hv, 0)
