"""A full disk: every write that has no room is refused with DiskFullError (an OSError too)
before anything is acknowledged; close() still releases the store; the store opens again on
the full disk (reads, delete_topic and retention work, puts are refused) and, once space is
back, takes puts again with everything acknowledged readable.

The scenario runs on a real full file system (a 16 MiB tmpfs; the tests run as root) and on the
fault-injection file layer, which simulates one where mounting is not possible."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import strata
from strata.errors import DiskFullError
from strata.store.message_store import MessageStore
from strata.store.topics import TOPICS_FILE
from strata.testing.faults import FaultInjectingFileOps, installed

from store_helpers import drain
from support import body_for, small_store_config


def config(**kw) -> strata.StoreConfig:
    kw.setdefault("retention_check_interval_ms", 3_600_000)   # passes only when the test asks
    kw.setdefault("preallocate", False)
    return small_store_config(**kw)


class FaultDisk:
    """The fault-injection layer's simulated disk."""

    kind = "faults"

    def __init__(self, root: Path) -> None:
        self.path = root / "store"
        self.file_ops = FaultInjectingFileOps()

    def fill(self) -> None:
        self.file_ops.fill_disk(0)

    def free(self) -> None:
        self.file_ops.free_disk()

    def usage(self) -> float:
        return 0.5 if self.file_ops.space_left is None else 1.0

    def close(self) -> None:
        pass


class TmpfsDisk:
    """A real 16 MiB file system; ``fill`` eats what the store left with a ballast file and
    ``free`` grows the file system to 64 MiB."""

    kind = "tmpfs"

    def __init__(self, root: Path) -> None:
        self.mount = root / "mnt"
        self.mount.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(self.mount)],
                       check=True, capture_output=True)
        self.path = self.mount / "store"
        self.file_ops = None

    def fill(self) -> None:
        try:
            with open(self.mount / "ballast", "ab") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC

    def free(self) -> None:
        subprocess.run(["mount", "-o", "remount,size=64m", str(self.mount)], check=True)

    def usage(self) -> float:
        st = os.statvfs(self.mount)
        return 1 - st.f_bavail / st.f_blocks

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.mount)], check=False)


def _can_mount(tmp: Path) -> bool:
    probe = tmp / f"probe-{uuid.uuid4().hex}"
    probe.mkdir()
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)],
                        capture_output=True).returncode == 0
    if ok:
        subprocess.run(["umount", str(probe)], check=False)
    return ok


@pytest.fixture(params=["tmpfs", "faults"])
def disk(request, tmp_path):
    if request.param == "tmpfs" and _can_mount(tmp_path):
        d = TmpfsDisk(tmp_path)
    else:   # no mount here: the same scenario on the simulated disk, never skipped
        d = FaultDisk(tmp_path)
    yield d
    d.close()


def open_store(disk, cfg=None) -> MessageStore:
    store = MessageStore(disk.path, cfg or config(), file_ops=disk.file_ops)
    store.retention.disk_usage = disk.usage
    return store


def message(seq: int, topic: str = "t") -> strata.Message:
    return strata.Message(topic, body_for(seq, 900), keys=[f"k{seq}"])


def assert_readable(store, acked: dict[int, tuple[str, int]]) -> None:
    """Every acknowledged message (commit-log offset -> (topic, seq)) is there, intact."""
    store.wait_dispatched()
    for off, (topic, seq) in acked.items():
        m = store.read_at(off)
        assert m is not None and m.body == body_for(seq, 900) and m.topic == topic
    for topic in {t for t, _ in acked.values()}:
        got = [m.commitlog_offset for q in range(store.queue_count(topic))
               for m in drain(store, topic, q, batch=1000)]
        assert sorted(got) == sorted(o for o, (t, _) in acked.items() if t == topic)


def test_a_full_disk_refuses_before_acknowledging_and_the_store_finds_its_way_out(disk):
    store = open_store(disk)
    store.create_topic("t", queues=2)
    acked: dict[int, tuple[str, int]] = {}
    for seq in range(20):                                 # a topic to delete later
        r = store.put(message(seq, "gone"))
        acked[r.commitlog_offset] = ("gone", seq)
    seq = 100
    if disk.kind == "faults":
        for _ in range(30):
            r = store.put(message(seq))
            acked[r.commitlog_offset] = ("t", seq)
            seq += 1
        disk.fill()
    with pytest.raises(DiskFullError) as ei:              # a real disk fills up by itself
        for _ in range(100_000):
            r = store.put(message(seq))
            acked[r.commitlog_offset] = ("t", seq)
            seq += 1
    assert isinstance(ei.value, OSError) and ei.value.errno == errno.ENOSPC
    disk.fill()                                           # and not a page left
    end = store.max_commitlog_offset()
    topics = (disk.path / TOPICS_FILE).read_bytes()

    # every write refuses, by name, before anything is acknowledged
    with pytest.raises(DiskFullError):
        store.create_topic("new")
    with pytest.raises(DiskFullError):
        store.put(message(0, "new2"))                     # its topic entry, its queue file
    with pytest.raises(DiskFullError):
        store.put(message(0, "t"))
    assert store.max_commitlog_offset() == end
    assert store.topics() == ["gone", "t"]
    assert (disk.path / TOPICS_FILE).read_bytes() == topics
    assert_readable(store, acked)
    store.close()                                         # logs, never raises
    assert store.closed and not store._lock.held

    # the full disk opens again: reads, delete_topic and retention work, puts are refused
    with strata.open(disk.path, readonly=True) as ro:
        assert_readable(ro, acked)
    disk.fill()                        # with no writer running, the disk is exactly full
    store = open_store(disk)
    if not store.life.disk_full:
        # The open found room of its own: a key-index file made after the last checkpoint is
        # cut by recovery (its blocks freed) and rebuilt by replay from the reserved spare.
        # Full again, a retention pass must refuse puts as the open would have.
        assert store.recovery_report.redispatched_records > 0
        disk.fill()
        store.retention.run_once()
    assert store.life.disk_full
    with pytest.raises(DiskFullError, match="disk"):
        store.put(message(1, "t"))
    assert_readable(store, acked)
    assert store.delete_topic("gone")
    assert not (disk.path / "consumequeue" / "gone").exists()
    acked = {o: v for o, v in acked.items() if v[0] != "gone"}
    assert_readable(store, acked)

    # space comes back: the next retention pass finishes the open and takes puts again
    disk.free()
    store.retention.run_once()
    assert not store.life.disk_full and store.abort_marker.exists()
    for i in range(5):
        r = store.put(message(seq + i, "new3"))
        acked[r.commitlog_offset] = ("new3", seq + i)
    store.close()
    with strata.open(disk.path) if disk.file_ops is None else \
            MessageStore(disk.path, file_ops=disk.file_ops) as store:
        assert store.config.segment_size == config().segment_size
        assert store.topics() == ["new3", "t"]
        assert_readable(store, acked)


def test_a_put_to_a_new_queue_is_refused_when_its_file_cannot_be_made(tmp_path):
    """The consume-queue file a put needs is made before the put is acknowledged (it used to be
    made by dispatch, after the put had been acknowledged)."""
    fops = FaultInjectingFileOps()
    store = MessageStore(tmp_path / "s", config(), file_ops=fops)
    store.create_topic("t", queues=4)
    first = store.put(strata.Message("t", b"a", queue_id=0))
    fops.fill_disk(0)
    end = store.max_commitlog_offset()
    with pytest.raises(DiskFullError, match="consumequeue"):
        store.put(strata.Message("t", b"b", queue_id=3))
    assert store.max_commitlog_offset() == end
    assert store.put(strata.Message("t", b"c", queue_id=0)).ok   # its file exists
    fops.free_disk()
    r = store.put(strata.Message("t", b"b", queue_id=3))
    store.close()
    with strata.open(tmp_path / "s") as store:
        assert [m.body for m in store.get("t", 0, 0, 10).messages] == [b"a", b"c"]
        assert [m.commitlog_offset for m in store.get("t", 3, 0, 10).messages] == \
            [r.commitlog_offset]
        assert store.read_at(first.commitlog_offset).body == b"a"


def test_a_failed_topic_write_leaves_the_table_as_it_was(tmp_path):
    fops = FaultInjectingFileOps()
    with MessageStore(tmp_path / "s", config(), file_ops=fops) as store:
        store.create_topic("a", queues=2)
        fops.fill_disk(0)
        with pytest.raises(DiskFullError, match="topics.json"):
            store.create_topic("b", queues=3)
        with pytest.raises(DiskFullError):
            store.set_queue_count("a", 4)
        assert store.topics() == ["a"] and store.queue_count("a") == 2
        assert not list((tmp_path / "s" / "config").glob("*.tmp"))
        fops.free_disk()
        assert store.create_topic("b", queues=3)
    with strata.open(tmp_path / "s", readonly=True) as store:
        assert store.topics() == ["a", "b"] and store.queue_count("a") == 2


def test_the_cli_says_disk_full_in_one_line(tmp_path, monkeypatch):
    """``strata put`` on a full disk: one error line naming DiskFullError, exit 1, no
    traceback (the store's warnings are logged before it)."""
    if _can_mount(tmp_path):
        disk = TmpfsDisk(tmp_path)
        try:
            open_store(disk).close()
            disk.fill()
            r = subprocess.run([sys.executable, "-m", "strata.cli.main", "put", str(disk.path),
                                "t", "--body", "x"], capture_output=True, text=True, timeout=120)
        finally:
            disk.close()
        code, stderr = r.returncode, r.stderr
    else:   # the simulated disk, in process (a child process cannot share it)
        from click.testing import CliRunner

        from strata.cli.main import cli
        disk = FaultDisk(tmp_path)
        open_store(disk).close()
        disk.fill()
        with installed(disk.file_ops):   # the store the command opens uses the seam's ops
            res = CliRunner().invoke(cli, ["put", str(disk.path), "t", "--body", "x"])
        code, stderr = res.exit_code, res.output
        assert res.exception is None or isinstance(res.exception, SystemExit)
    assert code == 1 and "Traceback" not in stderr, stderr
    errors = [ln for ln in stderr.splitlines() if ln.startswith("Error:")]  # (and log warnings)
    assert len(errors) == 1 and "DiskFullError" in errors[0] and "full" in errors[0], stderr


def test_dispatch_never_reads_a_batch_a_full_disk_takes_back(tmp_path):
    """A batch that fills its segment and then finds no room for the next one is taken back;
    the dispatcher, running at that moment, must not have indexed (or skipped past) its
    records, or the puts acknowledged after it are never served."""
    class DispatchInTheWindow(FaultInjectingFileOps):
        store = None

        def allocate(self, fd, size, path):
            if self.space_left is not None and self.store is not None and \
                    Path(path).parent.name == "commitlog":   # the roll of the log
                self.store._reput.catch_up()   # the dispatcher runs just then
            super().allocate(fd, size, path)

    fops = DispatchInTheWindow()
    store = MessageStore(tmp_path / "s", config(), file_ops=fops)
    fops.store = store
    store.create_topic("t", queues=2)
    acked = {}
    seq = 0
    while store.max_commitlog_offset() < config().segment_size // 2:
        r = store.put(message(seq))
        acked[r.commitlog_offset] = ("t", seq)
        seq += 1
    fops.fill_disk(0)
    with pytest.raises(DiskFullError):       # the batch runs past the segment's end
        store.put_batch([message(seq + i) for i in range(80)])
    fops.free_disk()
    for i in range(100, 110):                # acknowledged after the refused batch
        r = store.put(message(seq + i))
        acked[r.commitlog_offset] = ("t", seq + i)
    assert_readable(store, acked)
    store.close()
    with strata.open(tmp_path / "s") as store:
        assert_readable(store, acked)


def test_a_put_whose_keys_may_need_a_new_index_file_is_refused_without_room(tmp_path):
    """The key index keeps its next file's space reserved (index/next.spare): when that
    reservation finds no room, the put is refused, and every acknowledged message stays
    reachable by key (dispatch used to fail to make the file after the acknowledgement). One
    spare covers one roll: here, with 16-entry files, a producer that waits for dispatch; with
    the default 20-million-entry files, any dispatch lag that back-pressure allows."""
    import strata.index.key_index as kx
    cfg = config(index_slots=8, index_entries=16)
    if _can_mount(tmp_path):
        disk = TmpfsDisk(tmp_path)
        seam = contextlib.nullcontext()
    else:   # no mount: the key index's fallocate finds the simulated disk full (the seam)
        disk = FaultDisk(tmp_path)
        seam = installed(disk.file_ops)
    try:
        with seam:
            store = open_store(disk, cfg)
            acked = {}
            for seq in range(8):
                acked[seq] = store.put(message(seq)).commitlog_offset
                assert store.wait_dispatched(10)
            assert (disk.path / "index" / kx.SPARE_NAME).exists()   # made by puts 1..
            disk.fill()
            refused = 0
            for seq in range(8, 60):   # one at a time: the spare covers the next roll
                try:
                    acked[seq] = store.put(message(seq)).commitlog_offset
                    assert store.wait_dispatched(10)
                except DiskFullError as exc:
                    assert "key index" in str(exc)
                    refused += 1
                    break
            assert refused == 1
            assert store.wait_dispatched(10)
            for seq, off in acked.items():
                assert [m.commitlog_offset for m in store.query("t", f"k{seq}")] == [off]
            store.close()
    finally:
        disk.close()


def test_the_lock_opens_on_a_full_disk_without_its_pid(tmp_path, monkeypatch):
    """The pid in the lock file only informs; with no room for it the store still opens (a
    raw OSError from the lock file used to stop the open)."""
    import strata.files.lock as lock_mod
    with strata.open(tmp_path / "s", config()) as store:
        store.put(message(1))

    def no_room(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(lock_mod.os, "pwrite", no_room)
    with strata.open(tmp_path / "s") as store:
        assert (tmp_path / "s" / "lock").read_bytes() == b""   # no stale pid either
        assert store.read_at(0).body == body_for(1, 900)
        with pytest.raises(strata.errors.StoreLockedError):
            strata.open(tmp_path / "s")
