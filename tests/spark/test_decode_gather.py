"""decode._gather (row copies through a window view, byte-index fallback) equals plain slicing."""

from __future__ import annotations

import numpy as np
import pytest

from strata.spark.decode import _binary, _gather


@pytest.mark.parametrize("case", ["equal", "similar", "one-huge", "at-buffer-end", "empty-rows"])
def test_gather_equals_slicing(case):
    rng = np.random.default_rng(7)
    data = np.frombuffer(rng.bytes(1 << 16), np.uint8)
    n = 300
    if case == "equal":
        lens = np.full(n, 100)
    elif case == "similar":
        lens = rng.integers(80, 120, n)
    elif case == "one-huge":
        lens = np.full(n, 10)
        lens[5] = 40_000                 # padding every row to this would be wasteful
    elif case == "at-buffer-end":
        lens = rng.integers(1, 50, n)
        lens[-1] = 200
    else:
        lens = rng.integers(0, 3, n)
    lens = lens.astype(np.int64)
    starts = rng.integers(0, len(data) - lens.max() - 1, n).astype(np.int64)
    if case == "at-buffer-end":
        starts[0] = len(data) - lens[0]  # a short row ending exactly at the buffer's end
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    want = b"".join(data[s:s + k].tobytes() for s, k in zip(starts, lens))
    assert _gather(data, starts, lens, offsets, int(offsets[-1])).tobytes() == want
    arr = _binary(data, starts, lens)
    assert arr.to_pylist() == [data[s:s + k].tobytes() for s, k in zip(starts, lens)]


def test_read_range_key_column_with_and_without_properties(tmp_path):
    import strata
    from strata.spark.planning import QueueRange
    from strata.spark.schema import arrow_schema, read_schema
    from strata.spark.source import read_range

    path = tmp_path / "s"
    with strata.open(path, strata.StoreConfig(prefault=False)) as store:
        store.create_topic("plain", queues=1)
        store.create_topic("mixed", queues=1)
        store.put_batch([strata.Message("plain", b"p%d" % i) for i in range(50)])
        store.put_batch([strata.Message("mixed", b"m%d" % i,
                                        keys=(f"k{i}",) if i % 2 else (),
                                        tags="t" if i % 3 else None) for i in range(50)])
        store.wait_dispatched()
    schema = arrow_schema(read_schema())
    plain = [b for b in read_range(str(path), QueueRange("plain", 0, 0, 50), schema, 64)]
    assert plain[0].column(0).null_count == 50
    assert plain[0].column(1).to_pylist() == [b"p%d" % i for i in range(50)]
    mixed = [b for b in read_range(str(path), QueueRange("mixed", 0, 0, 50), schema, 64)]
    assert mixed[0].column(0).to_pylist() == [b"k%d" % i if i % 2 else None for i in range(50)]
