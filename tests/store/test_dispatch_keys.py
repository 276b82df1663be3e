"""The compiled dispatch of keys and tags (``property_kernels``: properties read, tag codes and
key hashes computed, key-index entries written per batch) writes the same consume queues and
key index, byte for byte, as the Python reader message by message."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import strata
import strata.index.dispatch_batch as db
from strata.index.key_index import KeyIndex
from strata.format import key_index as kfmt
from store_helpers import clock, config, settle  # noqa: F401 (clock is a fixture)


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and (p.parent.name == "index" or "consumequeue" in str(p))}


def messages(first: int, n: int) -> list[strata.Message]:
    return [strata.Message("t", b"b%d" % i, keys=[f"k{i % 50}", "ключ"][:i % 3],
                           tags=["x", "ß", None][i % 3],
                           properties={"UNIQ_KEY": f"u{i}"} if i % 4 == 0 else
                           {"p": "v"} if i % 4 == 1 else None)
            for i in range(first, first + n)]


def test_compiled_dispatch_writes_what_python_dispatch_writes(tmp_path, clock, monkeypatch):
    roots = {}
    found = []
    scan = db._scan_keys

    def spy(*a):
        out = scan(*a)
        found.append(out[0] is not None and len(out[0]))
        return out

    for mode in ("compiled", "python"):
        monkeypatch.setattr(db, "_scan_keys", spy if mode == "compiled" else
                            lambda *a: (None, False))
        root = roots[mode] = tmp_path / mode
        # few index entries per file: the key index rolls files within a batch
        with strata.open(root, config(index_slots=64, index_entries=300)) as s:
            for i, n in enumerate((700, 40, 300)):
                clock.t += 1500 if i != 1 else -3000    # store times going back, too
                s.put_batch(messages(i * 1000, n))
                settle(s)
            assert [m.body for m in s.query("t", "k7")]
            assert len(s.query("t", "u0")) == 1
            got = s.get("t", 0, 0, 32, tags="ß").messages
            assert got and all(m.tags == "ß" for m in got)
    assert sum(found) > 500      # the compiled reader found (most of) the keys
    a, b = files_of(roots["compiled"]), files_of(roots["python"])
    assert a.keys() == b.keys() and any("index" in k for k in a)
    assert a == b


def test_put_hashed_equals_put_batch(tmp_path):
    keys = [f"t#key-{i % 97}" for i in range(1000)]
    offsets = np.arange(1000, dtype=np.int64) * 10 + 5
    stamps = 1_700_000_000_000 + np.array([(i * 7919) % 5000 for i in range(1000)], np.int64)
    one = KeyIndex(tmp_path / "a", slots=128, entries=256)
    two = KeyIndex(tmp_path / "b", slots=128, entries=256)
    one.put_batch(list(zip(keys[:600], offsets[:600].tolist(), stamps[:600].tolist())))
    one.put_batch(list(zip(keys[500:], offsets[500:].tolist(), stamps[500:].tolist())))
    hashes = np.array([kfmt.key_hash(k) for k in keys], np.int64)
    two.put_hashed(hashes[:600], offsets[:600], stamps[:600])
    two.put_hashed(hashes[500:], offsets[500:], stamps[500:])      # a replay overlaps
    with pytest.raises(Exception, match="order"):
        two.put_hashed(hashes[:2], np.array([20000, 19990]), stamps[:2])
    one.close()
    two.close()
    fa = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    fb = {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}
    assert fa == fb and len(fa) > 2


def test_compiled_key_columns_give_the_python_readers_keys(tmp_path, clock, monkeypatch):
    """The compiled reader's key columns (their text gathered only when asked for) name the
    same keys and unique keys per row as the Python reader, batch after batch (its scratch
    arrays are reused between batches)."""
    from strata.log.record_fields import walk_fields
    with strata.open(tmp_path / "s", config()) as s:
        s.put_batch(messages(0, 300))
        s.put_batch(messages(5000, 200))
        settle(s)
        seg, rel = s.log.locate(s.log.min_offset())
        keyed = {}
        for mode in ("compiled", "python"):
            if mode == "python":
                monkeypatch.setattr(db, "_scan_keys", lambda *a: (None, False))
            batches = []
            pos = rel
            while True:
                run = walk_fields(seg, pos, seg.committed, 128, verify_crc=True)
                if not len(run):
                    break
                batch = db.DispatchBatch.from_fields(run, db.TopicNames())
                assert (batch.keys is not None) == (mode == "compiled")
                batches.append(batch)
                pos = batch.end - seg.base_offset
            # keys read after every batch is made: no batch depends on the reader's scratch
            keyed[mode] = [(int(b.offsets[r]), k, u) for b in batches for r, k, u in b.keyed]
    assert len(keyed["compiled"]) > 300
    assert keyed["compiled"] == keyed["python"]
