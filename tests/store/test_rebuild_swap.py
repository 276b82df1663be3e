"""IndexRebuild without Spark: the build equals dispatch, and a rebuild killed in the middle of
its swap leaves a store whose next writer open re-dispatches everything correctly."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

import strata
from strata.errors import StoreLockedError
from strata.files.segment import MappedSegment
from strata.format.segment import KIND_COMMIT_LOG
from strata.index.key_index import SPARE_NAME
from strata.index.segment_scan import SegmentScan
from strata.store.rebuild import NEW_DIR, OLD_DIR, IndexRebuild
from strata.testing.faults import RecordingFileOps, installed


def config() -> strata.StoreConfig:
    return strata.StoreConfig(segment_size=64 * 1024, prefault=False, consume_queue_units=128,
                              index_slots=256, index_entries=1024)


def make_store(path: Path) -> int:
    with strata.open(path, config()) as store:
        store.create_topic("a", queues=2)
        for b in range(6):
            store.put_batch([strata.Message("a" if i % 3 else "b", b"%05d" % i * (1 + i % 30),
                                            keys=(f"k{b}-{i}",), tags=f"t{i % 3}")
                             for i in range(200)])
        store.wait_dispatched()
    return 1200


def snapshot(path: Path) -> dict[str, bytes]:
    """Queue and index files (not index/next.spare: reserved space, there or not by timing)."""
    return {str(p.relative_to(path)): p.read_bytes()
            for sub in ("consumequeue", "index") for p in sorted((path / sub).rglob("*"))
            if p.is_file() and p.name != SPARE_NAME}


def local_batches(rb: IndexRebuild):
    """What the Spark job's tasks extract, done in this process."""
    for span in rb.segments:
        seg = MappedSegment.open(Path(span.path), KIND_COMMIT_LOG, readonly=True)
        scan = SegmentScan(seg, span.limit, span.file)
        yield from scan.batches(100)
        assert not scan.problems and scan.complete
        seg.close()


def test_local_rebuild_equals_dispatch(tmp_path):
    path = tmp_path / "s"
    n = make_store(path)
    before = snapshot(path)
    with IndexRebuild(path, config()) as rb:
        assert rb.build(local_batches(rb)) == n
        rb.swap()
    assert snapshot(path) == before
    assert sorted(p.name for p in path.iterdir() if p.name.startswith("rebuild")) == []


def test_a_rebuild_with_other_files_is_not_taken_for_lost_ones(tmp_path):
    """The derived-files summary named the old files: a rebuild made with other geometry
    (other index file names) must not be set aside and rebuilt again at the next open."""
    path = tmp_path / "s"
    n = make_store(path)
    other = strata.StoreConfig(segment_size=64 * 1024, prefault=False, consume_queue_units=64,
                               index_slots=64, index_entries=256)
    with IndexRebuild(path, other) as rb:
        assert rb.build(local_batches(rb)) == n
        rb.swap()
    with strata.open(path, config()) as store:
        assert not store.recovery_report.repaired_files, store.recovery_report.repaired_files
        assert store.recovery_report.redispatched_records == 0
        assert len(store.query("a", "k0-1")) == 1


def test_rebuild_needs_the_writer_lock(tmp_path):
    path = tmp_path / "s"
    make_store(path)
    with strata.open(path, config()):
        with pytest.raises(StoreLockedError):
            IndexRebuild(path, config())


@pytest.mark.parametrize("killed_at", ["after-moving-old-queues", "before-final-checkpoint"])
def test_killed_mid_swap_next_open_redispatches_everything(tmp_path, monkeypatch, killed_at):
    path = tmp_path / "s"
    n = make_store(path)
    before = snapshot(path)
    rb = IndexRebuild(path, config())
    rb.build(local_batches(rb))

    class Killed(BaseException):
        pass

    seam = contextlib.nullcontext()
    if killed_at == "after-moving-old-queues":
        # the second rename dies: consumequeue went to rebuild.old, the new one is not in
        seam = installed(RecordingFileOps(fail={"rename": (2, Killed())}))
    else:
        real_store = IndexRebuild._store_checkpoint

        def store(self, dispatched):
            if dispatched == self.end_offset:
                raise Killed()
            return real_store(self, dispatched)
        monkeypatch.setattr(IndexRebuild, "_store_checkpoint", store)
    with seam, pytest.raises(Killed):
        rb.swap()
    monkeypatch.undo()
    rb._lock.release()                   # the process died: its flock goes with it
    assert (path / NEW_DIR).exists() or (path / OLD_DIR).exists()
    with strata.open(path, config()) as store:
        assert store.recovery_report.redispatched_records == n
        assert sum(store.max_offset(t, q) for t in store.topics()
                   for q in range(store.queue_count(t))) == n
        assert store.query("a", "k5-199")[0].body == b"%05d" % 199 * (1 + 199 % 30)
    assert snapshot(path) == before
    # the next rebuild clears the leftovers and finishes the job
    with IndexRebuild(path, config()) as rb:
        rb.build(local_batches(rb))
        rb.swap()
    assert snapshot(path) == before
    assert not (path / NEW_DIR).exists() and not (path / OLD_DIR).exists()
