"""A Fetch's store side (strata.broker.kafka.fetch_read with its compiled loops,
fetch_kernels): which messages fit a partition's byte budget (each counted as its body plus
RECORD_OVERHEAD, at least one: KIP-74) and the record columns they become — plain messages
straight from the store's field table, messages with a key or properties through their
message objects — checked against the plain definition, message by message."""

from __future__ import annotations

import numpy as np
import pytest

import strata
from strata.broker.kafka import batch_kernels as bk
from strata.broker.kafka import fetch_kernels as fk
from strata.broker.kafka import fetch_read

SIZES = [0, 1, 50, 700, 3000, 90, 12_000, 5, 300] * 40


def _message(i: int) -> strata.Message:
    body = bytes([i % 251]) * SIZES[i]
    if i % 37 == 5:                               # a few with a key: not plain
        return strata.Message("t", body, keys=[f"k{i}"])
    return strata.Message("t", body)


def _records(parts) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, value, key) of every record the answer would carry."""
    out = []
    pieces, _end = fetch_read._pieces(parts)
    for cols, (firsts, counts, _sizes, _total), bases in pieces:
        r, data = cols.records, cols.data
        for f, c, base in zip(firsts.tolist(), counts.tolist(), bases.tolist()):
            for i in range(f, f + c):
                vat, vlen = int(r[bk.R_VALUE_AT, i]), int(r[bk.R_VALUE_LEN, i])
                kat, klen = int(r[bk.R_KEY_AT, i]), int(r[bk.R_KEY_LEN, i])
                out.append((base + i - f, bytes(data[vat:vat + vlen]),
                            None if klen < 0 else bytes(data[kat:kat + klen])))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = strata.open(tmp_path_factory.mktemp("fetch") / "s",
                    strata.StoreConfig(segment_size=8 << 20, prefault=False))
    s.create_topic("t", queues=1)
    for start in range(0, len(SIZES), 64):        # several puts: several store reads
        s.put_batch([_message(i) for i in range(start, min(len(SIZES), start + 64))])
    assert s.wait_dispatched(timeout=30.0)
    yield s
    s.close()


def _exactly(offset: int, n: int) -> int:
    """The budget that n messages from ``offset`` fill exactly."""
    return sum(SIZES[i] + fetch_read.RECORD_OVERHEAD for i in range(offset, offset + n))


@pytest.mark.parametrize("offset", [0, 7, 200])
@pytest.mark.parametrize("limit", [1, 69, 70, 71, 800, 5_000, 20_000, 100_000, 1 << 22,
                                   "2", "3", "9", "70", "130"])
def test_the_messages_that_fit_and_their_records(store, offset: int, limit) -> None:
    if isinstance(limit, str):                    # n messages exactly, one byte less, more
        exact = _exactly(offset, int(limit))
        for lim in (exact - 1, exact, exact + 1):
            test_the_messages_that_fit_and_their_records(store, offset, lim)
        return
    parts, size = fetch_read._read(store, "t", 0, offset, limit)
    # the definition: from the offset, while the running sum stays within the limit
    want, total = [], 0
    for i in range(offset, len(SIZES)):
        grown = total + SIZES[i] + fetch_read.RECORD_OVERHEAD
        if grown > limit and want:
            break
        want.append(i)
        total = grown
    assert size == total
    got = _records(parts)
    assert [o for o, _v, _k in got] == want
    for o, value, key in got:
        assert value == bytes([o % 251]) * SIZES[o]
        if o % 37 == 5:
            assert key == f"k{o}".encode()
        else:
            assert key is None


def test_plain_records_refuses_a_table_with_properties(store) -> None:
    got = store.get("t", 0, 0, 64).messages
    buf, fields = got.table()
    records = np.full((bk.R_FIELDS, fields.shape[1]), 77, np.int64)
    assert not fk.plain_records(fields, records)          # offset 5 has a key
    assert (records == 77).all()                          # nothing written
    plain = fields[:, :5]
    records = np.empty((bk.R_FIELDS, 5), np.int64)
    assert fk.plain_records(np.ascontiguousarray(plain), records)
    assert records[bk.R_KEY_LEN].tolist() == [-1] * 5
    assert records[bk.R_OFFSET_DELTA].tolist() == list(range(5))
    assert records[bk.R_VALUE_LEN].tolist() == SIZES[:5]
