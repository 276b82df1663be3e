"""The maintenance jobs on Spark: verify, rebuild-index, export, and the ``strata spark`` CLI."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

import strata
from strata.cli.main import cli
from strata.errors import CorruptStoreError, StoreLockedError, StoreNotFoundError
from strata.testing.faults import flip_bit
from strata.format import key_index as kfmt
from strata.format.segment import HEADER_AREA
from strata.spark.jobs import export_topic, rebuild_index, verify

pytestmark = pytest.mark.spark

TX_PREPARED = 0x4


def job_store_config() -> strata.StoreConfig:
    """64 KiB segments, 256-unit queue files, 2048-entry index files: many files of each."""
    return strata.StoreConfig(segment_size=64 * 1024, prefault=False, consume_queue_units=256,
                              index_slots=512, index_entries=2048)


def build_store(path: Path, n: int = 2400) -> dict:
    """Messages with keys, unique keys, tags and properties over several topics, a deleted
    topic and a prepared (transactional) message; returns put results by sequence."""
    results = {}
    with strata.open(path, job_store_config()) as store:
        store.create_topic("orders", queues=3)
        store.create_topic("audit", queues=2)
        store.create_topic("gone", queues=1)
        store.put_batch([strata.Message("gone", b"old", keys=("g1",)) for _ in range(20)])
        store.wait_dispatched()
        store.delete_topic("gone")
        batch = []
        for i in range(n):
            topic = "orders" if i % 4 else "audit"
            kw = {}
            if i % 3:
                kw["keys"] = (f"k{i}", f"entity-{i // 7}")
            if i % 2:
                kw["tags"] = f"tag{i % 5}"
            if i % 11 == 0:
                kw["properties"] = {"UNIQ_KEY": f"u{i}", "region": "eu"}
            if i == 17:
                kw["sys_flag"] = TX_PREPARED
            batch.append(strata.Message(topic, (b"%06d|" % i) * (3 + i % 40), **kw))
            if len(batch) == 300:
                for m, r in zip(batch, store.put_batch(batch)):
                    results[len(results)] = r
                batch = []
        for m, r in zip(batch, store.put_batch(batch)):
            results[len(results)] = r
        store.wait_dispatched()
    return results


@pytest.fixture(scope="module")
def good_store(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("jobs") / "store"
    results = build_store(path)
    return path, results


def copy_store(src: Path, dst: Path) -> Path:
    """A copy of a closed store to damage or rebuild."""
    shutil.copytree(src, dst)
    return dst


def test_verify_passes_on_good_store(spark, good_store):
    path, results = good_store
    r = verify(spark, path)
    s = r.summary
    assert r.ok, r.problems
    assert r.report.count() == 0
    assert r.report.columns == ["file", "offset", "kind", "detail"]
    assert s.records == len(results) + 20           # + the deleted topic's records
    assert s.segments == len(list((path / "commitlog").iterdir())) > 5
    # every record but the prepared one has a unit; the deleted topic has no queue any more
    assert s.units == len(results) - 1
    assert s.queues == 5
    assert s.index_files > 1 and s.index_entries > 2048
    assert not s.live_writer and s.confirmed_offset == s.dispatched_offset


def _record_in_sealed_segment(path: Path, results: dict):
    """(segment file, commit-log offset, size) of a record in the first sealed segment."""
    segs = sorted((path / "commitlog").iterdir())
    base = int(segs[1].name)
    r = next(r for r in results.values() if base < r.commitlog_offset < base + 30000)
    return segs[1], r.commitlog_offset, r.size, base


def test_verify_finds_bit_flip_naming_file_and_offset(spark, good_store, tmp_path):
    path = copy_store(good_store[0], tmp_path / "flipped")
    seg, phys, size, base = _record_in_sealed_segment(path, good_store[1])
    flip_bit(seg, HEADER_AREA + (phys - base) + size - 12, bit=3)    # inside the body
    r = verify(spark, path)
    assert not r.ok
    found = {(p.file, p.offset, p.kind) for p in r.problems}
    assert (f"commitlog/{seg.name}", phys, "crc-mismatch") in found
    assert (f"commitlog/{seg.name}", base + 64 * 1024, "footer-crc") in found
    rows = r.report.filter("kind = 'crc-mismatch'").collect()
    assert [(x.file, x.offset) for x in rows] == [(f"commitlog/{seg.name}", phys)]
    assert "CRC32C mismatch" in rows[0].detail


def _cq_file(path: Path, topic: str, qid: int) -> Path:
    return sorted((path / "consumequeue" / topic / str(qid)).iterdir())[0]


def test_verify_finds_queue_and_index_inconsistencies(spark, good_store, tmp_path):
    path = copy_store(good_store[0], tmp_path / "bad-indexes")
    # unit 5 of orders/1 points at unit 6's record
    cq = _cq_file(path, "orders", 1)
    raw = bytearray(cq.read_bytes())
    u5, u6 = HEADER_AREA + 5 * 20, HEADER_AREA + 6 * 20
    raw[u5:u5 + 8] = raw[u6:u6 + 8]
    cq.write_bytes(raw)
    # key-index entry 3 of the first file gets another key's hash
    kx = sorted(p for p in (path / "index").iterdir())[0]
    raw = bytearray(kx.read_bytes())
    slots = struct.unpack_from("<I", raw, 12)[0]
    e3 = kfmt.entry_position(slots, 3)
    h = struct.unpack_from("<I", raw, e3)[0]
    struct.pack_into("<I", raw, e3, (h + 1) & kfmt.HASH_MASK)
    kx.write_bytes(raw)
    r = verify(spark, path)
    by_kind: dict[str, set] = {}
    for p in r.problems:
        by_kind.setdefault(p.kind, set()).add((p.file, p.offset))
    cq_rel = f"consumequeue/orders/1/{cq.name}"
    assert (cq_rel, 5) in by_kind["cq-mismatch"]          # from both the segment and the queue
    assert set(by_kind["cq-mismatch"]) == {(cq_rel, 5)}
    assert (f"index/{kx.name}", 3) in by_kind["index-extra"]   # the entry nobody's key hashes to
    assert by_kind["index-missing"]                        # the key that lost its entry
    assert by_kind["index-chain"]                          # it now sits in the wrong chain
    assert not {k for k in by_kind if k.startswith(("crc", "bad", "footer"))}


def test_verify_live_store_only_up_to_confirmed(spark, tmp_path):
    path = tmp_path / "live"
    with strata.open(path, job_store_config()) as store:
        store.put_batch([strata.Message("t", b"x" * 200, keys=(f"k{i}",)) for i in range(600)])
        store.wait_dispatched()
        r = verify(spark, path)
        assert r.summary.live_writer
        assert r.ok, r.problems
        assert r.summary.records == 600
        assert r.summary.confirmed_offset == store.confirmed_offset()


def _snapshot(path: Path) -> dict[str, bytes]:
    """Queue and index files (not index/next.spare: reserved space, there or not by timing)."""
    out = {}
    for sub in ("consumequeue", "index"):
        for p in sorted((path / sub).rglob("*")):
            if p.is_file() and p.name != "next.spare":
                out[str(p.relative_to(path))] = p.read_bytes()
    return out


def test_rebuild_equals_dispatch_byte_for_byte(spark, good_store, tmp_path):
    """Key-index files hold nothing time-of-creation dependent (base_timestamp is the first
    entry's store time, SEALED is set by the flush of a full file), so every byte must match."""
    path = copy_store(good_store[0], tmp_path / "rebuilt")
    before = _snapshot(path)
    shutil.rmtree(path / "consumequeue")     # lost: their geometry must be given
    shutil.rmtree(path / "index")
    cfg = job_store_config()
    summary = rebuild_index(spark, path, units_per_file=cfg.consume_queue_units,
                            index_slots=cfg.index_slots, index_entries=cfg.index_entries)
    after = _snapshot(path)
    assert sorted(after) == sorted(before)
    assert [k for k in before if before[k] != after[k]] == []
    assert summary.records == len(good_store[1]) + 20
    assert summary.index_files == len([k for k in before if k.startswith("index/")]) > 1
    assert not (path / "rebuild.tmp").exists() and not (path / "rebuild.old").exists()
    # the store opens without re-dispatching anything and answers from the new files
    with strata.open(path, job_store_config()) as store:
        assert store.recovery_report.redispatched_records == 0
        r = good_store[1][101]
        assert store.query("orders", "k101")[0].commitlog_offset == r.commitlog_offset
        got = store.get("orders", r.queue_id, r.queue_offset, 1)
        assert got.messages[0].commitlog_offset == r.commitlog_offset


def test_rebuild_refuses_locked_or_damaged_store(spark, good_store, tmp_path):
    path = copy_store(good_store[0], tmp_path / "refused")
    before = _snapshot(path)
    with strata.open(path, job_store_config()):
        with pytest.raises(StoreLockedError, match="open for writing"):
            rebuild_index(spark, path)
    seg, phys, size, base = _record_in_sealed_segment(path, good_store[1])
    flip_bit(seg, HEADER_AREA + (phys - base) + size - 12)
    with pytest.raises(CorruptStoreError, match=f"commitlog/{seg.name} offset {phys}"):
        rebuild_index(spark, path)
    assert _snapshot(path) == before
    assert not (path / "rebuild.tmp").exists()
    with pytest.raises(StoreNotFoundError):
        rebuild_index(spark, tmp_path / "nowhere")


def test_export_round_trips(spark, good_store, tmp_path):
    path = good_store[0]
    out = tmp_path / "orders.parquet"
    s = export_topic(spark, path, "orders", out)
    # every orders message but the prepared one (never in a consume queue, so never read)
    assert s.rows == sum(1 for r in good_store[1].values() if r.topic == "orders") - 1
    back = spark.read.parquet(str(out))
    assert back.columns == ["key", "value", "topic", "queue_id", "queue_offset", "timestamp",
                            "timestampType", "date"]
    rows = back.collect()
    for row in rows:
        assert row.date == dt.datetime.fromtimestamp(row.timestamp.timestamp(),
                                                     dt.timezone.utc).date()
    got = {(r.queue_id, r.queue_offset): (bytes(r.value), r.key and bytes(r.key),
                                          round(r.timestamp.timestamp() * 1000)) for r in rows}
    want = {}
    with strata.open(path, readonly=True) as store:
        for q in range(store.queue_count("orders")):
            off = store.min_offset("orders", q)
            while True:
                res = store.get("orders", q, off, 500)
                if not res.messages:
                    break
                for m in res.messages:
                    want[(q, m.queue_offset)] = (m.body, m.keys[0].encode() if m.keys else None,
                                                 m.store_timestamp)
                off = res.next_offset
    assert got == want and len(got) == s.rows
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == \
        sorted({f"date={r.date.isoformat()}" for r in rows})
    with pytest.raises(ValueError, match="exists already"):
        export_topic(spark, path, "orders", out)
    with pytest.raises(ValueError, match="no topic 'nope'"):
        export_topic(spark, path, "nope", tmp_path / "x")


# ------------------------------------------------------------------------------ CLI


def test_cli_bad_arguments_fail_before_spark(good_store, tmp_path):
    runner = CliRunner()
    r = runner.invoke(cli, ["spark", "verify", str(tmp_path / "missing")])
    assert r.exit_code != 0 and "no strata store" in r.output
    r = runner.invoke(cli, ["spark", "export", str(good_store[0]), "--to", str(tmp_path / "o")])
    assert r.exit_code == 2 and "--topic" in r.output
    r = runner.invoke(cli, ["spark", "export", str(good_store[0]), "--topic", "orders",
                            "--to", str(tmp_path / "o"), "--format", "csv"])
    assert r.exit_code == 2 and "csv" in r.output
    path = copy_store(good_store[0], tmp_path / "locked")
    with strata.open(path, job_store_config()):
        r = runner.invoke(cli, ["spark", "rebuild-index", str(path)])
    assert r.exit_code == 1 and "open for writing" in r.output


def test_cli_verify_and_rebuild(spark, good_store, tmp_path):
    runner = CliRunner()
    # rebuild in place: the geometry comes from the existing files, the result is the same bytes
    path = copy_store(good_store[0], tmp_path / "cli-rebuild")
    before = _snapshot(path)
    r = runner.invoke(cli, ["spark", "rebuild-index", str(path), "--master", "local[2]"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip().splitlines()[-1])["records"] == len(good_store[1]) + 20
    assert _snapshot(path) == before
    r = runner.invoke(cli, ["spark", "verify", str(good_store[0]), "--master", "local[2]"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output.strip().splitlines()[-1])
    assert summary["problems"] == 0 and summary["records"] == len(good_store[1]) + 20
    path = copy_store(good_store[0], tmp_path / "cli-flip")
    seg, phys, size, base = _record_in_sealed_segment(path, good_store[1])
    flip_bit(seg, HEADER_AREA + (phys - base) + 100)
    r = runner.invoke(cli, ["spark", "verify", str(path)])
    assert r.exit_code == 1
    assert f"commitlog/{seg.name}" in r.output and str(phys) in r.output
