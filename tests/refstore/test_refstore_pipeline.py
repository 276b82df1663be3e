"""The write pipeline (issue 27): full buffers written to the OS without the store lock, and
fdatasync + confirms on the sync thread. A confirm must still follow the fdatasync of every
byte it covers and of the directory naming its file; a reader must never be sent to the file
for bytes the OS does not have yet."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from strata.errors import StrataError
from strata.files.io import FileOps
from strata.refstore import files, layout
from strata.testing.faults import RecordingFileOps, installed

from refstore_support import body, mid


class DurabilityLog(FileOps):
    """Notes, in order: each fdatasync with the file size it covered at least (taken before
    the call), each directory fsync with the names it made durable, each confirm."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.lock = threading.Lock()

    def fdatasync(self, path, fd: int) -> None:
        size = os.fstat(fd).st_size
        super().fdatasync(path, fd)
        with self.lock:
            self.events.append(("sync", os.path.basename(path), size))

    def fsync_dir(self, directory) -> None:
        names = set(os.listdir(directory))
        super().fsync_dir(directory)
        with self.lock:
            self.events.append(("dir", names))

    def confirm(self, ids) -> None:
        with self.lock:
            self.events.append(("confirm", list(ids)))


def test_every_confirm_follows_the_fdatasync_of_its_bytes_and_its_files_name(open_store):
    log = DurabilityLog()
    with installed(log):
        s = open_store(file_size_limit=64 * 1024, write_buffer_size=8 * 1024,
                       sync_interval=0.001, auto_gc=False)
        clients = [s.client(f"q{k}", on_disk=log.confirm) for k in range(2)]

        def writer(k: int) -> None:
            c = clients[k]
            for start in range(k * 100_000, k * 100_000 + 3000, 50):
                c.write_batch([(mid(i), body(i, 300)) for i in range(start, start + 50)])
            c.write(mid(k * 100_000 + 5000), b"one")             # the record-by-record path

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        s.sync()
        where = {}
        confirmed = 0
        for k, ev in enumerate(log.events):
            if ev[0] != "confirm":
                continue
            for m in ev[1]:
                confirmed += 1
                _ref, number, off, size = s.locate(m)
                name = layout.data_name(number)
                assert any(e[0] == "sync" and e[1] == name and e[2] >= off + size
                           for e in log.events[:k]), (m, name, off)
                assert any(e[0] == "dir" and name in e[1] for e in log.events[:k]), name
                where[number] = True
        assert confirmed == 2 * 3001
        assert len(where) > 10                  # the stream rolled through many files


def test_reads_are_served_from_a_sealed_buffer_while_it_is_written_without_the_lock(
        open_store, tmp_path, monkeypatch):
    entered = threading.Event()
    release = threading.Event()
    real = files.CurrentFile.write_sealed

    def held_write(self, sealed):
        entered.set()
        assert release.wait(30)
        real(self, sealed)

    monkeypatch.setattr(files.CurrentFile, "write_sealed", held_write)
    s = open_store(write_buffer_size=4096, sync_interval=60, auto_gc=False)
    c = s.client()
    batch = [(mid(i), body(i, 200)) for i in range(40)]       # > 4 KiB: one sealed buffer
    c.write_batch(batch)
    assert entered.wait(30)
    path = layout.data_path(str(tmp_path / "rs"), 0)
    out: dict = {}

    def meanwhile() -> None:   # needs the store lock: it must not be held by the write
        out["reads"] = [c.read(m) for m, _ in batch]
        other = s.client()
        other.write_batch([(mid(100 + i), body(i)) for i in range(3)])
        out["other"] = [other.read(mid(100 + i)) for i in range(3)]
        out["file"] = os.path.getsize(path)

    t = threading.Thread(target=meanwhile)
    t.start()
    t.join(30)
    release.set()
    assert not t.is_alive(), "a read or a write waited for the store lock during the pwrite"
    assert out["reads"] == [b for _, b in batch]
    assert out["other"] == [body(i) for i in range(3)]
    assert out["file"] == 0                   # the bytes were not in the file yet
    s.sync()
    assert os.path.getsize(path) == sum(len(b) + 25 for _, b in batch) + 3 * (100 + 25)
    assert [c.read(m) for m, _ in batch] == [b for _, b in batch]


def test_a_failed_fdatasync_confirms_nothing_and_stops_the_store(open_store):
    ops = RecordingFileOps(fail={"fdatasync": (1, OSError(errno.EIO, "I/O error"))})
    confirmed: list = []
    with installed(ops):
        s = open_store(sync_interval=60)
        c = s.client(on_disk=confirmed.extend)
        c.write_batch([(mid(i), body(i)) for i in range(100)])
        with pytest.raises(StrataError, match="I/O error"):
            s.sync()
        assert confirmed == []
        with pytest.raises(StrataError, match="stopped after a failure"):
            c.write(mid(1000), b"x")
        s.crash()


def test_a_roll_nobody_waits_on_syncs_its_rolled_file_once_and_not_the_new_one(open_store):
    """A write stream without confirms rolls through many files: each rolled file gets one
    fdatasync (as it closes), the file it rolled to none until a sync someone waits on; the
    bytes of every file are still durable at that sync (one fdatasync less per roll, none
    lost)."""
    log = DurabilityLog()
    with installed(log):
        s = open_store(file_size_limit=64 * 1024, write_buffer_size=8 * 1024,
                       sync_interval=60, auto_gc=False)
        c = s.client()                              # no on_disk: nobody to confirm to
        for start in range(0, 3000, 50):
            c.write_batch([(mid(i), body(i, 300)) for i in range(start, start + 50)])
        s.sync()
        syncs = [e for e in log.events if e[0] == "sync"]
        names = [e[1] for e in syncs]
        last = layout.data_name(s.locate(mid(2999))[1])
        rolled = sorted(set(names) - {last})
        assert len(rolled) > 10                     # the stream rolled through many files
        assert all(names.count(n) == 1 for n in rolled), names
        # each rolled file's one fdatasync covered all of it
        for _kind, name, size in syncs:
            if name != last:
                assert size == os.path.getsize(os.path.join(s.directory, name))
        assert names[-1] == last and names.count(last) == 1    # only the waited-on sync
        assert syncs[-1][2] == os.path.getsize(os.path.join(s.directory, last))
        s.close()
