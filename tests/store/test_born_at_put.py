"""A message that gives no born timestamp is born at its put: the store timestamp of its batch
(a producer stamps its send time; in the embedded store the put call is the producer). Every
put path does the same — ``put``, small and large ``put_batch`` of plain and of rich
messages, ``put_columns`` — and a born timestamp given, 0 included, is stored as given."""

from __future__ import annotations

import numpy as np
import pytest

import strata
from strata.errors import InvalidInputError
from store_helpers import clock, config, settle  # noqa: F401 (clock is a fixture)

T_PUT = 1_790_000_000_123


def _born(store, topic: str) -> dict[bytes, tuple[int, int]]:
    settle(store)
    return {m.body: (m.born_timestamp, m.store_timestamp) for m in store.scan()
            if m.topic == topic}


@pytest.mark.parametrize("n", [1, 5, 200])   # per message, per record, columnar writers
@pytest.mark.parametrize("shape", ["plain", "rich", "mixed"])
def test_put_batch_without_born_timestamp_is_born_at_the_put(tmp_path, clock, n, shape):
    clock.t = T_PUT

    def message(i: int) -> strata.Message:
        if shape == "plain":
            return strata.Message("t", b"m%d" % i)
        given = shape == "mixed" and i % 2
        return strata.Message("t", b"m%d" % i, keys=[f"k{i}"], tags="a",
                              properties={"p": str(i)}, shard_key=f"s{i % 3}",
                              born_timestamp=(i * 1000 if i % 4 != 1 else 0) if given else None)

    msgs = [message(i) for i in range(n)]
    with strata.open(tmp_path / "s", config()) as store:
        res = store.put_batch(msgs) if n > 1 else [store.put(msgs[0])]
        assert {r.store_timestamp for r in res} == {T_PUT}
        got = _born(store, "t")
    for m in msgs:
        want = T_PUT if m.born_timestamp is None else m.born_timestamp
        assert got[m.body] == (want, T_PUT)
    if shape == "mixed" and n > 1:
        assert got[b"m1"][0] == 0   # an explicit 0 stays 0


@pytest.mark.parametrize("n", [3, 200])
def test_put_columns_born_at_the_put(tmp_path, clock, n):
    clock.t = T_PUT
    bodies = [b"c%d" % i for i in range(n)]
    with strata.open(tmp_path / "s", config()) as store:
        store.put_columns("t", None, bodies[:n // 2])   # no born column: all at the put
        born = [(0, None, 5000 + j)[j % 3] for j in range(n - n // 2)]   # 0 kept; None: now
        store.put_columns("t", None, bodies[n // 2:], born_timestamps=born)
        got = _born(store, "t")
    assert [got[b][0] for b in bodies] == \
        [T_PUT] * (n // 2) + [T_PUT if t is None else t for t in born]
    assert got[bodies[n // 2]][0] == 0


def test_born_column_refuses_negative_items_but_takes_none():
    from strata.format.columns import BORN_AT_PUT, born_column
    assert born_column(None, 3) is None
    assert born_column([5, None, 0], 3).tolist() == [5, BORN_AT_PUT, 0]
    with pytest.raises(InvalidInputError, match="born_timestamps"):
        born_column(np.array([5, -1, 0]), 3)


def test_born_at_the_put_survives_reopen_and_is_a_real_time(tmp_path):
    """Through the real clock: the born time is the put's, not 1970."""
    with strata.open(tmp_path / "s", config()) as store:
        store.put_batch([strata.Message("t", b"x%d" % i, keys=["k"]) for i in range(64)])
    with strata.open(tmp_path / "s", config()) as store:
        got = list(store.scan())
    assert len(got) == 64
    assert all(m.born_timestamp == m.store_timestamp > 1_700_000_000_000 for m in got)
