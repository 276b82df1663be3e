"""GC: the combine layout, utilisation, the shunned message, readers during GC, deletes."""

from __future__ import annotations

import os
import random
import threading

import pytest

import strata.refstore as rs
from strata.format import refstore_record as rec
from strata.format.refstore_record import OVERHEAD

from refstore_support import body, mid

B = 100
R = B + OVERHEAD


def dbody(name: str) -> bytes:
    """The body of diagram message ``name`` (the same in every process)."""
    return body(sum(name.encode()), B)


def build_diagram(open_store, **opts):
    """Files 0 and 1 as in the design notes; X marks records removed afterwards.

        left (file 0), bottom to top: A B X C X D X
        right (file 1), bottom to top: E X X F X X G
    """
    opts.setdefault("auto_gc", False)
    opts.setdefault("gc_garbage_ratio", 0.4)
    s = open_store(file_size_limit=7 * R, **opts)
    c = s.client("diagram")
    names = ["A", "B", "X1", "C", "X2", "D", "X3",
             "E", "X4", "X5", "F", "X6", "X7", "G", "Z"]
    ids = {n: mid(k) for k, n in enumerate(names)}
    for n in names:
        c.write(ids[n], dbody(n))
    s.sync()
    assert [f.size for f in s.stats().files] == [7 * R, 7 * R, R]
    c.remove([ids[n] for n in names if n.startswith("X")])
    s.sync()
    return s, c, ids, names


def test_combine_keeps_left_prefix_moves_scattered_then_right_on_top(open_store):
    seen = {}

    def hook(step, info):
        if step == "temp_written":
            with open(info["temp"], "rb") as f:
                seen["temp"] = [m for _, _, m in rec.scan(f.read())]
        if step == "left_truncated":
            seen["truncated_to"] = os.path.getsize(os.path.join(s.directory, "0000000000.rsd"))

    s, c, ids, names = build_diagram(open_store, fault_hook=hook)
    a_before = s.locate(ids["A"])
    st = s.compact(timeout=30)
    assert seen["temp"] == [ids["C"], ids["D"]]          # only the scattered records move
    assert seen["truncated_to"] == 2 * R                 # A and B stay where they are
    assert [f.number for f in st.files] == [0, 2]        # the right file is gone
    order = ["A", "B", "C", "D", "E", "F", "G"]
    for k, n in enumerate(order):
        assert s.locate(ids[n]) == (1, 0, k * R, R), n
    assert s.locate(ids["A"]) == a_before
    assert st.files[0].valid == st.files[0].size == 7 * R
    with open(s.directory + "/0000000000.rsd", "rb") as f:
        data = f.read()
    assert [m for _, _, m in rec.scan(data)] == [ids[n] for n in order]
    assert s.locate(ids["X1"]) is None                   # ref-0 entries vacuumed
    for n in order + ["Z"]:
        assert c.read(ids[n]) == dbody(n)
    assert st.gc_combines == 1 and st.gc_bytes_moved == 5 * R


def test_trigger_needs_garbage_ratio_and_more_than_two_files(open_store):
    s, c, ids, names = build_diagram(open_store, gc_garbage_ratio=0.5)
    # garbage 7R of 15R: below 0.5, so nothing is combined
    assert s.compact(timeout=30).gc_combines == 0
    c.remove([ids["Z"]])                                 # 8R of 15R: above 0.5
    st = s.compact(timeout=30)
    assert st.gc_combines == 1


def test_emptied_files_are_deleted_and_neighbours_relinked(open_store):
    s = open_store(file_size_limit=4 * R)
    c = s.client()
    c.write_batch([(mid(i), body(i, B)) for i in range(14)])  # files 0..3
    s.sync()
    c.remove([mid(i) for i in range(4, 8)])                    # file 1 empty
    s.sync()
    st = s.wait_gc_idle(timeout=30)
    assert [f.number for f in st.files][:2] == [0, 2]
    assert s._summary.files[0].right == 2 and s._summary.files[2].left == 0
    assert st.gc_deletes == 1
    for i in list(range(4)) + list(range(8, 14)):
        assert c.read(mid(i)) == body(i, B)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_utilisation_at_least_half_after_gc_settles_on_random_workloads(open_store, seed):
    rnd = random.Random(seed)
    s = open_store(file_size_limit=8 * 1024)
    c = s.client()
    live: dict[bytes, bytes] = {}
    nxt = 0
    for _round in range(12):
        batch = []
        for _ in range(rnd.randint(50, 200)):
            b = rnd.randbytes(rnd.randint(0, 900))
            batch.append((mid(nxt), b))
            live[mid(nxt)] = b
            nxt += 1
        c.write_batch(batch)
        victims = rnd.sample(sorted(live), int(len(live) * rnd.uniform(0.3, 0.8)))
        c.remove(victims)
        for v in victims:
            del live[v]
        s.sync()
        st = s.wait_gc_idle(timeout=60)
        if st.total_bytes > 2 * s.file_size_limit:
            assert st.utilisation >= 0.5, (seed, _round, st)
    st = s.compact(timeout=60)
    assert st.total_bytes <= 2 * s.file_size_limit or st.utilisation >= 0.5
    for m, b in live.items():
        assert c.read(m) == b


def test_a_shunned_message_is_rewritten_a_bounded_number_of_times(open_store):
    """Queue-like traffic around one message nobody consumes: it sinks to offset 0 of the
    oldest file, moving at most once per message that was ahead of it."""
    s = open_store(file_size_limit=6 * R, auto_gc=False)
    c = s.client()
    ahead = [mid(1000 + k) for k in range(5)]
    shunned = mid(999)
    for m in ahead:
        c.write(m, body(1, B))
    c.write(shunned, body(999, B))
    positions = [s.locate(shunned)]
    queue: list[bytes] = list(ahead)
    nxt = 0
    for _round in range(40):
        fresh = [mid(nxt + k) for k in range(4)]
        nxt += 4
        c.write_batch([(m, body(7, B)) for m in fresh])
        queue.extend(fresh)
        c.remove(queue[:4])                      # consume from the head of the queue
        del queue[:4]
        s.compact(timeout=30)
        loc = s.locate(shunned)
        if loc != positions[-1]:
            positions.append(loc)
    rewrites = len(positions) - 1
    assert rewrites >= 1                         # it did move down as the queue drained
    assert rewrites <= len(ahead)
    assert c.read(shunned) == body(999, B)
    oldest = s.stats().files[0].number
    assert s.locate(shunned)[1:3] == (oldest, 0)


def test_readers_during_gc_never_see_a_wrong_or_missing_message(open_store):
    s = open_store(file_size_limit=16 * 1024, auto_gc=False)
    c = s.client()
    rnd = random.Random(7)
    bodies = {mid(i): rnd.randbytes(rnd.randint(10, 700)) for i in range(3000)}
    c.write_batch(bodies.items())
    s.sync()
    doomed = set(rnd.sample(sorted(bodies), 2000))
    live = sorted(set(bodies) - doomed)
    c.remove(sorted(doomed))
    s.sync()
    stop = threading.Event()
    failures: list = []
    reads = [0]

    def reader(seed):
        r = random.Random(seed)
        rc = s.client()
        while not stop.is_set():
            m = r.choice(live)
            got = rc.read(m)
            reads[0] += 1
            if got != bodies[m]:
                failures.append((m.hex(), None if got is None else len(got)))

    ts = [threading.Thread(target=reader, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    try:
        st = s.compact(timeout=60)
    finally:
        stop.set()
        for t in ts:
            t.join(30)
    assert not failures
    assert reads[0] > 0
    assert st.gc_combines >= 1
    for m in live:
        assert c.read(m) == bodies[m]
    for m in list(doomed)[:50]:
        assert c.read(m) is None


def test_removes_and_contains_touching_a_locked_file_wait_for_the_gc(open_store):
    gate, entered = threading.Event(), threading.Event()

    def hook(step, info):
        if step == "combine_locked":
            entered.set()
            assert gate.wait(20)

    s, c, ids, names = build_diagram(open_store, fault_hook=hook)
    t = threading.Thread(target=s.compact, kwargs={"timeout": 30})
    t.start()
    assert entered.wait(20)
    c.remove([ids["A"]])                        # parked behind the GC
    result = {}
    checker = threading.Thread(target=lambda: result.setdefault("A", c.contains(ids["A"])))
    checker.start()
    checker.join(0.3)
    assert checker.is_alive()                   # contains waits: it must not overtake
    assert s.locate(ids["A"])[0] == 1
    gate.set()
    t.join(30)
    checker.join(30)
    assert result["A"] is False
    assert s.locate(ids["A"])[0] == 0


def test_ops_parked_behind_a_queued_combine_survive_a_delete_finishing_first(open_store):
    """A delete releases only its own file's parked ops; ops parked behind a combine that is
    queued meanwhile stay parked, whole, and are applied once the combine is done."""
    gate, entered = threading.Event(), threading.Event()

    def hook(step, info):
        if step == "delete_locked" and info["file"] == 1 and not entered.is_set():
            entered.set()
            assert gate.wait(20)

    s = open_store(file_size_limit=4 * R, gc_garbage_ratio=0.3, fault_hook=hook)
    c = s.client()
    c.write_batch([(mid(i), body(i, B)) for i in range(17)])     # file k holds 4k..4k+3
    s.sync()
    c.remove([mid(i) for i in range(4, 8)])                      # file 1 empty: delete
    s.sync()
    assert entered.wait(20)                                      # the GC holds in the delete
    c.remove([mid(8), mid(9), mid(12), mid(13)])                 # files 2 + 3 now fit in one
    s.sync()
    assert [f.locked for f in s.stats().files if f.number in (2, 3)] == [True, True]
    c.remove([mid(10)])                                          # parked behind the combine
    s.sync()
    assert s.locate(mid(10))[0] == 1
    gate.set()
    st = s.wait_gc_idle(timeout=30)
    assert s.failure is None and st.gc_deletes >= 1 and st.gc_combines == 1
    assert s.locate(mid(10)) is None or s.locate(mid(10))[0] == 0
    assert c.read(mid(10)) is None and c.read(mid(11)) == body(11, B)
    assert s.message_count() == 17 - 4 - 5
