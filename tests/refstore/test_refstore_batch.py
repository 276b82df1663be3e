"""The batch write path: a client's batch encoded in one compiled call per file, the index,
write-back cache and flying table updated per batch (issue 27)."""

from __future__ import annotations

import os
import random
import sys

import pytest

import strata.refstore as rs
from strata.errors import InvalidInputError, MessageTooLargeError
from strata.format import refstore_record as rec
from strata.refstore import append, batch_split, encode, layout

from refstore_support import mid


def expected_files(messages, limit: int) -> list[bytes]:
    """The data files a store must hold after appending ``messages`` in order, built record by
    record with ``refstore_record.encode`` and the roll rule (a record that does not fit
    starts the next file, unless the file is empty)."""
    files = [bytearray()]
    for m, b in messages:
        r = rec.encode(m, b)
        if len(files[-1]) + len(r) > limit and files[-1]:
            files.append(bytearray())
        files[-1] += r
    return [bytes(f) for f in files]


# one compiled call per file (``append.append_new``); the planned path with bodies read where
# they are; the planned path with the bodies joined
@pytest.mark.parametrize("path", ["one_call", "addresses", "joined"])
@pytest.mark.parametrize("per_batch", [97, 5])   # the batch path; below BATCH_PATH_MIN
def test_batches_spanning_files_write_the_same_bytes_as_record_by_record(open_store, tmp_path,
                                                                        per_batch, path,
                                                                        monkeypatch):
    if not (encode.IN_PLACE and append.IN_PLACE):
        pytest.fail("bodies are not read in place on this interpreter: the join covers it")
    if path != "one_call":
        monkeypatch.setattr(append, "IN_PLACE", False)
    if path == "joined":
        monkeypatch.setattr(encode, "IN_PLACE", False)
    limit = 6000
    rnd = random.Random(7)
    messages = [(mid(i), os.urandom(rnd.choice([0, 1, 17, 300, 1500, 5000])))
                for i in range(400)]
    s = open_store(file_size_limit=limit, write_buffer_size=4096, auto_gc=False)
    c = s.client()
    for start in range(0, len(messages), per_batch):   # batches straddle file boundaries
        c.write_batch(messages[start:start + per_batch])
        for m, b in messages[start:start + per_batch]:
            assert c.read(m) == b                    # readable at once, whatever the path
    s.sync()
    want = expected_files(messages, limit)
    st = s.stats()
    assert [f.size for f in st.files] == [len(w) for w in want]
    assert st.total_bytes == st.valid_bytes == sum(map(len, want))
    for m, b in messages:
        assert c.read(m) == b
    s.close()
    for number, w in enumerate(want):
        with open(layout.data_path(str(tmp_path / "rs"), number), "rb") as f:
            assert f.read() == w

    # an unclean start finds every record whole by scanning the files
    s = open_store(recover_refs=((m, 1) for m, _ in messages), client_refs=["other"])
    assert not s.recovered_clean and s.recovery.dropped_refs == 0
    c = s.client()
    assert all(c.read(m) == b for m, b in messages)


def test_a_batch_whose_later_file_meets_a_stored_id_goes_on_one_by_one(open_store, tmp_path):
    """The batch rolls to a new file part way; the part after the roll holds a stored id and
    a twin of an id of the first part: the first part is appended in one call, the rest one
    by one, and the files are what record-by-record writes make."""
    limit = 6000
    s = open_store(file_size_limit=limit, write_buffer_size=4096, auto_gc=False)
    c = s.client()
    c.write(mid(999), b"old")
    s.sync()
    batch = [(mid(i), os.urandom(1000)) for i in range(12)]
    batch[8:8] = [(mid(999), b"not stored again"), (mid(2), b"nor this")]
    batch += [(mid(i), os.urandom(700)) for i in range(100, 110)]
    c.write_batch(batch)
    s.sync()
    firsts = {}
    for m, b in [(mid(999), b"old")] + batch:
        firsts.setdefault(m, b)
    want = expected_files(list(firsts.items()), limit)
    assert [f.size for f in s.stats().files] == [len(w) for w in want]
    assert s.locate(mid(999))[0] == 2 and s.locate(mid(2))[0] == 2
    assert all(s.locate(m)[0] == 1 for m in firsts if m not in (mid(999), mid(2)))
    assert all(c.read(m) == b for m, b in firsts.items())
    s.close()
    for number, w in enumerate(want):
        with open(layout.data_path(str(tmp_path / "rs"), number), "rb") as f:
            assert f.read() == w


def test_split_pairs_takes_plain_pairs_only_and_keeps_reference_counts():
    ids = [mid(i) for i in range(50)]
    bodies = [os.urandom(i + 2) for i in range(50)]   # (b"" and 1-byte bodies are
    # shared objects: other threads' use would move their counts)
    pairs = list(zip(ids, bodies))
    counts = [sys.getrefcount(x) for x in ids + bodies]
    got = batch_split.split_pairs(pairs, 51)
    assert got is not None
    got_ids, got_bodies, total = got
    assert got_ids == ids and got_bodies == bodies and total == sum(range(2, 52))
    assert all(a is b for a, b in zip(got_ids + got_bodies, ids + bodies))
    assert [sys.getrefcount(x) for x in ids + bodies] == [k + 1 for k in counts]
    del got, got_ids, got_bodies
    assert [sys.getrefcount(x) for x in ids + bodies] == counts
    for bad in ([(mid(1), b"x", b"y")], [[mid(1), b"x"]], [(mid(1), bytearray(b"x"))],
                [(b"short", b"x")], [(bytearray(mid(1)), b"x")], [(mid(1), os.urandom(52))],
                [(mid(1), "text")], [pairs[0], None]):
        assert batch_split.split_pairs(pairs[:20] + bad, 51) is None, bad
    assert batch_split.split_pairs(pairs[:batch_split.SPLIT_MIN - 1], 51) is None  # the loop's
    assert batch_split.split_pairs(pairs[:batch_split.SPLIT_MIN], 51)[2] == \
        sum(range(2, batch_split.SPLIT_MIN + 2))


def test_write_batch_takes_any_iterable_of_pairs_and_names_a_bad_one(open_store):
    s = open_store()
    c = s.client()
    c.write_batch((mid(i), b"t%d" % i) for i in range(20))               # a generator
    c.write_batch(tuple([mid(i), bytearray(b"l%d" % i)] for i in range(20, 40)))
    s.sync()
    assert [c.read(mid(i)) for i in (0, 19, 20, 39)] == [b"t0", b"t19", b"l20", b"l39"]
    with pytest.raises(InvalidInputError, match="exactly 16 bytes"):
        c.write_batch([(mid(50), b"ok")] * 20 + [(b"short", b"x")])
    with pytest.raises(MessageTooLargeError):
        c.write_batch([(mid(60), bytes(s.max_body_size + 1))])
    with pytest.raises(InvalidInputError, match="pairs"):
        c.write_batch([(mid(70), b"a", b"b")])
    s.sync()
    assert c.read(mid(50)) is None and c.read(mid(60)) is None      # nothing of them sent


def test_an_id_twice_in_one_batch_is_stored_once_with_two_references(open_store):
    s = open_store()
    c = s.client()
    c.write_batch([(mid(1), b"first"), (mid(2), b"two"), (mid(1), b"second")])
    assert c.read(mid(1)) == b"first"
    s.sync()
    assert c.read(mid(1)) == b"first" and c.read(mid(2)) == b"two"
    assert s.locate(mid(1))[0] == 2 and s.locate(mid(2))[0] == 1
    assert s.stats().total_bytes == rec.record_size(5) + rec.record_size(3)
    c.remove([mid(1)])
    s.sync()
    assert c.read(mid(1)) == b"first"
    c.remove([mid(1)])
    s.sync()
    assert c.read(mid(1)) is None and s.message_count() == 1


def test_a_batch_mixing_stored_and_new_ids_adds_references_and_appends_the_rest(open_store):
    s = open_store()
    c = s.client()
    c.write(mid(1), b"one")
    s.sync()
    size_before = s.stats().total_bytes
    c.write_batch([(mid(1), b"ignored"), (mid(3), b"three")])
    s.sync()
    assert s.locate(mid(1))[0] == 2 and c.read(mid(1)) == b"one"
    assert c.read(mid(3)) == b"three"
    assert s.stats().total_bytes == size_before + rec.record_size(5)


def test_reads_and_removes_while_batches_are_in_flight(open_store):
    confirms = []
    s = open_store()
    c = s.client(on_disk=confirms.extend)
    other = s.client()
    batches = [[(mid(100 * k + i), b"b%d.%d" % (k, i)) for i in range(50)] for k in range(3)]
    with s.paused():
        for batch in batches:
            c.write_batch(batch)
        other.write_batch([(mid(999), b"other")])
        st = s.stats()
        assert st.cached == 151 and st.flying == 151
        assert c.read(mid(105)) == b"b1.5"           # served from the in-flight batches
        c.remove([mid(105), mid(207)])               # cancels the writes still in flight
        other.remove([mid(6)])                       # another client's remove cancels nothing
    s.sync()
    assert c.read(mid(105)) is None and c.read(mid(207)) is None
    assert c.read(mid(6)) is None                    # other's remove reached the stored copy
    assert c.read(mid(7)) == b"b0.7" and other.read(mid(999)) == b"other"
    st = s.stats()
    assert st.writes_eliminated == 2 and st.flying == 0 and st.cached == 0
    assert st.in_flight_bytes == 0 and s.message_count() == 148
    assert sorted(confirms) == sorted(m for b in batches for m, _ in b)


def test_the_write_buffer_serves_reads_across_flushes_and_rolls(open_store):
    s = open_store(file_size_limit=3000, write_buffer_size=700)
    c = s.client()
    sent = []
    for k in range(30):
        batch = [(mid(10 * k + i), bytes([k, i]) * (k * 3 + i)) for i in range(10)]
        c.write_batch(batch)
        sent += batch
        assert all(c.read(m) == b for m, b in sent)
    s.sync()
    assert all(c.read(m) == b for m, b in sent)
    assert all(f.size <= 3000 for f in s.stats().files)


def test_clean_restart_then_batches_of_known_and_new_ids(open_store, tmp_path):
    s = open_store()
    c = s.client("q")
    c.write_batch([(mid(i), b"x%d" % i) for i in range(100)])
    s.close()
    s = rs.open(tmp_path / "rs", client_refs=["q"])
    try:
        assert s.recovered_clean
        c = s.client("q")
        c.write_batch([(mid(i), b"y%d" % i) for i in range(50, 150)])   # 50 known, 50 new
        s.sync()
        assert [s.locate(mid(i))[0] for i in (0, 50, 99, 100, 149)] == [1, 2, 2, 1, 1]
        assert c.read(mid(60)) == b"x60" and c.read(mid(120)) == b"y120"
    finally:
        s.close()
