"""SegmentScan: every record of a segment read with the dispatch reader, CRC-checked, and the
first damaged record named exactly (what verify and rebuild-index report)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import strata
from strata.testing.faults import flip_bit
from strata.files.segment import MappedSegment
from strata.format import record as rec
from strata.format.segment import HEADER_AREA, KIND_COMMIT_LOG
from strata.index.segment_scan import SegmentScan

SEG = 64 * 1024


@pytest.fixture()
def store(tmp_path) -> tuple[Path, list]:
    path = tmp_path / "s"
    with strata.open(path, strata.StoreConfig(segment_size=SEG, prefault=False)) as s:
        results = s.put_batch([strata.Message("t", b"body-%05d" % i * 5, keys=(f"k{i}",),
                                              tags="x", properties={"p": str(i)})
                               for i in range(1500)])
    return path, results


def scan(path: Path, name: str, limit: int | None = None, verify_crc: bool = True):
    seg = MappedSegment.open(path / "commitlog" / name, KIND_COMMIT_LOG, readonly=True)
    sc = SegmentScan(seg, SEG if limit is None else limit, f"commitlog/{name}",
                     verify_crc=verify_crc)
    batches = list(sc.batches(100))
    sc.check_footer()
    seg.close()
    return sc, batches


def first_in(results, base: int):
    return next(r for r in results if base < r.commitlog_offset < base + SEG - 2000)


def test_clean_segments(store):
    path, results = store
    names = sorted(p.name for p in (path / "commitlog").iterdir())
    total = 0
    for name in names[:-1]:
        sc, batches = scan(path, name)
        assert not sc.problems and sc.complete and sc.closed
        assert sum(len(b) for b in batches) == sc.records
        total += sc.records
    last_end = results[-1].commitlog_offset + results[-1].size - int(names[-1])
    sc, batches = scan(path, names[-1], limit=last_end)
    assert not sc.problems and sc.complete and not sc.closed
    assert total + sc.records == len(results)
    offsets = [int(o) for b in batches for o in b.offsets]
    assert offsets == [r.commitlog_offset for r in results if r.commitlog_offset >= int(names[-1])]


def _damage(path, results, name, at, bit=0):
    """Flip a bit ``at`` bytes into the record (negative: from its end)."""
    base = int(name)
    r = first_in(results, base)
    at = at if at >= 0 else r.size + at
    flip_bit(path / "commitlog" / name, HEADER_AREA + r.commitlog_offset - base + at, bit)
    return r


def test_body_bit_flip_is_a_crc_mismatch_and_breaks_the_footer(store):
    path, results = store
    name = sorted(p.name for p in (path / "commitlog").iterdir())[1]
    r = _damage(path, results, name, -6, 2)   # the last body byte (before the 4-byte trailer)
    sc, batches = scan(path, name)
    kinds = {(p.offset, p.kind) for p in sc.problems}
    assert (r.commitlog_offset, "crc-mismatch") in kinds
    assert (int(name) + SEG, "footer-crc") in kinds
    assert sum(len(b) for b in batches) == sc.records
    # the scan goes on past the damaged record: every other record of the segment is read
    got = [int(o) for b in batches for o in b.offsets]
    assert r.commitlog_offset not in got
    assert got == [x.commitlog_offset for x in results if int(name) <= x.commitlog_offset
                   < int(name) + SEG and x.commitlog_offset != r.commitlog_offset]
    assert "passed over" in next(p.detail for p in sc.problems if p.kind == "crc-mismatch")


def test_length_field_and_properties_damage_named(store):
    path, results = store
    names = sorted(p.name for p in (path / "commitlog").iterdir())
    r = _damage(path, results, names[1], rec.POS_PROPERTIES_LENGTH, 3)
    sc, _ = scan(path, names[1])
    bad = [p for p in sc.problems if p.kind == "bad-record"]
    assert bad and bad[0].offset == r.commitlog_offset
    assert "field lengths" in bad[0].detail
    # without CRC checks a damaged properties section still cannot slip through
    base = int(names[2])
    r = first_in(results, base)
    seg_file = path / "commitlog" / names[2]
    start, _n = rec.properties_span(seg_file.read_bytes(), HEADER_AREA + r.commitlog_offset - base)
    flip_bit(seg_file, start + 1, 7)          # high byte of the first name's length
    sc, _ = scan(path, names[2], verify_crc=False)
    bad = [p for p in sc.problems if p.kind == "bad-record"]
    assert bad and bad[0].offset == r.commitlog_offset
    assert "properties" in bad[0].detail


def test_stale_physical_offset_is_named(store):
    path, results = store
    name = sorted(p.name for p in (path / "commitlog").iterdir())[1]
    base = int(name)
    r = first_in(results, base)
    f = path / "commitlog" / name
    raw = bytearray(f.read_bytes())
    struct.pack_into("<q", raw, HEADER_AREA + r.commitlog_offset - base + rec.POS_PHYSICAL_OFFSET,
                     r.commitlog_offset + 4096)
    f.write_bytes(raw)
    sc, _ = scan(path, name, verify_crc=False)
    assert [(p.offset, p.kind) for p in sc.problems][0] == (r.commitlog_offset,
                                                            "offset-mismatch")
