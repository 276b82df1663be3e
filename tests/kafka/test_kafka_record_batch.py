"""Kafka record batches v2 (strata.broker.kafka.record_batch) against kafka-python's own
``kafka.record`` writer and reader.

Random records (null and empty keys and values, headers with null values, timestamps out of
order, every codec, several batches in one record set, producer ids and sequences) built by
kafka-python must decode to exactly what kafka-python reads back; encoding those columns again
must give batches that kafka-python reads as the same records (byte for byte kafka-python's
own uncompressed batch). Every rule Kafka's reader applies (CRC-32C, magic, lengths, varints,
counts, offset deltas, codecs, sizes after decompression) is refused with its Kafka error code,
and no mutation of a valid record set makes the decoder fail any other way.
"""

from __future__ import annotations

import gzip
import random
import struct

import cramjam
import numpy as np
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from strata.broker.kafka import batch_kernels as bk
from strata.broker.kafka import record_batch as rb
from strata.broker.kafka.record_batch import RecordBatchError, RecordColumns
from strata.errors import InvalidInputError

T0 = 1_700_000_000_000

# ------------------------------------------------------------------ building with kafka-python

maybe_bytes = st.one_of(st.none(), st.binary(max_size=40),
                        st.binary(min_size=1, max_size=3).map(lambda b: b * 100))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12)))
record = st.tuples(st.integers(-5000, 5000), maybe_bytes, maybe_bytes,
                   st.lists(header, max_size=3))
batch_spec = st.tuples(st.integers(0, 4), st.lists(record, min_size=1, max_size=30),
                       st.booleans())


def kp_batch(codec: int, records, *, producer: bool = False, base_sequence: int = 0) -> bytes:
    """One v2 batch written by kafka-python's builder."""
    b = MemoryRecordsBuilder(2, codec, 1 << 24, producer_id=7 if producer else -1,
                             producer_epoch=3 if producer else -1,
                             base_sequence=base_sequence if producer else -1)
    for ts, key, value, headers in records:
        assert b.append(T0 + ts, key, value, list(headers)) is not None
    b.close()
    return bytes(b.buffer())


def kp_read(data: bytes) -> list[list[tuple]]:
    """Per batch, kafka-python's reading of each record (offset, timestamp, key, value,
    headers with byte keys)."""
    out = []
    mr = MemoryRecords(data)
    while mr.has_next():
        batch = mr.next_batch()
        out.append([(r.offset, r.timestamp, r.key, r.value,
                     [(k.encode(), v) for k, v in r.headers]) for r in batch])
    return out


def ours(cols: RecordColumns) -> list[list[tuple]]:
    out = []
    for b in range(cols.batch_count):
        f = int(cols.batches[bk.B_FIRST_RECORD, b])
        base = int(cols.batches[bk.B_BASE_OFFSET, b])
        out.append([(base + int(cols.records[bk.R_OFFSET_DELTA, i]), int(cols.timestamps[i]),
                     cols.key(i), cols.value(i), cols.record_headers(i))
                    for i in range(f, f + int(cols.batches[bk.B_COUNT, b]))])
    return out


def reencode(cols: RecordColumns, **kw) -> bytes:
    return rb.encode_batches(cols, cols.batches[bk.B_FIRST_RECORD], cols.batches[bk.B_COUNT],
                             cols.batches[bk.B_BASE_OFFSET], **kw)


def with_crc(batch: bytearray) -> bytes:
    """``batch`` (one v2 batch) with its length and CRC-32C made right again."""
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def recompress(batch: bytes, codec: int, compress) -> bytes:
    """An uncompressed batch's records compressed with ``compress``, header fixed up."""
    out = bytearray(batch[:61]) + compress(batch[61:])
    attrs = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, (attrs & ~7) | codec)
    return with_crc(out)


# ------------------------------------------------------------------ round trips


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batch_spec, min_size=1, max_size=4), st.integers(0, 1 << 40))
def test_decode_matches_kafka_python_and_reencodes(specs, base):
    parts = []
    offset = base
    for i, (codec, records, producer) in enumerate(specs):
        raw = bytearray(kp_batch(codec, records, producer=producer, base_sequence=i * 100))
        struct.pack_into(">q", raw, 0, offset)       # outside the CRC, as a broker does
        parts.append(bytes(raw))
        offset += len(records)
    data = b"".join(parts)
    expect = kp_read(data)

    cols = rb.decode_record_set(data)
    assert ours(cols) == expect
    assert cols.batch_count == len(specs) and len(cols) == sum(len(r) for _, r, _ in specs)
    for b, (codec, records, producer) in enumerate(specs):
        kb = MemoryRecords(parts[b]).next_batch()
        assert cols.codec(b) == kb.compression_type
        assert cols.batches[bk.B_PRODUCER_ID, b] == kb.producer_id
        assert cols.batches[bk.B_PRODUCER_EPOCH, b] == kb.producer_epoch
        assert cols.batches[bk.B_BASE_SEQUENCE, b] == kb.base_sequence
        assert cols.batches[bk.B_BASE_TS, b] == kb.first_timestamp
        assert cols.batches[bk.B_MAX_TS, b] == kb.max_timestamp

    again = reencode(cols, leader_epoch=0)
    assert kp_read(again) == expect
    # uncompressed batches come out byte for byte as kafka-python writes them
    for b, (codec, records, producer) in enumerate(specs):
        if cols.codec(b) == rb.CODEC_NONE and not producer:
            one = rb.encode_batches(cols, [cols.batches[bk.B_FIRST_RECORD, b]],
                                    [cols.batches[bk.B_COUNT, b]],
                                    [cols.batches[bk.B_BASE_OFFSET, b]], leader_epoch=0)
            assert one == parts[b]
    assert ours(rb.decode_record_set(again)) == expect


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_each_codec_is_really_used_and_decoded(codec):
    records = [(i, b"key-%d" % (i % 7) if i % 5 else None, b"value %d " % i * 20 if i % 9 else None,
                [("trace", b"t%d" % i)] if i % 3 == 0 else []) for i in range(1000)]
    data = kp_batch(codec, records)
    cols = rb.decode_record_set(data)
    assert cols.codec(0) == codec
    assert ours(cols) == kp_read(data)


raw_codecs = {
    "snappy-raw": (2, lambda b: bytes(cramjam.snappy.compress_raw(b))),
    "gzip-stdlib": (1, gzip.compress),
    "lz4-frame": (3, lambda b: bytes(cramjam.lz4.compress(b))),
    "zstd": (4, lambda b: bytes(cramjam.zstd.compress(b))),
}


@pytest.mark.parametrize("name", sorted(raw_codecs))
def test_codec_framings(name):
    """Raw snappy (librdkafka) as well as kafka-python's xerial framing, and the stdlib's
    gzip, cramjam's lz4 frames and zstd."""
    codec, compress = raw_codecs[name]
    records = [(i, b"k%d" % i, b"v" * i, []) for i in range(50)]
    plain = kp_batch(0, records)
    data = recompress(plain, codec, compress)
    cols = rb.decode_record_set(data)
    assert cols.codec(0) == codec
    assert ours(cols) == kp_read(plain)


def test_mixed_codecs_share_one_buffer():
    a = kp_batch(0, [(0, b"a", b"1", [])])
    b = kp_batch(1, [(1, b"b", b"2" * 500, [("h", None)])])
    c = kp_batch(0, [(2, None, b"3", [])])
    cols = rb.decode_record_set(a + b + c)
    assert [cols.key(i) for i in range(3)] == [b"a", b"b", None]
    assert [cols.value(i) for i in range(3)] == [b"1", b"2" * 500, b"3"]
    assert cols.record_headers(1) == [(b"h", None)]


def test_encode_into_one_buffer_at_an_offset():
    cols = RecordColumns.from_lists([T0 + 5, T0, T0 + 9, T0 + 1],
                                    [b"k0", None, b"", b"k3"], [None, b"v1", b"", b"v" * 300],
                                    [[(b"a", b"1")], [], [(b"b", None), (b"c", b"")], []])
    firsts, counts, bases = [0, 2, 3], [2, 1, 1], [100, 102, 103]
    n = rb.encoded_size(cols, firsts, counts)
    out = np.zeros(n + 10, np.uint8)
    end = rb.encode_batches_into(out, 10, cols, firsts, counts, bases, producer_id=5,
                                 producer_epoch=1, base_sequences=[0, 2, 3])
    assert end == n + 10 and not out[:10].any()
    got = kp_read(out[10:].tobytes())
    assert got == [[(100, T0 + 5, b"k0", None, [(b"a", b"1")]), (101, T0, None, b"v1", [])],
                   [(102, T0 + 9, b"", b"", [(b"b", None), (b"c", b"")])],
                   [(103, T0 + 1, b"k3", b"v" * 300, [])]]
    mr = MemoryRecords(out[10:].tobytes())
    first = mr.next_batch()
    assert first.validate_crc() and first.max_timestamp == T0 + 5
    assert first.first_timestamp == T0 + 5 and first.producer_id == 5
    with pytest.raises(InvalidInputError, match="do not fit"):
        rb.encode_batches_into(np.zeros(n - 1, np.uint8), 0, cols, firsts, counts, bases)


def test_encode_refuses_columns_outside_the_buffer():
    cols = RecordColumns.from_lists([T0], [b"k"], [b"v"])
    cols.records[bk.R_VALUE_LEN, 0] = 1000
    with pytest.raises(RecordBatchError, match="outside the columns' buffer"):
        rb.encode_batches(cols, [0], [1], [0])
    cols.records[bk.R_VALUE_LEN, 0] = 1
    with pytest.raises(RecordBatchError, match="outside"):
        rb.encode_batches(cols, [0], [2], [0])        # more records than the columns hold
    with pytest.raises(InvalidInputError):
        rb.encode_batch(0, [], [], [])


# ------------------------------------------------------------------ refusals


def plain(n: int = 3, headers=()) -> bytes:
    return kp_batch(0, [(i, b"key", b"value", list(headers)) for i in range(n)])


def patched(batch: bytes, fmt: str, at: int, value) -> bytes:
    b = bytearray(batch)
    struct.pack_into(fmt, b, at, value)
    return with_crc(b)


def refused(data: bytes, code: int, words: str, **kw) -> RecordBatchError:
    with pytest.raises(RecordBatchError) as info:
        rb.decode_record_set(data, **kw)
    assert info.value.error_code == code, str(info.value)
    assert words in str(info.value)
    return info.value


def test_bad_crc_is_corrupt_message():
    b = bytearray(plain())
    b[-1] ^= 0x01
    refused(bytes(b), rb.CORRUPT_MESSAGE, "CRC-32C mismatch")


def test_old_and_unknown_magic():
    b = bytearray(plain())
    b[16] = 1
    refused(bytes(b), rb.UNSUPPORTED_FOR_MESSAGE_FORMAT, "magic 1")
    b[16] = 9
    refused(bytes(b), rb.CORRUPT_MESSAGE, "magic 9")
    # a v0 message set shorter than a v2 header still names its magic
    refused(struct.pack(">qiIbbii", 0, 14, 0, 0, 0, -1, 0), rb.UNSUPPORTED_FOR_MESSAGE_FORMAT,
            "magic 0")


def test_lengths_and_truncation():
    b = plain()
    refused(b[:-1], rb.CORRUPT_MESSAGE, "runs past the end")
    refused(b[:40], rb.CORRUPT_MESSAGE, "fewer than the 61")
    refused(b + b[:30], rb.CORRUPT_MESSAGE, "batch 1")
    for length in (10, -1):   # batchLength lies outside the CRC
        short = bytearray(b)
        struct.pack_into(">i", short, 8, length)
        refused(bytes(short), rb.CORRUPT_MESSAGE, "below the header")
    refused(b"", rb.INVALID_RECORD, "no batch")


def test_attributes():
    b = plain()
    refused(patched(b, ">h", 21, 5), rb.UNSUPPORTED_COMPRESSION_TYPE, "codec 5")
    refused(patched(b, ">h", 21, 0x20), rb.INVALID_RECORD, "control batches")
    refused(patched(b, ">h", 21, 0x10), rb.INVALID_TXN_STATE, "transactional")


def test_counts_and_offset_deltas():
    b = plain(3)
    refused(patched(b, ">i", 57, 0), rb.INVALID_RECORD, "record count 0")
    refused(patched(b, ">i", 57, -4), rb.INVALID_RECORD, "record count -4")
    refused(patched(patched(b, ">i", 57, 4), ">i", 23, 3), rb.INVALID_RECORD,
            "runs past the batch")
    refused(patched(patched(b, ">i", 57, 1 << 30), ">i", 23, (1 << 30) - 1),
            rb.INVALID_RECORD, "more than its bytes can hold")
    refused(patched(b, ">i", 23, 7), rb.INVALID_RECORD, "last offset delta 7")
    refused(patched(patched(b, ">i", 57, 2), ">i", 23, 1), rb.INVALID_RECORD,
            "follow the batch's last record")
    # the second record says offset delta 5
    recs = bytearray(b)
    second = 61 + 1 + recs[61] // 2          # past record 0 (length varint + body)
    assert recs[second + 3] == 2            # its offset delta varint (zigzag 1)
    recs[second + 3] = 10
    refused(with_crc(recs), rb.INVALID_RECORD, "offset delta 5")


def _record(body: bytes) -> bytes:
    """A record: the length varint (one byte) and ``body``."""
    assert len(body) < 64
    return bytes([len(body) * 2]) + body


def _batch_of(records: bytes, count: int = 1) -> bytes:
    head = bytearray(plain(1)[:61])
    struct.pack_into(">i", head, 57, count)
    struct.pack_into(">i", head, 23, count - 1)
    return with_crc(head + records)


def test_varints_and_field_lengths():
    ok = _batch_of(_record(b"\x00\x00\x00\x02k\x02v\x00"))
    cols = rb.decode_record_set(ok)
    assert cols.key(0) == b"k" and cols.value(0) == b"v"
    # a 6-byte varint for the key length
    refused(_batch_of(_record(b"\x00\x00\x00\x82\x80\x80\x80\x80\x00\x02v\x00")),
            rb.INVALID_RECORD, "key length varint is too long")
    # a 5-byte varint past 32 bits
    refused(_batch_of(_record(b"\x00\x00\x00\x82\x80\x80\x80\x70\x02v\x00")),
            rb.INVALID_RECORD, "key length varint is too long")
    # an 11-byte varlong timestamp delta
    refused(_batch_of(_record(b"\x00" + b"\x80" * 10 + b"\x00\x00\x02k\x02v\x00")),
            rb.INVALID_RECORD, "timestamp delta varint is too long")
    # varint cut by the record's end
    refused(_batch_of(_record(b"\x00\x00\x00\x02k\x02v\x80")), rb.INVALID_RECORD,
            "header count varint runs past")
    refused(_batch_of(_record(b"\x00\x00\x00\x09k\x02v\x00")), rb.INVALID_RECORD,
            "key length -5")
    refused(_batch_of(_record(b"\x00\x00\x00\x02k\x40v\x00")), rb.INVALID_RECORD,
            "value length 32")
    refused(_batch_of(_record(b"\x00\x00\x00\x02k\x02v\x01")), rb.INVALID_RECORD,
            "header count -1")
    refused(_batch_of(_record(b"\x00\x00\x00\x02k\x02v\x02\x01\x00")), rb.INVALID_RECORD,
            "header key length -1")
    refused(_batch_of(_record(b"\x00\x00\x00\x02k\x02v\x02\x02h\x05")), rb.INVALID_RECORD,
            "header value length -3")
    refused(_batch_of(_record(b"\x00\x00\x00\x02k\x02v\x00\x00")), rb.INVALID_RECORD,
            "fields take 8 bytes")
    refused(_batch_of(bytes([0x0A]) + bytes(6)), rb.INVALID_RECORD,
            "record length 5")
    # a null header value and an empty key and value are kept apart
    cols = rb.decode_record_set(_batch_of(_record(b"\x00\x00\x00\x00\x01\x04\x02h\x01\x00\x00")))
    assert cols.key(0) == b"" and cols.value(0) is None
    assert cols.record_headers(0) == [(b"h", None), (b"", b"")]


bombs = {
    "gzip": (1, lambda b: bytes(cramjam.gzip.compress(b))),
    "snappy-raw": (2, lambda b: bytes(cramjam.snappy.compress_raw(b))),
    "snappy-xerial": (2, None),
    "lz4": (3, lambda b: bytes(cramjam.lz4.compress(b))),
    "zstd": (4, lambda b: bytes(cramjam.zstd.compress(b))),
}


@pytest.mark.parametrize("name", sorted(bombs))
def test_decompressed_size_is_bounded(name):
    codec, compress = bombs[name]
    if compress is None:
        from kafka.codec import snappy_encode
        compress = snappy_encode
    big = kp_batch(0, [(0, None, bytes(2 << 20), [])])   # 2 MiB of zeros
    bomb = recompress(big, codec, compress)
    assert len(bomb) < 200_000
    refused(bomb, rb.MESSAGE_TOO_LARGE, "decompress to more than 1000000 bytes",
            max_decompressed=1_000_000)
    assert rb.decode_record_set(bomb, max_decompressed=3 << 20).value(0) == bytes(2 << 20)


@pytest.mark.parametrize("name", sorted(bombs))
def test_garbage_compressed_data_is_corrupt(name):
    codec, _ = bombs[name]
    head = bytearray(plain(1)[:61])
    struct.pack_into(">h", head, 21, codec)
    garbage = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\xff\xff\xff\x00junk" \
        if name == "snappy-xerial" else b"\xffjunk that is no compressed stream" * 3
    refused(with_crc(head + garbage), rb.CORRUPT_MESSAGE, "do not decompress")


# ------------------------------------------------------------------ mutations


def test_no_mutation_fails_other_than_with_a_kafka_code():
    """12,000 mutated record sets (bit flips, byte overwrites, truncation, extension, varint
    bytes set to 0xff; half with the CRC made right so the record parser sees them): each
    decodes or raises RecordBatchError, and whatever decodes points inside its buffer."""
    rng = random.Random(23)
    seeds = [plain(5, [("h", b"x")]), kp_batch(1, [(i, b"k", b"v" * 40, []) for i in range(20)]),
             kp_batch(3, [(i, None, b"w" * i, [("a", None)]) for i in range(10)]),
             kp_batch(2, [(i, b"", b"", []) for i in range(5)]),
             kp_batch(4, [(-i, b"k", None, []) for i in range(7)]), plain(2) + plain(4)]
    outcomes = {"ok": 0, "refused": 0}
    for n in range(12_000):
        b = bytearray(rng.choice(seeds))
        kind = n % 5
        if kind == 0:
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b[rng.randrange(len(b))] = rng.choice([0x00, 0xff, 0x80, 0x7f, 0x01])
        elif kind == 2:
            del b[rng.randrange(len(b)):]
        elif kind == 3:
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 70)))
        else:
            i = rng.randrange(61, len(b))
            b[i:i + rng.randint(1, 6)] = b"\xff" * rng.randint(1, 6)
        if n % 2 and len(b) >= 61 and b[16] == 2:
            b = bytearray(with_crc(b[:12 + max(49, min(len(b) - 12,
                                                         struct.unpack_from(">i", b, 8)[0]))]))
        try:
            cols = rb.decode_record_set(bytes(b))
        except RecordBatchError as exc:
            assert exc.error_code in (2, 10, 43, 48, 76, 87) and str(exc)
            outcomes["refused"] += 1
            continue
        outcomes["ok"] += 1
        size = len(cols.data)
        r = cols.records
        for at, ln in ((bk.R_KEY_AT, bk.R_KEY_LEN), (bk.R_VALUE_AT, bk.R_VALUE_LEN)):
            assert ((r[ln] < 0) | ((r[at] >= 0) & (r[at] + r[ln] <= size))).all()
        h = cols.headers
        assert ((h[bk.H_KEY_LEN] >= 0) & (h[bk.H_KEY_AT] + h[bk.H_KEY_LEN] <= size)).all()
        assert kp_read(reencode(cols)) == ours(cols)
    assert outcomes["refused"] > 6000 and outcomes["ok"] > 100, outcomes


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=12))
def test_header_keys_must_be_utf8_as_python_decodes_them(key):
    body = b"\x00\x00\x00\x00\x00\x02" + bytes([len(key) * 2]) + key + b"\x00"
    data = _batch_of(_record(body))
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        refused(data, rb.INVALID_RECORD, "header key is not UTF-8")
    else:
        assert rb.decode_record_set(data).record_headers(0) == [(key, b"")]


def test_many_batches_take_the_compiled_crc_path_both_ways():
    """Past rb._FEW_BATCHES the CRCs are checked and written in the compiled loop instead of
    the crc32c package: same answers."""
    n = rb._FEW_BATCHES + 5
    parts = [kp_batch(0, [(i, b"k%d" % i, b"v" * i, [("h", b"%d" % i)])]) for i in range(n)]
    cols = rb.decode_record_set(b"".join(parts))
    assert [cols.value(i) for i in range(n)] == [b"v" * i for i in range(n)]
    bad = bytearray(b"".join(parts))
    bad[sum(map(len, parts[:n - 2])) + 70] ^= 0x40
    refused(bytes(bad), rb.CORRUPT_MESSAGE, f"batch {n - 2} (byte")
    many = rb.encode_batches(cols, np.arange(n), np.ones(n, np.int64), np.arange(n) * 10,
                             leader_epoch=0)
    assert many == b"".join(parts[i][:0] + struct.pack(">q", 10 * i) + parts[i][8:]
                            for i in range(n))
    few = rb.encode_batches(cols, np.arange(3), np.ones(3, np.int64), [0, 10, 20],
                            leader_epoch=0)
    assert few == many[:len(few)]


@pytest.mark.parametrize("claim", [0, 10, 1 << 31])
def test_a_lying_size_hint_costs_a_retry_not_a_wrong_answer(claim):
    """gzip's ISIZE trailer sizes the output; a false one is survived (grown or capped)."""
    value = bytes(range(256)) * 2000
    plain_batch = kp_batch(0, [(0, b"k", value, [])])
    z = bytearray(gzip.compress(plain_batch[61:]))
    struct.pack_into("<I", z, len(z) - 4, claim)
    data = recompress(plain_batch, 1, lambda b: bytes(z))
    try:
        cols = rb.decode_record_set(data, max_decompressed=4 << 20)
    except RecordBatchError as exc:      # a decoder may check ISIZE: then it is corrupt data
        assert exc.error_code == rb.CORRUPT_MESSAGE
    else:
        assert cols.value(0) == value


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(-(1 << 40), 1 << 40), maybe_bytes, maybe_bytes,
                          st.lists(st.tuples(st.text(max_size=6).map(str.encode),
                                             st.one_of(st.none(), st.binary(max_size=9))),
                                   max_size=3)), min_size=1, max_size=40),
       st.integers(0, 1 << 50), st.integers(-1, 1 << 20))
def test_encoded_columns_read_back_in_kafka_python(recs, base, leader_epoch):
    """Any records (timestamps far apart, nulls, empties, headers) encoded from columns are
    read by kafka-python as given, and decode to the same columns' contents."""
    ts = [T0 + r[0] for r in recs]
    data = rb.encode_batch(base, ts, [r[1] for r in recs], [r[2] for r in recs],
                           [r[3] for r in recs], leader_epoch=leader_epoch)
    want = [[(base + i, ts[i], k, v, h) for i, (_, k, v, h) in enumerate(recs)]]
    assert kp_read(data) == want
    batch = MemoryRecords(data).next_batch()
    assert batch.validate_crc() and batch.max_timestamp == max(ts)
    assert ours(rb.decode_record_set(data)) == want
