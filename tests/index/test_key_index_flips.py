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
