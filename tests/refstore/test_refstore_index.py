"""The compiled hash-table index (issue 27): every batch and single operation against a dict
model of the same entries, through growth, tombstones and a saved base."""

from __future__ import annotations

import random

import numpy as np
import pytest

from strata.format import refstore_record as rec
from strata.refstore import append
from strata.refstore import hash_kernels as hk
from strata.refstore import index as index_mod
from strata.refstore import snapshot
from strata.refstore.index import MIN_CAPACITY, MessageIndex, keys_of

from refstore_support import mid


def ids_of(rnd: random.Random, n: int) -> list[bytes]:
    # counters (differ in the last bytes) and random ids, as real callers make them
    return [mid(rnd.randrange(1 << 20)) if rnd.random() < 0.5 else rnd.randbytes(16)
            for _ in range(n)]


def check_same(idx: MessageIndex, model: dict, probe: list[bytes]) -> None:
    assert len(idx) == len(model)
    for m in probe:
        assert idx.get(m) == model.get(m)
    raw, ref, file, off, size = idx.columns()
    assert [raw[i * 16:i * 16 + 16] for i in range(len(model))] == sorted(model)
    assert [tuple(e) for e in zip(ref.tolist(), file.tolist(), off.tolist(), size.tolist())] \
        == [model[m] for m in sorted(model)]
    assert idx.live_count() == sum(1 for e in model.values() if e[0] > 0)


def test_random_batches_match_a_dict_model_through_growth_and_deletes():
    rnd = random.Random(27)
    idx = MessageIndex()
    model: dict[bytes, tuple[int, int, int, int]] = {}
    seen: list[bytes] = []
    for _round in range(60):
        # a batch of new ids, sometimes with a known id or a twin: all or nothing
        fresh = list(dict.fromkeys(ids_of(rnd, rnd.randrange(1, 400))))
        fresh = [m for m in fresh if m not in model]
        kind = rnd.random()
        batch = list(fresh)
        if kind < 0.15 and seen:
            batch.insert(rnd.randrange(len(batch) + 1), rnd.choice(seen))
        elif kind < 0.3 and batch:
            batch.append(batch[0])
        n = len(batch)
        if not n:
            continue
        file = np.full(n, rnd.randrange(5), dtype=np.int64)
        off = np.arange(n, dtype=np.int64) * 40 + rnd.randrange(1 << 20)
        size = np.full(n, 25 + rnd.randrange(2000), dtype=np.int64)
        got = idx.insert_new(keys_of(b"".join(batch)), file, off, size)
        known = any(m in model for m in batch)
        twin = len(set(batch)) != len(batch)
        assert got == (1 if known else 2 if twin else 0)
        if got == 0:
            for j, m in enumerate(batch):
                model[m] = (1, int(file[j]), int(off[j]), int(size[j]))
            seen.extend(batch)
        # removes of a mix of known and unknown ids, one file locked
        rem = [rnd.choice(seen) for _ in range(rnd.randrange(50) if seen else 0)] + \
            ids_of(rnd, 3)
        locked = np.array([rnd.randrange(5)], dtype=np.int64)
        status, at_file, freed = idx.decref(keys_of(b"".join(rem)), None, locked)
        for j, m in enumerate(rem):
            e = model.get(m)
            if e is None or e[0] == 0:
                assert status[j] == hk.ABSENT
            elif e[1] == locked[0]:
                assert status[j] == hk.PARKED and at_file[j] == e[1]
            else:
                assert status[j] == hk.DROPPED
                model[m] = (e[0] - 1,) + e[1:]
                assert freed[j] == (e[3] if e[0] == 1 else 0)
        # a fan-out write of stored ids: all or nothing
        if seen:
            fan = [rnd.choice(seen) for _ in range(20)]
            ok = idx.incref_known(keys_of(b"".join(fan)))
            assert ok == all(model.get(m, (0,))[0] > 0 for m in fan)
            if ok:
                for m in fan:
                    e = model[m]
                    model[m] = (e[0] + 1,) + e[1:]
        # the GC's moves and drops, keyed by where an entry points
        sample = list(dict.fromkeys(rnd.choice(seen) for _ in range(30))) if seen else []
        for number in range(5):
            at = [m for m in sample if m in model and model[m][1] == number]
            offs = np.array([model[m][2] for m in at], dtype=np.int64)
            refs = idx.refs_at(at + [mid(1 << 100)], number, np.append(offs, 0))
            assert refs.tolist() == [model[m][0] for m in at] + [-1]
            if rnd.random() < 0.5:
                to = offs + 7
                idx.relocate(at, number, offs, number + 10, to)
                for m, o in zip(at, to.tolist()):
                    model[m] = (model[m][0], number + 10, o, model[m][3])
            else:
                dead = [m for m in at if model[m][0] == 0]
                dead_offs = np.array([model[m][2] for m in dead], dtype=np.int64)
                assert idx.delete_at(dead + at[:1], number + 1, np.append(dead_offs, 0)) == 0
                assert idx.delete_at(dead, number, dead_offs) == len(dead)
                for m in dead:
                    del model[m]
        seen = [m for m in seen if m in model]
        # single operations
        if seen:
            m = rnd.choice(seen)
            idx.put(m, (3, 4, 5, 60))
            model[m] = (3, 4, 5, 60)
            m = rnd.choice(seen)
            idx.delete(m)
            del model[m]
            seen.remove(m)
    check_same(idx, model, seen[:500] + ids_of(rnd, 50))
    assert len(idx._slots) > MIN_CAPACITY                    # it grew
    assert int(idx._meta[hk.USED]) <= len(idx._slots) * 3 // 4


def test_recovery_inserts_keep_the_first_copy_of_an_id():
    idx = MessageIndex()
    a, b, c = mid(1), mid(2), mid(3)
    keys = keys_of(a + b + a + c)
    got = idx.insert_absent(keys, np.array([2, 1, 9, 1]), 7, np.array([0, 40, 80, 120]),
                            np.full(4, 40))
    assert got.tolist() == [True, True, False, True]
    assert idx.get(a) == (2, 7, 0, 40) and idx.get(c) == (1, 7, 120, 40)
    got = idx.insert_absent(keys_of(c + mid(4)), np.array([5, 5]), 8, np.array([0, 40]),
                            np.full(2, 40))
    assert got.tolist() == [False, True]
    assert idx.get(c) == (1, 7, 120, 40) and len(idx) == 4


def test_a_saved_base_moves_into_the_table_on_first_use_and_batches_see_it():
    saved = {mid(i): (i // 3 % 3, i % 4, 40 * i, 40) for i in range(0, 3000, 3)}
    order = sorted(saved)
    cols = snapshot.decode_index(snapshot.encode_index(
        b"".join(order), [saved[m][0] for m in order], [saved[m][1] for m in order],
        [saved[m][2] for m in order], [saved[m][3] for m in order]))
    idx = MessageIndex()
    idx.load_base(*cols)
    model = dict(saved)
    assert len(idx) == len(model)
    assert idx.get(mid(3)) == model[mid(3)] and idx.get(mid(4)) is None
    # a batch of writes naming a saved id is refused whole (the id is known)
    batch = [mid(i) for i in range(3000, 3100)] + [mid(6)]
    idx.prefetch(batch)
    n = len(batch)
    assert idx.insert_new(keys_of(b"".join(batch)), np.zeros(n, dtype=np.int64),
                          np.arange(n, dtype=np.int64), np.full(n, 40)) == 1
    # removes reach saved entries; a count at 0 frees the record's bytes
    rem = [mid(9), mid(12), mid(10)]
    idx.prefetch(rem)
    status, _at, freed = idx.decref(keys_of(b"".join(rem)), None, np.zeros(0, dtype=np.int64))
    assert status.tolist() == [hk.ABSENT, hk.DROPPED, hk.ABSENT]   # 9 has no refs left, 10 was never saved
    assert freed.tolist() == [0, 40, 0]
    model[mid(12)] = (0,) + model[mid(12)][1:]
    check_same(idx, model, list(model)[:200])
    for m in list(model):                     # take every base entry: the base empties
        idx.get(m)
    assert idx._base_left == 0
    check_same(idx, model, list(model)[:200])


def test_a_dying_clients_mark_skips_entries_at_or_after_it():
    idx = MessageIndex()
    ids = [mid(i) for i in range(4)]
    idx.insert_new(keys_of(b"".join(ids)), np.array([1, 2, 2, 3]), np.array([0, 50, 100, 0]),
                   np.full(4, 50))
    status, _, _ = idx.decref(keys_of(b"".join(ids)), (2, 100), np.zeros(0, dtype=np.int64))
    assert status.tolist() == [hk.DROPPED, hk.DROPPED, hk.PAST_MARK, hk.PAST_MARK]


@pytest.mark.parametrize("prepare_from", [2048, index_mod.PREPARE_FROM])
def test_growth_across_sizes_through_the_append_kernel_keeps_every_entry(monkeypatch,
                                                                          prepare_from):
    """Batches entered by ``append.append_new`` (index insert + encode in one call) from an
    empty table to 40k entries: every growth keeps every entry, with the next table
    prepared ahead (small ``PREPARE_FROM``: on every growth from 2048 slots) or not."""
    monkeypatch.setattr(index_mod, "PREPARE_FROM", prepare_from)
    taken = []
    real_take = index_mod._Standby.take

    def take(self, capacity):
        table = real_take(self, capacity)
        taken.append((capacity, table is not None))
        return table

    monkeypatch.setattr(index_mod._Standby, "take", take)
    rnd = random.Random(5)
    idx = MessageIndex()
    model: dict[bytes, tuple[int, int, int, int]] = {}
    caps = {len(idx._slots)}
    out = np.empty(1 << 20, dtype=np.uint8)
    off = 0
    while len(model) < 40_000:
        n = rnd.choice([16, 100, 1000, 3000])
        ids = list(dict.fromkeys(rnd.randbytes(16) for _ in range(n)))
        bodies = [rnd.randbytes(rnd.randrange(40)) for _ in ids]
        if rnd.random() < 0.2 and model:             # a stored id last: nothing changes
            ids[-1] = rnd.choice(list(model))
            slots, meta = idx.table_for(len(ids))
            before = (len(idx), int(meta[hk.ENTRIES]))
            assert append.append_new(slots, meta, id(ids), id(bodies), 0, len(ids), out, 0,
                                     7, off) == append.KNOWN
            assert (len(idx), int(meta[hk.ENTRIES])) == before
            continue
        slots, meta = idx.table_for(len(ids))
        span = append.append_new(slots, meta, id(ids), id(bodies), 0, len(ids), out, 0, 7, off)
        assert span == sum(len(b) + rec.OVERHEAD for b in bodies)
        recs = rec.scan(bytes(out[:span]))
        for (at, total, m), want_m, b in zip(recs, ids, bodies):
            model[m] = (1, 7, off + at, total)
            assert m == want_m and total == len(b) + rec.OVERHEAD
        off += span
        caps.add(len(idx._slots))
        probe = rnd.sample(list(model), 50)
        assert all(idx.get(m) == model[m] for m in probe)
    check_same(idx, model, rnd.sample(list(model), 2000) + ids_of(rnd, 50))
    assert len(caps) >= 6                                   # it grew, table after table
    assert int(idx._meta[hk.USED]) <= len(idx._slots) * 3 // 4
    if prepare_from == 2048:
        # growths took their prepared table (one that had to more than double did not)
        assert sum(ok for _cap, ok in taken) >= 3
    assert all(prepare_from <= cap <= index_mod.PREPARE_UP_TO for cap, _ok in taken)


def test_a_rehash_of_tombstones_leaves_a_prepared_table_of_another_size():
    idx = MessageIndex()
    rnd = random.Random(6)
    ids = [rnd.randbytes(16) for _ in range(1 << 17)]
    for start in range(0, len(ids), 4096):                  # grow to 2**18 slots
        chunk = ids[start:start + 4096]
        n = len(chunk)
        one = np.ones(n, dtype=np.int64)
        assert idx.insert_new(keys_of(b"".join(chunk)), one, one, one * 30) == 0
    for m in ids[:len(ids) - 1000]:                         # tombstones, few entries
        idx.delete(m)
    cap = len(idx._slots)
    for k in range(200):                                    # fills the tombstones: a rehash
        chunk = [rnd.randbytes(16) for _ in range(500)]     # in place, not a growth
        one = np.ones(500, dtype=np.int64)
        assert idx.insert_new(keys_of(b"".join(chunk)), one, one, one * 30) == 0
        ids.extend(chunk)
        assert int(idx._meta[hk.USED]) <= len(idx._slots) * 3 // 4
    assert len(idx._slots) == cap
    assert all(idx.get(m) is not None for m in ids[-1000:] + ids[len(ids) - 101000:][:1000])
