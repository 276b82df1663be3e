"""A new store with the default settings takes a few MiB on disk and grows as its data does:
segment and consume-queue files are sparse, their blocks reserved in steps ahead of the writer;
key index files start small and grow (docs/format.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import strata
from strata.errors import DiskFullError
from strata.files import segment
from strata.files.segment import RESERVE_MIN

from store_helpers import drain
from test_full_disk import assert_readable, config, disk, message, open_store  # noqa: F401

MiB = 1 << 20


def allocated(root: Path) -> int:
    """Bytes of blocks allocated under ``root`` (what ``du`` counts)."""
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512
               for d, _dirs, files in os.walk(root) for f in files)


def test_a_new_store_with_the_default_settings_takes_a_few_mib(tmp_path):
    path = tmp_path / "store"
    with strata.open(path) as store:
        store.create_topic("t")
        store.put(strata.Message(topic="t", body=b"hello", keys=["k1"]))
        store.wait_dispatched()
        store.flush()
        used = allocated(path)
        assert used < 8 * MiB, f"{used:,} bytes allocated"
        assert [m.body for m in store.query("t", "k1")] == [b"hello"]
    assert allocated(path) < 8 * MiB


def test_a_growing_store_reserves_as_it_goes_and_reads_everything_back(tmp_path):
    path = tmp_path / "store"
    config = strata.StoreConfig(segment_size=256 * MiB, flush="async")
    body = bytes(range(256)) * 16                                    # 4 KiB
    n = 24 * MiB // len(body) + 1000                                # past several steps
    with strata.open(path, config=config) as store:
        store.create_topic("t", queues=2)
        for start in range(0, n, 1024):
            store.put_batch([strata.Message(topic="t", body=body[i % 251:] + i.to_bytes(4, "big"),
                                            keys=[f"k{i}"])
                             for i in range(start, min(n, start + 1024))])
        seg = store.log.segments.last()
        assert seg.reserved >= seg.wrote > 16 * RESERVE_MIN
        assert seg.reserved < seg.data_size                         # still sparse
        store.wait_dispatched()
        # what is reserved past the data: a quarter second of this writer's rate (issue 26;
        # its size is checked against a fake clock in the tests above), which on a fast,
        # quiet machine is more than this test's data
        last = store.log.segments.last()
        ahead = last.reserved - last.wrote
        assert 0 <= ahead <= segment.RESERVE_MAX
    with strata.open(path) as store:
        got = [m for q in range(2) for m in drain(store, "t", q, batch=1000)]
        assert len(got) == n
        assert sorted(int.from_bytes(m.body[-4:], "big") for m in got) == list(range(n))
        assert all(m.body[:-4] == body[int.from_bytes(m.body[-4:], "big") % 251:] for m in got)
        assert [m.body[-4:] for m in store.query("t", f"k{n - 1}")] == \
            [(n - 1).to_bytes(4, "big")]
    assert allocated(path) < 2 * n * len(body) + ahead + 64 * MiB


def test_without_sparse_files_the_whole_segment_is_reserved_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(segment, "SPARSE", False)
    path = tmp_path / "store"
    with strata.open(path, config=strata.StoreConfig(segment_size=64 * MiB,
                                                     preallocate=False)) as store:
        store.create_topic("t")
        store.put(strata.Message(topic="t", body=b"x"))
        assert store.log.segments.last().reserved == 64 * MiB
    assert allocated(path) > 64 * MiB


def _written_outside_reservations(file_ops, root: Path) -> list[str]:
    """Pages of segment files that hold bytes but were never reserved (fault layer)."""
    bad = []
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = Path(d) / f
            ranges = file_ops.allocated.get(p)
            if ranges is None or not (f.isdigit() and len(f) == 20):
                continue
            data = p.read_bytes()
            for page in range(0, len(data), 4096):
                if data[page:page + 4096].count(0) != len(data[page:page + 4096]) and \
                        not any(a <= page and page + 4096 <= b for a, b in ranges):
                    bad.append(f"{p}@{page}")
    return bad


def test_sparse_files_on_a_full_disk_refuse_puts_before_acknowledging(disk):
    """Segments (4 MiB) and consume-queue files (6 MB) larger than the first reservation: a
    put that needs blocks the disk does not have is refused, nothing is written into a hole
    (on tmpfs that would be SIGBUS), and everything acknowledged reads back."""
    cfg = config(segment_size=4 * MiB, consume_queue_units=300_000, preallocate=True)
    store = open_store(disk, cfg)
    store.create_topic("t", queues=2)
    acked: dict[int, tuple[str, int]] = {}
    seq = 0
    if disk.kind == "faults":
        for _ in range(1100):                          # past the first 1 MiB of the segment
            r = store.put(message(seq))
            acked[r.commitlog_offset] = ("t", seq)
            seq += 1
        store.flush()
        disk.fill()
    with pytest.raises(DiskFullError):
        for _ in range(100_000):
            rs = store.put_batch([message(seq + i) for i in range(16)])
            for i, r in enumerate(rs):
                acked[r.commitlog_offset] = ("t", seq + i)
            seq += 16
    # A refused batch leaves the log's end where it was. (Room can come back meanwhile: a
    # background reservation that failed gives its blocks back; then the batch is taken, and
    # must read back like every other acknowledged one.)
    for _ in range(1000):
        end = store.max_commitlog_offset()
        try:
            rs = store.put_batch([message(seq + i) for i in range(16)])
        except DiskFullError:
            assert store.max_commitlog_offset() == end
            break
        for i, r in enumerate(rs):
            acked[r.commitlog_offset] = ("t", seq + i)
        seq += 16
    else:
        pytest.fail("the full disk never refused a put again")
    assert_readable(store, acked)
    if disk.file_ops is not None:
        assert _written_outside_reservations(disk.file_ops, disk.path) == []
    store.close()
    with strata.open(disk.path, readonly=True) as ro:
        assert_readable(ro, acked)


class FakeClock:
    """A monotonic clock the test moves: the writer's rate is what the test says it is."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_write_rate_is_measured_per_window_and_a_burst_counts_at_once():
    from strata.files.segment_queue import RATE_WINDOW_S, WriteRate
    clock = FakeClock()
    rate = WriteRate(clock)
    assert rate.note(0) == 0.0
    end = 0
    for _ in range(20):                        # 1 MiB every 0.1 s: 10 MiB/s
        clock.now += 0.1
        end += MiB
        got = rate.note(end)
    assert got == pytest.approx(10 * MiB, rel=0.01)
    clock.now += 0.05                          # a burst: 64 MiB within 50 ms
    assert rate.note(end + 64 * MiB) >= 64 * MiB / (0.05 + RATE_WINDOW_S)


def _fill(store, mib: int, clock: FakeClock, seconds_per_mib: float) -> None:
    body = bytes(range(256)) * 16                                    # 4 KiB
    for i in range(mib):
        clock.now += seconds_per_mib
        store.put_batch([strata.Message(topic="t", body=body) for _ in range(256)])


def _commitlog_allocated(path: Path) -> int:
    return allocated(path / "commitlog")


def test_a_slow_writer_reserves_little_ahead_of_its_data(tmp_path):
    """Issue 26: the reservation ahead of the writer followed the data's size (doubling), so a
    266 MB log took 635 MB of disk. Sized to the write rate, a writer appending 1 MiB a second
    keeps its segment's disk use within a sixteenth of its data plus a step."""
    path = tmp_path / "store"
    clock = FakeClock()
    with strata.open(path, config=strata.StoreConfig(segment_size=256 * MiB)) as store:
        store.create_topic("t")
        store.log.segments.write_rate.clock = clock
        _fill(store, 40, clock, seconds_per_mib=1.0)
        seg = store.log.segments.last()
        wrote = seg.wrote
        assert wrote > 40 * MiB
        assert seg.ahead_requested <= wrote + RESERVE_MIN + 64 * 1024
    used = _commitlog_allocated(path)
    assert used <= wrote * 17 // 16 + 4 * MiB, (used, wrote)


def test_a_fast_writer_gets_a_long_stretch_reserved_ahead(tmp_path):
    """The same data written in a burst: the background keeps a quarter second of it ahead."""
    from strata.files.segment_queue import AHEAD_S
    path = tmp_path / "store"
    clock = FakeClock()
    with strata.open(path, config=strata.StoreConfig(segment_size=256 * MiB)) as store:
        store.create_topic("t")
        store.log.segments.write_rate.clock = clock
        _fill(store, 40, clock, seconds_per_mib=0.001)                # 1 GiB/s
        seg = store.log.segments.last()
        assert seg.ahead_requested >= seg.wrote + int(AHEAD_S * 512 * MiB)
