"""A torn key-index entry never orphans older entries (issue 22, item 3).

Entries are 20 bytes and straddle 512-byte sectors and pages. A power loss can leave an
unsynced entry's hash and offset on disk but not its previous-entry link (zero): recovery cuts
the entry (its record lies past the checkpoint) and must set the slot head to the newest whole
entry, not to the torn link, or every older key of that slot vanishes from ``query``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import strata
from strata.format import key_index as fmt
from strata.index.key_index import KeyIndex
from strata.store.message_store import MessageStore

from support import body_for

SLOTS = 4   # few slots: every slot's chain is long


def config(**kw) -> strata.StoreConfig:
    kw = dict(segment_size=64 << 10, prefault=False, consume_queue_units=4096,
              index_slots=SLOTS, index_entries=4096, flush_interval_ms=60_000,
              flush_thorough_interval_ms=60_000, checkpoint_interval_ms=3_600_000,
              retention_check_interval_ms=3_600_000) | kw
    return strata.StoreConfig(**kw)


def entries(path: Path) -> tuple[fmt.KeyIndexHeader, np.ndarray]:
    raw = path.read_bytes()
    header = fmt.KeyIndexHeader.decode(raw[:fmt.HEADER_BYTES])
    count = fmt.peek_counters(raw)[2]
    ents = np.frombuffer(raw, fmt.ENTRY_DTYPE, count, fmt.entries_position(header.slots))
    return header, ents


@pytest.mark.parametrize("torn", ["prev", "prev-and-delta"])
def test_a_torn_link_after_the_checkpoint_keeps_the_older_keys(tmp_store_dir, torn):
    store = MessageStore(tmp_store_dir, config())
    store.create_topic("t", 1)
    for seq in range(40):
        assert store.put(strata.Message("t", body_for(seq), keys=(f"k{seq}",))).ok
    assert store.wait_dispatched()
    store._write_checkpoint(clean_end=-1)      # entries of k0..k39 durable and checkpointed
    for seq in range(40, 41):   # one entry past the checkpoint: the only one cut
        assert store.put(strata.Message("t", body_for(seq), keys=(f"k{seq}",))).ok
    store.flush()
    assert store.wait_dispatched()
    store.key_index.flush()
    store._abandon()
    (path,) = [p for p in (tmp_store_dir / "index").iterdir() if p.name.isdigit()]
    header, ents = entries(path)
    assert len(ents) == 42
    # the last entry (k40, past the checkpoint) links to an older one of its slot; the sector
    # holding its last bytes never reached the disk
    assert ents[41]["prev"] > 0
    at = fmt.entry_position(header.slots, 41)
    cut = 16 if torn == "prev" else 12
    with open(path, "r+b") as f:
        f.seek(at + cut)
        f.write(bytes(20 - cut))
    with strata.open(tmp_store_dir, config()) as s:
        for seq in range(41):
            assert [m.body for m in s.query("t", f"k{seq}")] == [body_for(seq)], seq
    with strata.open(tmp_store_dir, config()) as s:
        for seq in range(41):
            assert [m.body for m in s.query("t", f"k{seq}")] == [body_for(seq)], seq


def test_truncate_with_a_torn_link_restores_the_newest_whole_entry(tmp_path):
    """The index layer alone: truncating entries whose link was torn to 0 (or to garbage)
    heads each slot with its newest kept entry."""
    with KeyIndex(tmp_path / "ix", slots=SLOTS, entries=256) as ix:
        ix.put_batch([(f"k{i}", 100 * i + 1, 1_700_000_000_000) for i in range(30)])
        f = ix._files[-1]
        ents = f.entries_view()
        ents_w = np.frombuffer(f.mm, fmt.ENTRY_DTYPE, f.count, f.entries_pos)
        ents_w["prev"][28] = 0               # torn to zero
        ents_w["prev"][29] = 27 if ents["hash"][27] % SLOTS != ents["hash"][29] % SLOTS \
            else 0                           # or to another slot's entry
        del ents, ents_w
        ix.truncate(100 * 27 + 1)            # cut k27, k28, k29
        for i in range(27):
            assert 100 * i + 1 in list(ix.candidates(f"k{i}", 0, 2**62)), i
        for i in range(27, 30):
            assert 100 * i + 1 not in list(ix.candidates(f"k{i}", 0, 2**62)), i
