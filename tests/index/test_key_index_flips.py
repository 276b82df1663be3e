"""A flipped bit in a key-index slot head or chain link costs no query more than the entry it
hits: a walk that leaves its chain (an entry of another slot, a link that does not point
backwards, a head outside the file) looks at every entry of that file instead."""

from __future__ import annotations

import struct

import pytest

from strata.format import key_index as fmt
from strata.index.key_index import KeyIndex

T0 = 1_700_000_000_000
SLOTS, ENTRIES = 8, 200


def build(path):
    ki = KeyIndex(path, slots=SLOTS, entries=ENTRIES)
    # 12 keys over 8 slots (chains shared by several keys), 120 entries in offset order
    ki.put_batch([(f"T#k{i % 12}", 100 * i, T0 + 10 * i) for i in range(120)])
    ki.flush()
    ki.close()
    (name,) = [p.name for p in path.iterdir() if p.name.isdigit()]
    return path / name


def want(key: int) -> list[int]:
    return [100 * i for i in reversed(range(120)) if i % 12 == key]


def flip(path, at: int, bit: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 1 << bit
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("where", ["head", "link", "hash"])
def test_a_flipped_chain_bit_loses_at_most_the_entry_it_hits(tmp_path, where):
    path = build(tmp_path)
    key = 5
    h = fmt.key_hash(f"T#k{key}")
    slot = h % SLOTS
    raw = path.read_bytes()
    head = struct.unpack_from("<I", raw, fmt.HEADER_BYTES + slot * 4)[0]
    entry = fmt.entries_position(SLOTS) + head * fmt.ENTRY_BYTES
    hit = None
    if where == "head":
        flip(path, fmt.HEADER_BYTES + slot * 4, 2)       # the head names another entry
    elif where == "link":
        flip(path, entry + 16, 0)                        # the newest entry's link
    else:
        flip(path, entry, 7)                             # the newest entry's hash
        hit = struct.unpack_from("<q", raw, entry + 4)[0]   # (its record, if it is key's)
    ro = KeyIndex(tmp_path, slots=SLOTS, entries=ENTRIES, readonly=True)
    got = list(ro.candidates(f"T#k{key}", 0, 2**62))
    expected = [p for p in want(key) if p != hit]
    assert [p for p in got if p in want(key)] == expected
    ro.close()


# --------------------------------------------------------------------------- entries in a store


def keyed_store(path, entries: int) -> list[tuple[int, str]]:
    """60 messages of 6 keys: (commit-log offset, key) of each."""
    import strata
    from support import small_store_config
    out = []
    with strata.open(path, small_store_config(index_slots=SLOTS, index_entries=entries)) as s:
        for i in range(60):
            r = s.put(strata.Message("T", b"m%d" % i, keys=(f"k{i % 6}",)))
            out.append((r.commitlog_offset, f"k{i % 6}"))
    return out


@pytest.mark.parametrize("sealed", [False, True], ids=["open-file", "sealed-file"])
def test_a_flipped_entry_offset_or_hash_hides_no_other_message(tmp_path, sealed):
    """Each bit of an entry's key hash, commit-log offset and time, flipped in turn (in the file a
    writer checks on open, or in a sealed one it trusts): a writer's open and a query of every
    key find every message but, at most, the one whose entry was hit."""
    import shutil

    import strata
    from support import small_store_config

    pristine = tmp_path / "pristine"
    msgs = keyed_store(pristine, 32 if sealed else 4096)
    files = sorted(p for p in (pristine / "index").iterdir() if p.name.isdigit())
    assert len(files) == (2 if sealed else 1)
    target = files[0]
    raw = target.read_bytes()
    flags, _end, count, *_ = fmt.peek_counters(raw)
    assert bool(flags & fmt.FLAG_SEALED) == sealed
    h3 = fmt.key_hash("T#k3")
    epos = fmt.entries_position(SLOTS)
    # an entry of k3 in the middle of its chain: it has newer and older entries
    numbers = [n for n in range(1, count) if fmt.decode_entry(raw, epos + 20 * n)[0] == h3]
    number = numbers[len(numbers) // 2]
    own = fmt.decode_entry(raw, epos + 20 * number)[1]
    cfg = small_store_config(index_slots=SLOTS, index_entries=32 if sealed else 4096)
    work = tmp_path / "work"
    for at in range(16):      # key hash (0-3), commit-log offset (4-11), time delta (12-15)
        for bit in range(8):
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(pristine, work)
            flip(work / "index" / target.name, epos + 20 * number + at, bit)
            with strata.open(work, cfg) as s:
                for key in {k for _p, k in msgs}:
                    got = [m.commitlog_offset for m in s.query("T", key, max_results=100)]
                    want_ = [p for p, k in reversed(msgs) if k == key]
                    assert [p for p in want_ if p not in got] in ([], [own]), (at, bit, key)
                    assert [p for p in got if p != own] == [p for p in want_ if p != own]
