"""The write-back hint (issue 27): every few write buffers' worth of bytes the OS has, the sync
thread asks the kernel to start writing them (``FileOps.start_writeback``). It is a hint:
a confirm still waits for the fdatasync covering its bytes, and a crash that loses every byte
no fdatasync covered loses no confirmed message."""

from __future__ import annotations

import os
import threading

from strata.files.io import PAGE, FileOps
from strata.refstore import files, layout
from strata.testing.faults import installed

from refstore_support import Confirms, body, mid

BUFFER = 8 * 1024
STRETCH = files.WRITEBACK_BUFFERS * BUFFER


class HintLog(FileOps):
    """Notes each write-back hint (file, offset, length, the file's size then, the thread)
    and each fdatasync (file, size covered at least); ``hold`` blocks fdatasyncs until set."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.lock = threading.Lock()
        self.hinted = threading.Event()
        self.in_sync = threading.Event()
        self.hold = threading.Event()
        self.hold.set()

    def start_writeback(self, path, fd: int, offset: int, length: int) -> bool:
        size = os.fstat(fd).st_size
        started = super().start_writeback(path, fd, offset, length)
        with self.lock:
            self.events.append(("hint", os.path.basename(path), offset, length, size,
                                threading.current_thread().name, started))
        self.hinted.set()
        return started

    def fdatasync(self, path, fd: int) -> None:
        size = os.fstat(fd).st_size
        self.in_sync.set()
        assert self.hold.wait(30)
        super().fdatasync(path, fd)
        with self.lock:
            self.events.append(("sync", os.path.basename(path), size))

    def hints(self) -> list[tuple]:
        with self.lock:
            return [e for e in self.events if e[0] == "hint"]


def test_write_back_is_started_behind_the_writer_in_whole_page_stretches(open_store):
    log = HintLog()
    with installed(log):
        s = open_store(file_size_limit=1 << 20, write_buffer_size=BUFFER, sync_interval=60,
                       auto_gc=False)
        c = s.client()
        for start in range(0, 6000, 100):          # ~2 MiB through files of 1 MiB
            c.write_batch([(mid(i), body(i, 300)) for i in range(start, start + 100)])
        s.sync()
        hints = log.hints()
    assert len(hints) > 20
    by_file: dict[str, int] = {}
    for _kind, name, offset, length, size, thread, started in hints:
        assert thread == "refstore-sync"           # not on the server thread
        assert started                             # sync_file_range works on this file
        assert offset % PAGE == 0 and (offset + length) % PAGE == 0
        assert offset + length <= size             # only bytes the OS already had
        assert length >= STRETCH
        assert offset == by_file.get(name, 0)      # each stretch follows the last one
        by_file[name] = offset + length
    assert len(by_file) >= 2                       # it goes on in the file rolled to
    for name, end in by_file.items():              # and stays behind the writer
        assert end <= os.path.getsize(os.path.join(s.directory, name))
    assert [c.read(mid(i)) for i in range(0, 6000, 7)] == [body(i, 300)
                                                           for i in range(0, 6000, 7)]


def test_a_confirm_waits_for_the_fdatasync_not_for_the_hint(open_store):
    log = HintLog()
    log.hold.clear()                               # every fdatasync blocks until released
    confirmed = Confirms()
    with installed(log):
        s = open_store(file_size_limit=16 << 20, write_buffer_size=BUFFER,
                       sync_interval=0.001, auto_gc=False)
        c = s.client(on_disk=confirmed)
        ids = [mid(i) for i in range(400)]
        c.write_batch([(m, body(i, 300)) for i, m in enumerate(ids)])   # > one stretch
        assert log.hinted.wait(30)
        assert log.in_sync.wait(30)                # the sync thread is inside the fdatasync:
        assert confirmed.set() == set()            # the hint it ran before confirmed nothing
        log.hold.set()
        s.sync()
    assert confirmed.set() == set(ids)
    syncs = [e for e in log.events if e[0] == "sync"]
    last_hint = max(k for k, e in enumerate(log.events) if e[0] == "hint")
    assert any(e[0] == "sync" for e in log.events[last_hint:])
    end = max(off + size for _ref, _n, off, size in (s.locate(m) for m in ids))
    assert syncs[-1][2] >= end


class SyncedSizes(FileOps):
    """Remembers how much of each data file its fdatasyncs covered (the size at the call)."""

    def __init__(self) -> None:
        self.synced: dict[str, int] = {}
        self.lock = threading.Lock()

    def fdatasync(self, path, fd: int) -> None:
        size = os.fstat(fd).st_size
        super().fdatasync(path, fd)
        with self.lock:
            name = os.path.basename(path)
            self.synced[name] = max(self.synced.get(name, 0), size)


def test_a_crash_losing_every_byte_no_fdatasync_covered_loses_no_confirmed_message(
        open_store, tmp_path):
    ops = SyncedSizes()
    confirmed = Confirms()
    with installed(ops):
        s = open_store(file_size_limit=256 * 1024, write_buffer_size=BUFFER,
                       sync_interval=0.001, auto_gc=False)
        later = threading.Event()

        def on_disk(ids) -> None:
            confirmed(ids)
            if max(ids) >= mid(2000):
                later.set()

        c = s.client(on_disk=on_disk)
        for start in range(0, 4000, 100):
            c.write_batch([(mid(i), body(i, 300)) for i in range(start, start + 100)])
            if start == 1900:
                s.sync()                           # the first half confirmed
        assert later.wait(30)                      # and some of the second half
        s.crash()                                  # whatever was not confirmed yet stays so
        with ops.lock:
            synced = dict(ops.synced)
    directory = str(tmp_path / "rs")
    lost = 0
    for name in os.listdir(directory):             # the page cache is gone: bytes whose
        if not name.endswith(layout.DATA_SUFFIX):  # write-back was only started (or never)
            continue                               # are zeros now
        path = os.path.join(directory, name)
        keep = synced.get(name, 0)
        size = os.path.getsize(path)
        if size > keep:
            with open(path, "r+b") as f:
                f.seek(keep)
                f.write(bytes(size - keep))
            lost += size - keep
    done = confirmed.set()
    s2 = open_store(file_size_limit=256 * 1024, recover_refs=((m, 1) for m in done))
    c2 = s2.client()
    for m in done:
        i = int.from_bytes(m, "big")
        assert c2.read(m) == body(i, 300)
    assert s2.recovery.dropped_refs == 0


def test_start_writeback_is_a_hint_that_never_raises(tmp_path):
    ops = FileOps()
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x" * (3 * PAGE))
        assert ops.start_writeback(path, fd, 0, 3 * PAGE) is True
        assert ops.start_writeback(path, fd, 0, 0) is False
        assert os.pread(fd, 3 * PAGE, 0) == b"x" * (3 * PAGE)
    finally:
        os.close(fd)
    r, w = os.pipe()                  # no write-back to start on a pipe: False, no error
    try:
        assert ops.start_writeback(path, w, 0, PAGE) is False
    finally:
        os.close(r)
        os.close(w)


def _allocated(path) -> int:
    return os.stat(path).st_blocks * 512


def test_the_current_file_reserves_blocks_ahead_of_its_bytes_and_gives_back_the_rest(
        open_store, tmp_path):
    limit = 512 * 1024
    s = open_store(file_size_limit=limit, write_buffer_size=BUFFER, sync_interval=60,
                   auto_gc=False)
    c = s.client()
    first = layout.data_path(s.directory, 0)
    s.sync()
    assert _allocated(first) == 0                        # nothing written: no blocks taken
    c.write_batch([(mid(i), body(i, 300)) for i in range(100)])
    s.sync()
    size = os.path.getsize(first)
    assert size == 100 * 325                             # the size is what was written
    ahead = _allocated(first) - size                     # blocks reserved past the end
    assert PAGE <= ahead <= files.RESERVE_BUFFERS * BUFFER + PAGE
    for start in range(100, 4000, 100):                  # roll through a few files
        c.write_batch([(mid(i), body(i, 300)) for i in range(start, start + 100)])
    s.sync()
    numbers = sorted({s.locate(mid(i))[1] for i in range(4000)})
    assert len(numbers) >= 3
    for n in numbers[:-1]:                               # rolled: only what it holds
        path = layout.data_path(s.directory, n)
        assert _allocated(path) < os.path.getsize(path) + 2 * PAGE
    newest = layout.data_path(s.directory, numbers[-1])
    assert os.path.getsize(newest) + PAGE <= _allocated(newest) <= limit
    s.close()
    assert _allocated(newest) < os.path.getsize(newest) + 2 * PAGE
    s2 = open_store(file_size_limit=limit, write_buffer_size=BUFFER, auto_gc=False)
    c2 = s2.client()                                     # reopened: nothing read past the end,
    assert [c2.read(mid(i)) for i in range(0, 4000, 9)] == [body(i, 300)  # and blocks are
                                                            for i in range(0, 4000, 9)]
    assert _allocated(newest) < os.path.getsize(newest) + 2 * PAGE   # reserved once written
    c2.write_batch([(mid(5000 + i), body(i, 300)) for i in range(50)])
    s2.sync()
    assert os.path.getsize(newest) + PAGE <= _allocated(newest) <= limit
    assert [c2.read(mid(5000 + i)) for i in range(50)] == [body(i, 300) for i in range(50)]


def test_reserve_beyond_end_keeps_the_size_and_never_raises(tmp_path):
    ops = FileOps()
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"abc")
        assert ops.reserve_beyond_end(path, fd, 3, 64 * PAGE) is True
        assert os.fstat(fd).st_size == 3 and _allocated(path) >= 64 * PAGE
        assert ops.reserve_beyond_end(path, fd, 3, 0) is False
    finally:
        os.close(fd)
    r, w = os.pipe()
    try:
        assert ops.reserve_beyond_end(path, w, 0, PAGE) is False
    finally:
        os.close(r)
        os.close(w)
