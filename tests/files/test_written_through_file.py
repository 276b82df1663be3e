"""The commit log's large appends go into the file with ``pwrite`` (``MappedSegment.write_at``)
while readers keep reading the mapping; a written segment's mapping has no read-ahead until it
is sealed (docs/kafka.md, Performance: a fault past the last record read ahead megabytes of
never-written blocks)."""

from __future__ import annotations

import os

import numpy as np

import strata
from strata.files import io as files_io
from strata.files.io import FileOps
from strata.files.segment import MappedSegment
from strata.format.segment import KIND_COMMIT_LOG, KIND_CONSUME_QUEUE
from strata.store.config import StoreConfig


def _random_read_advised(mm) -> bool:
    """Whether the kernel lists the mapping ``mm`` with the random-read advice (smaps 'rr')."""
    start = np.frombuffer(mm, np.uint8).ctypes.data
    lines = open("/proc/self/smaps").read().splitlines()
    for i, line in enumerate(lines):
        lo, _, rest = line.partition("-")
        if " " in rest and int(lo, 16) <= start < int(rest.split()[0], 16):
            for flags in lines[i + 1:]:
                if flags.startswith("VmFlags:"):
                    return " rr" in flags
    raise AssertionError("mapping not found in /proc/self/smaps")


def test_write_at_is_seen_through_the_mapping(tmp_path):
    seg = MappedSegment.create(tmp_path / "seg", KIND_COMMIT_LOG, 0, 1 << 20)
    try:
        seg.reserve(10_000)
        data = bytes(range(256)) * 30
        seg.write_at(1234, data)
        assert bytes(seg.view(1234, 1234 + len(data))) == data
        assert bytes(seg.view(1230, 1234)) == bytes(4)
    finally:
        seg.close()


def test_pwrite_finishes_a_short_write(tmp_path, monkeypatch):
    real = os.pwrite
    calls = []

    def short(fd, data, offset):           # the kernel may write less than asked
        calls.append(len(data))
        return real(fd, bytes(data)[:7], offset)

    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        monkeypatch.setattr(files_io.os, "pwrite", short)
        FileOps().pwrite(path, fd, b"0123456789abcdefghij", 3)
        monkeypatch.undo()
        assert os.pread(fd, 23, 0) == b"\0\0\0" + b"0123456789abcdefghij"
        assert calls == [20, 13, 6]
    finally:
        os.close(fd)


def test_a_written_commit_log_segment_has_no_read_ahead_until_sealed(tmp_path):
    log = MappedSegment.create(tmp_path / "log", KIND_COMMIT_LOG, 0, 1 << 20)
    cq = MappedSegment.create(tmp_path / "cq", KIND_CONSUME_QUEUE, 0, 1 << 20)
    try:
        assert _random_read_advised(log.mm)
        assert not _random_read_advised(cq.mm)      # written through its mapping: unchanged
        log.seal()
        assert not _random_read_advised(log.mm)
    finally:
        log.close()
        cq.close()


def test_columns_put_through_the_file_read_back_and_survive_reopen(tmp_path):
    """A large column put (the pwrite path) reads back, CRCs checked, before and after a
    reopen; the blob handed in is finished in place, so a read-only one is copied first."""
    n = 500
    bodies = [b"body-%04d" % i * 10 for i in range(n)]
    with strata.open(tmp_path / "s", StoreConfig(prefault=False)) as store:
        store.put_columns("t", 0, bodies, keys=[f"k{i}" for i in range(n)])
        store.put_columns("t", 0, bodies[:100])
        got = [m for m in store.scan(0, verify_crc=True) if m.topic == "t"]
        assert [m.body for m in got] == bodies + bodies[:100]
    with strata.open(tmp_path / "s", StoreConfig(prefault=False)) as store:
        got = [m for m in store.scan(0, verify_crc=True) if m.topic == "t"]
        assert [m.body for m in got] == bodies + bodies[:100]
        assert [m.keys for m in got[:3]] == [("k0",), ("k1",), ("k2",)]
