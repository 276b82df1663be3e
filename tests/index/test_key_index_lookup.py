"""``KeyIndex.lookup``, the compiled walk of every file's chain, answers what the Python walk
(``candidates``) answers: the same offsets in the same order (newest first, no duplicates),
across many files, time ranges and times going backwards; only counted entries; at most
``limit`` of them, saying whether there are more; and, over a damaged chain, what the Python
walk's scan of that file finds."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from strata.errors import InvalidInputError, StoreClosedError
from strata.format import key_index as fmt
from strata.format import key_index_kernels as kk
from strata.index.key_index import KeyIndex

T0 = 1_700_000_000_000
ALL = (-(1 << 62), 1 << 62)


def both(ki: KeyIndex, key: str, begin: int = ALL[0], end: int = ALL[1], limit: int = 1000):
    """(lookup's offsets, whether complete) after checking them against the Python walk."""
    got, complete = ki.lookup(key, begin, end, limit)
    walked = list(ki.candidates(key, begin, end))
    assert got == walked[:limit], (key, begin, end)
    assert complete == (len(walked) <= limit)
    return got, complete


def test_same_answers_as_the_python_walk_over_many_files(tmp_path):
    rng = random.Random(5)
    ki = KeyIndex(tmp_path, slots=7, entries=40)
    items = []
    for i in range(900):
        # times mostly rising, sometimes stepping back (no early stop in those files);
        # some messages carry one key twice or two keys
        t = T0 + 37 * i - (5000 if rng.random() < 0.05 else 0)
        keys = {f"T#k{rng.randrange(25)}"}
        if rng.random() < 0.2:
            keys.add(f"T#k{rng.randrange(25)}")
        items += [(k, 100 * i, t) for k in sorted(keys)]
        if rng.random() < 0.1:
            items.append((sorted(keys)[0], 100 * i, t))
    ki.put_batch(items)
    assert len(ki.files()) > 10
    for k in range(26):
        key = f"T#k{k}"
        got, complete = both(ki, key)
        assert complete and len(got) == len(set(got))
        assert got == sorted({p for kk, p, _t in items if kk == key}, reverse=True)
        for _ in range(5):
            a = T0 + rng.randrange(-10_000, 40_000)
            both(ki, key, a, a + rng.randrange(0, 9_000))
    ki.close()


def test_limit_keeps_the_newest_and_says_more_follow(tmp_path):
    ki = KeyIndex(tmp_path, slots=3, entries=16)
    ki.put_batch([("T#a", 10 * i, T0 + i) for i in range(50)])
    newest = [10 * i for i in reversed(range(50))]
    assert ki.lookup("T#a", *ALL, 50) == (newest, True)
    assert ki.lookup("T#a", *ALL, 49) == (newest[:49], False)
    assert ki.lookup("T#a", *ALL, 5) == (newest[:5], False)
    assert ki.lookup("T#a", *ALL, 64) == (newest, True)
    assert ki.lookup("T#b", *ALL, 64) == ([], True)
    ki.close()


def test_entries_past_the_counters_are_not_returned(tmp_path):
    """A batch whose entries are written but whose counters are not (a writer mid-batch, as a
    reader in another process sees it) is invisible, the older entries are not."""
    ki = KeyIndex(tmp_path, slots=4, entries=64)
    ki.put_batch([("T#a", 100 * i, T0 + i) for i in range(10)])
    f = ki._files[-1]
    counters = f.mm[fmt.POS_COUNTERS:fmt.POS_COUNTERS + fmt.COUNTERS.size]
    ki.put_batch([("T#a", 100 * i, T0 + i) for i in range(10, 20)])
    f.mm[fmt.POS_COUNTERS:fmt.POS_COUNTERS + fmt.COUNTERS.size] = counters   # undo the header
    got, complete = both(ki, "T#a")
    assert got == [100 * i for i in reversed(range(10))] and complete
    ki.close()


def damaged(path, where: str) -> tuple[KeyIndex, int]:
    """An index of 12 keys over 8 slots with the chain of ``T#k5`` damaged at ``where``;
    (the index, the hash of ``T#k5``)."""
    ki = KeyIndex(path, slots=8, entries=200)
    ki.put_batch([(f"T#k{i % 12}", 100 * i, T0 + 10 * i) for i in range(120)])
    f = ki._files[-1]
    h = fmt.key_hash("T#k5")
    spos = fmt.HEADER_BYTES + (h % 8) * 4
    head = struct.unpack_from("<I", f.mm, spos)[0]
    entry = f.entries_pos + head * fmt.ENTRY_BYTES
    if where == "head":
        f.mm[spos] ^= 1 << 2                               # names another entry
    elif where == "head-out":
        f.mm[spos:spos + 4] = struct.pack("<I", 10_000)     # past the file's capacity
    elif where == "link":
        f.mm[entry + 16] ^= 1                              # the newest entry's link
    elif where == "link-forward":
        f.mm[entry + 16:entry + 20] = struct.pack("<i", head + 1)
    else:
        f.mm[entry] ^= 1 << 7                              # the newest entry's hash
    return ki, h


@pytest.mark.parametrize("where", ["head", "head-out", "link", "link-forward", "hash"])
def test_a_damaged_chain_gets_the_python_walks_answer(tmp_path, where):
    ki, _h = damaged(tmp_path, where)
    for k in range(12):
        both(ki, f"T#k{k}")
    want = [100 * i for i in reversed(range(120)) if i % 12 == 5]
    got, _ = ki.lookup("T#k5", *ALL, 64)
    assert set(want) - set(got) <= {100 * 113}             # at most the entry hit is lost
    ki.close()


@pytest.mark.parametrize("where", ["head-out", "link-forward"])
def test_the_compiled_walk_reports_a_damaged_chain(tmp_path, where):
    """What sends ``lookup`` to the Python walk: the kernel names the damaged file."""
    ki, h = damaged(tmp_path, where)
    table, _views = ki._file_table()
    out = np.empty(64, np.int64)
    assert kk.find(table, h, *ALL, out, len(table) - 1) == -2 - (len(table) - 1)
    ki.close()


def test_a_readonly_view_sees_the_writers_new_files(tmp_path):
    ki = KeyIndex(tmp_path, slots=2, entries=8)
    view = KeyIndex(tmp_path, slots=2, entries=8, readonly=True)
    assert view.lookup("T#a", *ALL) == ([], True)
    for i in range(40):
        ki.put_batch([("T#a", 10 * i, T0 + i)])
        got, complete = view.lookup("T#a", *ALL)
        assert got == [10 * j for j in reversed(range(i + 1))] and complete
    assert len(view.files()) > 3
    ki.delete_files_below(200)
    both(view, "T#a")
    view.close()
    ki.close()


def test_closed_and_bad_keys(tmp_path):
    ki = KeyIndex(tmp_path, slots=2, entries=8)
    ki.put_batch([("T#a", 10, T0)])
    with pytest.raises(InvalidInputError, match="UTF-8"):
        ki.lookup("T#\udc80", *ALL)
    ki.close()
    with pytest.raises(StoreClosedError):
        ki.lookup("T#a", *ALL)


def test_custom_hash_every_key_collides(tmp_path):
    ki = KeyIndex(tmp_path, slots=5, entries=30, hash_fn=lambda key: 77)
    ki.put_batch([(f"T#k{i}", 10 * i, T0 + i) for i in range(100)])
    got, complete = both(ki, "T#anything", limit=100)
    assert got == [10 * i for i in reversed(range(100))] and complete
    ki.close()

