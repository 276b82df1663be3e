"""The local tier metadata as an append-only, CRC-framed log: a commit appends only what
changed (its size does not grow with history), compaction keeps the log bounded, a record a
crash cut short at any byte (or a failed fsync) leaves the previous commit, and a store with
the old one-document file moves to a log."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from strata.files.io import FileOps
from strata.tiered import metadata as md
from strata.tiered.errors import CorruptTierError
from strata.tiered.metadata import ChunkMeta, MetadataStore, read_local

URL = "file:///nowhere/tier"


def chunk(first: int, count: int = 10) -> ChunkMeta:
    return ChunkMeta(first, count, count * 100, 0x1234, 2, 0x99, 1000 + first, 1000 + first
                     + count, first * 100, (first + count) * 100)


def upload(ms: MetadataStore, topic: str, qid: int, n: int = 1) -> None:
    q = ms.meta.queue_for_update(topic, qid)
    for _ in range(n):
        q.chunks.append(chunk(q.next_offset))
        q.next_offset = q.chunks[-1].end


def same(a, b) -> bool:
    return a.to_json() == b.to_json()


def test_a_commit_appends_only_its_change(tmp_path):
    ms = MetadataStore(tmp_path, URL, None)
    ms.commit()
    sizes = []
    for i in range(400):
        upload(ms, "orders", i % 4)
        before = ms.log_bytes
        ms.commit()
        if ms.log_bytes > before:                       # not a compaction
            sizes.append(ms.log_bytes - before)
        assert same(read_local(tmp_path), ms.meta)
    assert max(sizes) <= min(sizes) + 16                # the same size after 400 chunks
    assert max(sizes) < 400
    # the oldest chunks dropped (tier retention) and skipped offsets are changes too
    q = ms.meta.queue("orders", 1)
    del q.chunks[:30]
    q.skipped += 3
    ms.commit()
    assert same(read_local(tmp_path), ms.meta)
    assert read_local(tmp_path).queue("orders", 1).chunks[0].first == 300


def test_compaction_keeps_the_log_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(md, "COMPACT_MIN_BYTES", 4096)
    ms = MetadataStore(tmp_path, URL, None)
    ms.commit()
    largest = 0
    for i in range(600):
        upload(ms, "t", i % 3)
        if i % 7 == 0:
            del ms.meta.queue("t", i % 3).chunks[:1]   # retention drops some on the way
        ms.commit()
        size = ms.path.stat().st_size
        assert size == ms.log_bytes
        largest = max(largest, size)
        assert size <= max(4096, md.COMPACT_FACTOR * ms.snapshot_bytes) + 400
    assert same(read_local(tmp_path), ms.meta)
    assert ms.meta.generation == 601
    assert not list(ms.dir.glob("*.tmp"))


def test_a_record_cut_at_any_byte_leaves_the_previous_commit(tmp_path):
    ms = MetadataStore(tmp_path, URL, None)
    ms.commit()
    upload(ms, "a", 0, 5)
    ms.commit()
    good = ms.path.read_bytes()
    previous = read_local(tmp_path)
    upload(ms, "a", 0, 2)
    upload(ms, "b", 3, 1)
    ms.commit()
    full = ms.path.read_bytes()
    assert len(full) > len(good)
    for cut in range(len(good), len(full)):
        d = tmp_path / f"cut{cut}"
        (d / md.LOCAL_DIR).mkdir(parents=True)
        (d / md.LOCAL_DIR / md.LOCAL_FILE).write_bytes(full[:cut])
        assert same(read_local(d), previous), cut
        again = MetadataStore(d, URL, None)              # the writer cuts the torn tail off
        assert (d / md.LOCAL_DIR / md.LOCAL_FILE).read_bytes() == good
        upload(again, "c", 0, 1)
        again.commit()
        got = read_local(d)
        assert same(got, again.meta) and got.queue("c", 0).chunks
    # a flipped bit in the last record: the same as a torn one
    bad = bytearray(full)
    bad[-3] ^= 0x10
    ms.path.write_bytes(bytes(bad))
    assert same(read_local(tmp_path), previous)
    # ... in the snapshot: nothing is left to trust, and the error names the file
    bad = bytearray(full)
    bad[20] ^= 0x10
    ms.path.write_bytes(bytes(bad))
    with pytest.raises(CorruptTierError, match="metadata.log"):
        read_local(tmp_path)


class FailingFsync(FileOps):
    """fsync fails once when armed (a disk error mid-commit)."""

    armed = False

    def fsync(self, path: Path, fd: int) -> None:
        if self.armed:
            self.armed = False
            raise OSError(5, "Input/output error (injected)")
        super().fsync(path, fd)


def test_a_failed_append_leaves_no_half_record(tmp_path):
    ops = FailingFsync()
    ms = MetadataStore(tmp_path, URL, None, file_ops=ops)
    ms.commit()
    upload(ms, "a", 0, 3)
    ms.commit()
    committed = ms.path.read_bytes()
    upload(ms, "a", 0, 1)
    ops.armed = True
    with pytest.raises(OSError, match="injected"):
        ms.commit()
    assert ms.path.read_bytes() == committed           # cut back to the last whole commit
    assert read_local(tmp_path).queue("a", 0).next_offset == 30
    ms.commit()                                         # the change goes in with the next one
    got = read_local(tmp_path)
    assert same(got, ms.meta) and got.queue("a", 0).next_offset == 40


def test_the_old_document_moves_into_a_log(tmp_path):
    old = md.TierMetadata(store_id="ab" * 16, tier_url=URL, generation=7)
    q = old.queue_for_update("orders", 2)
    q.chunks = [chunk(0), chunk(10)]
    q.next_offset = 20
    (tmp_path / md.LOCAL_DIR).mkdir()
    (tmp_path / md.LOCAL_DIR / md.OLD_LOCAL_FILE).write_bytes(old.to_json())
    assert same(read_local(tmp_path), old)
    ms = MetadataStore(tmp_path, URL, None)
    assert same(ms.meta, old)
    upload(ms, "orders", 2)
    ms.commit()
    assert not (tmp_path / md.LOCAL_DIR / md.OLD_LOCAL_FILE).exists()
    got = read_local(tmp_path)
    assert got.generation == 8 and got.queue("orders", 2).next_offset == 30
    raw = ms.path.read_bytes()
    assert raw.startswith(md.LOG_MAGIC)
    length, _crc = md.FRAME.unpack_from(raw, len(md.LOG_MAGIC))
    first = json.loads(raw[len(md.LOG_MAGIC) + md.FRAME.size:][:length])
    assert first["kind"] == "snapshot" and first["store_id"] == "ab" * 16
    os.truncate(ms.path, 5)                             # not even the magic: refused
    with pytest.raises(CorruptTierError, match="not a tier metadata log"):
        MetadataStore(tmp_path, URL, None)
