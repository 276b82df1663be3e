"""``store.query``: key lookups through the key index. Colliding slots and colliding hashes
(across topics too) never return another key's messages; time bounds are inclusive and exact to
the millisecond; results are newest first, capped by ``max_results``, across many index files."""

from __future__ import annotations

import itertools

import pytest

import strata
import strata.store.message_store as ms_mod
from strata.errors import InvalidInputError

from store_helpers import T0, clock, config, open_store, settle  # noqa: F401 (clock is a fixture)





def offsets(msgs):
    return [m.commitlog_offset for m in msgs]


def test_one_slot_every_key_collides_but_only_exact_keys_come_back(tmp_path, clock):
    with open_store(tmp_path / "s", index_slots=1, index_entries=4096) as store:
        want: dict[str, list[int]] = {}
        for i in range(300):
            key = f"key-{i % 37}"
            r = store.put(strata.Message("t", b"%d" % i, keys=[key, f"solo-{i}"]))
            want.setdefault(key, []).append(r.commitlog_offset)
            clock.t += 7
        settle(store)
        assert store.key_index.files()[0]["used_slots"] == 1
        for key, offs in want.items():
            got = store.query("t", key, max_results=64)
            assert offsets(got) == offs[::-1], key
            assert all(key in m.keys for m in got)
        for i in (0, 150, 299):
            got = store.query("t", f"solo-{i}")
            assert [m.body for m in got] == [b"%d" % i]
        assert store.query("t", "key-37") == []
        assert store.query("t", "absent") == []


def test_colliding_hashes_across_topics_never_leak(tmp_path, clock):
    with open_store(tmp_path / "s", index_slots=16) as store:
        store.key_index._hash = lambda key: 12345     # every topic#key has the same hash
        rs = {}
        for topic in ("A", "B", "AB"):
            for key in ("k", "kk", "A#k", "B#k"):
                rs[(topic, key)] = [store.put(strata.Message(topic, f"{topic}|{key}|{i}".encode(),
                                                             keys=[key])).commitlog_offset
                                    for i in range(3)]
                clock.t += 1
        settle(store)
        cands = list(store.key_index.candidates("A#k", 0, 2**62))
        assert len(cands) == 36                # every entry is a raw candidate
        for (topic, key), offs in rs.items():
            got = store.query(topic, key)
            assert offsets(got) == offs[::-1], (topic, key)
            assert all(m.topic == topic and key in m.keys for m in got)
        assert store.query("C", "k") == []
        assert store.query("A", "B") == []


def test_default_hash_collisions_are_checked_too(tmp_path):
    """Without injection: many keys in few slots of a tiny index, checked against the truth."""
    with open_store(tmp_path / "s", index_slots=3, index_entries=64) as store:
        truth: dict[tuple[str, str], list[int]] = {}
        for i in range(200):
            topic, key = f"t{i % 3}", f"k{i % 11}"
            r = store.put(strata.Message(topic, b"x", keys=[key]))
            truth.setdefault((topic, key), []).append(r.commitlog_offset)
        settle(store)
        assert len(store.key_index.files()) > 3
        for (topic, key), offs in truth.items():
            assert offsets(store.query(topic, key, max_results=1000)) == offs[::-1]


def test_time_bounds_are_inclusive_to_the_millisecond(tmp_path, clock):
    with open_store(tmp_path / "s") as store:
        times = [T0, T0 + 1, T0 + 2, T0 + 999, T0 + 1000, T0 + 1001, T0 + 5000, T0 + 86_400_000]
        by_time = {}
        for t in times:
            clock.t = t
            r = store.put(strata.Message("t", str(t).encode(), keys=["k"]))
            assert r.store_timestamp == t
            by_time[t] = r.commitlog_offset
        settle(store)

        def q(begin, end):
            got = store.query("t", "k", begin_ms=begin, end_ms=end)
            assert all(begin <= m.store_timestamp <= (end if end is not None else 2**62)
                       for m in got)
            return [m.store_timestamp for m in got]

        assert q(0, None) == times[::-1]
        assert q(T0 + 1, T0 + 1) == [T0 + 1]
        assert q(T0 + 1, T0 + 2) == [T0 + 2, T0 + 1]
        assert q(T0 + 3, T0 + 998) == []
        assert q(T0 + 999, T0 + 1000) == [T0 + 1000, T0 + 999]
        assert q(T0 + 1001, T0 + 4999) == [T0 + 1001]
        assert q(T0 + 5000, None) == [T0 + 86_400_000, T0 + 5000]
        assert q(0, T0 - 1) == []
        assert q(T0 + 86_400_001, None) == []
        for t in times:
            assert q(t, t) == [t]


def test_queries_span_many_index_files(tmp_path, clock):
    with open_store(tmp_path / "s", index_slots=4, index_entries=8) as store:
        want: dict[str, list[tuple[int, int]]] = {}
        for i in range(120):
            keys = [f"k{i % 5}"] + ([f"even{i % 4}"] if i % 2 == 0 else [])
            r = store.put(strata.Message("t", b"%d" % i, keys=keys))
            for k in keys:
                want.setdefault(k, []).append((r.commitlog_offset, clock.t))
            clock.t += 250
        settle(store)
        files = store.key_index.files()
        assert len(files) >= 20
        for key, items in want.items():
            assert offsets(store.query("t", key, max_results=500)) == [o for o, _ in items][::-1]
            # a window that starts and ends inside different files
            lo, hi = T0 + 3_000, T0 + 21_000
            got = store.query("t", key, begin_ms=lo, end_ms=hi, max_results=500)
            assert offsets(got) == [o for o, t in items if lo <= t <= hi][::-1], key
    with open_store(tmp_path / "s", index_slots=4, index_entries=8) as store:   # after restart
        for key, items in want.items():
            assert offsets(store.query("t", key, max_results=500)) == [o for o, _ in items][::-1]


def test_unique_key_property_is_queryable(tmp_path):
    with open_store(tmp_path / "s") as store:
        a = store.put(strata.Message("t", b"a", keys=["biz"], properties={"UNIQ_KEY": "u-1"}))
        b = store.put(strata.Message("t", b"b", properties={"UNIQ_KEY": "u-2", "x": "y"}))
        c = store.put(strata.Message("t", b"c", keys=["u-3"], properties={"UNIQ_KEY": "u-3"}))
        store.put(strata.Message("other", b"o", properties={"UNIQ_KEY": "u-1"}))
        settle(store)
        assert offsets(store.query("t", "u-1")) == [a.commitlog_offset]
        assert offsets(store.query("t", "biz")) == [a.commitlog_offset]
        assert [m.properties["UNIQ_KEY"] for m in store.query("t", "u-2")] == ["u-2"]
        assert offsets(store.query("t", "u-2")) == [b.commitlog_offset]
        assert offsets(store.query("t", "u-3")) == [c.commitlog_offset]   # once, not twice
        assert [m.body for m in store.query("other", "u-1")] == [b"o"]


def test_max_results_keeps_the_newest(tmp_path, clock):
    with open_store(tmp_path / "s") as store:
        offs = []
        for i in range(100):
            offs.append(store.put(strata.Message("t", b"%d" % i, keys=["same", "same"]))
                        .commitlog_offset)
            clock.t += 3
        settle(store)
        assert offsets(store.query("t", "same", max_results=10)) == offs[::-1][:10]
        assert offsets(store.query("t", "same", max_results=1)) == [offs[-1]]
        assert offsets(store.query("t", "same")) == offs[::-1][:64]        # the default cap
        assert offsets(store.query("t", "same", max_results=1000)) == offs[::-1]
        lo = T0 + 30 * 3
        got = store.query("t", "same", begin_ms=lo, end_ms=lo + 9 * 3, max_results=5)
        assert offsets(got) == offs[30:40][::-1][:5]
        for bad in (0, -1, "3"):
            with pytest.raises(InvalidInputError):
                store.query("t", "same", max_results=bad)
        with pytest.raises(InvalidInputError):
            store.query("t", "")
        with pytest.raises(InvalidInputError):
            store.query("../t", "same")


def test_queries_survive_clean_and_unclean_restarts(tmp_path, clock):
    cfg = config(index_slots=2, index_entries=16)
    want: dict[str, list[int]] = {}
    seq = itertools.count()
    for rnd in range(4):
        store = open_store(tmp_path / "s", cfg)
        for _ in range(25):
            i = next(seq)
            r = store.put(strata.Message("t", b"%d" % i, keys=[f"k{i % 6}"]))
            want.setdefault(f"k{i % 6}", []).append(r.commitlog_offset)
            clock.t += 11
        settle(store)
        for key, offs in want.items():
            assert offsets(store.query("t", key, max_results=500)) == offs[::-1], (rnd, key)
        if rnd % 2:
            store._abandon()
        else:
            store.close()
    with open_store(tmp_path / "s", cfg) as store:
        for key, offs in want.items():
            assert offsets(store.query("t", key, max_results=500)) == offs[::-1]


def test_past_the_first_compiled_candidates_the_walk_goes_on(tmp_path, clock):
    """Every key hashes alike: the newest candidates (more than the one compiled walk looks
    up) are other keys' messages, and the query still finds the older ones."""
    with open_store(tmp_path / "s", index_slots=4) as store:
        store.key_index._hash = lambda key: 99
        old = [store.put(strata.Message("t", b"old%d" % i, keys=["wanted"])).commitlog_offset
               for i in range(3)]
        for i in range(200):
            store.put(strata.Message("t", b"x", keys=[f"other{i}"]))
        settle(store)
        assert offsets(store.query("t", "wanted", max_results=1)) == [old[-1]]
        assert offsets(store.query("t", "wanted", max_results=2)) == old[::-1][:2]
        assert offsets(store.query("t", "wanted")) == old[::-1]
        assert store.query("t", "other1", max_results=1)[0].keys == ("other1",)


def test_keys_match_whole_and_only_as_keys(tmp_path):
    """A key equal to another's prefix, a tag or a property value, or a property named like
    a key, is not that message's key; hosts of either address family are read past."""
    with open_store(tmp_path / "s", index_slots=1) as store:
        a = store.put(strata.Message("t", b"a", keys=["k1"], tags="k10",
                                     properties={"x": "k100"}))
        b = store.put(strata.Message("t", b"b", keys=["k10"], properties={"KEYSX": "k1"},
                                     born_host=("::1", 9)))
        c = store.put(strata.Message("t", b"c", keys=["k100", "k1"],
                                     born_host=("2001:db8::7", 65535)))
        settle(store)
        assert offsets(store.query("t", "k1")) == [c.commitlog_offset, a.commitlog_offset]
        assert offsets(store.query("t", "k10")) == [b.commitlog_offset]
        assert offsets(store.query("t", "k100")) == [c.commitlog_offset]
        assert store.query("t", "k") == [] and store.query("t", "k1000") == []
        assert store.query("t", "k10")[0].born_host == ("::1", 9)


def test_more_matches_than_the_compiled_walk_returns(tmp_path, clock):
    """More matches than one compiled walk hands out (``read_path._FIRST_MAX``): the rest come
    from the Python walk, in order, each once."""
    from strata.store import read_path
    n = read_path._FIRST_MAX + 44
    with open_store(tmp_path / "s", index_slots=8, index_entries=128) as store:
        offs = [r.commitlog_offset for r in store.put_batch(
            [strata.Message("t", b"%d" % i, keys=["many"]) for i in range(n)])]
        settle(store)
        assert offsets(store.query("t", "many", max_results=10_000)) == offs[::-1]
        assert offsets(store.query("t", "many", max_results=n - 1)) == offs[::-1][:n - 1]
