"""The embedded API's contract: bad input is refused with a clear error and changes nothing;
one writer per directory; read-only openers (other processes too) see only confirmed data;
lifetime (context manager, use after close); sync flush timeout and group commit."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import strata
from strata.errors import (InvalidConfigError, InvalidInputError, MessageTooLargeError,
                           ReadOnlyStoreError,
                           StoreClosedError, StoreLockedError, StoreNotFoundError, StrataError)
from strata.testing.faults import FaultInjectingFileOps
from strata.files.io import FileOps
from strata.store.message_store import MessageStore

from support import body_for, make_message, small_store_config

TESTS_DIR = Path(__file__).resolve().parents[1]
M = strata.Message
# what small_store_config() sets, for read-only openers in other processes
SMALL = dict(segment_size=64 * 1024, prefault=False, consume_queue_units=4096,
             index_slots=1024, index_entries=8192)


def snapshot(store_dir: Path) -> dict[str, bytes]:
    """The bytes of every commit-log segment and of the store's configuration files (not of
    the next segment being prepared in the background)."""
    out = {}
    for sub in ("commitlog", "config"):
        d = store_dir / sub
        if d.is_dir():
            for p in sorted(d.rglob("*")):
                if p.is_file() and not p.name.endswith((".alloc", ".tmp")):
                    out[str(p.relative_to(store_dir))] = p.read_bytes()
    return out


# --------------------------------------------------------------------------- bad input

BAD_PUTS = {
    # topic names
    "topic ../x": (lambda: M("../x", b"x"), "topic"),
    "topic a/b": (lambda: M("a/b", b"x"), "topic"),
    "topic empty": (lambda: M("", b"x"), "topic"),
    "topic 128 chars": (lambda: M("a" * 128, b"x"), "128"),
    "topic 200 chars": (lambda: M("b" * 200, b"x"), "200"),
    "topic with space": (lambda: M("a b", b"x"), "topic"),
    "topic None": (lambda: M(None, b"x"), "topic must be a str"),
    "topic bytes": (lambda: M(b"orders", b"x"), "topic must be a str"),
    "topic int": (lambda: M(7, b"x"), "topic must be a str"),
    # bodies
    "body above max_body_size": (lambda: M("t", bytes(1001)), "max_body_size"),
    "bytearray body above max": (lambda: M("t", bytearray(1001)), "max_body_size"),
    "body str": (lambda: M("t", "text"), "bytes"),
    "body None": (lambda: M("t", None), "bytes"),
    "body int": (lambda: M("t", 5), "bytes"),
    # properties, keys, tags
    "properties too large": (lambda: M("t", b"x", properties={"p": "v" * 40_000}), "32767"),
    "many properties too large": (
        lambda: M("t", b"x", properties={f"p{i}": "v" * 100 for i in range(400)}), "32767"),
    "reserved property KEYS": (lambda: M("t", b"x", properties={"KEYS": "k"}), "reserved"),
    "reserved property TAGS": (lambda: M("t", b"x", properties={"TAGS": "t"}), "reserved"),
    "property value not str": (lambda: M("t", b"x", properties={"a": 1}), "'a'"),
    "property name empty": (lambda: M("t", b"x", properties={"": "v"}), "property name"),
    "properties not a mapping": (lambda: M("t", b"x", properties=[("a", "b")]), "mapping"),
    "key empty": (lambda: M("t", b"x", keys=[""]), "keys"),
    "keys not iterable": (lambda: M("t", b"x", keys=5), "keys"),
    "key lone surrogate": (lambda: M("t", b"x", keys=["\ud800"]), "UTF-8"),
    "tags not str": (lambda: M("t", b"x", tags=5), "tags"),
    # queue ids
    "queue_id negative": (lambda: M("t", b"x", queue_id=-1), "queue_id"),
    "queue_id str": (lambda: M("t", b"x", queue_id="1"), "queue_id"),
    "queue_id float": (lambda: M("t", b"x", queue_id=1.5), "queue_id"),
    "queue_id bool": (lambda: M("t", b"x", queue_id=True), "queue_id"),
    "queue_id beyond queues": (lambda: M("t", b"x", queue_id=8), "queue_id 8"),
    "queue_id beyond queues, new topic": (lambda: M("fresh", b"x", queue_id=99), "queue_id 99"),
    # other fields
    "flag beyond i32": (lambda: M("t", b"x", flag=2 ** 40), "flag"),
    "born_timestamp negative": (lambda: M("t", b"x", born_timestamp=-5), "born_timestamp"),
    "born_timestamp str": (lambda: M("t", b"x", born_timestamp="now"), "born_timestamp"),
    "born_host not an ip": (lambda: M("t", b"x", born_host=("nope", 1)), "host"),
    "born_host port": (lambda: M("t", b"x", born_host=("10.0.0.1", 70000)), "port"),
    "born_host str": (lambda: M("t", b"x", born_host="10.0.0.1"), "host"),
    "born_host list": (lambda: M("t", b"x", born_host=["10.0.0.1", 5]), "host"),
    "not a Message": (lambda: "hello", "Message"),
}


@pytest.fixture
def api_store(tmp_store_dir):
    """A writer with one message in topic ``t`` (8 queues) and max_body_size 1000."""
    store = strata.open(tmp_store_dir, small_store_config(max_body_size=1000))
    store.put(make_message(0, size=10))
    store.flush()
    yield store
    store.close()


@pytest.mark.parametrize("case", list(BAD_PUTS))
def test_bad_input_refused_and_changes_nothing(api_store, tmp_store_dir, case):
    make, words = BAD_PUTS[case]
    before = snapshot(tmp_store_dir)
    end = api_store.max_commitlog_offset()
    for how in ("put", "put_batch"):
        with pytest.raises(StrataError) as ei:
            msg = make()
            if how == "put":
                api_store.put(msg)
            else:  # valid messages before the bad one are not written either
                api_store.put_batch([make_message(1, topic="other"), make_message(2), msg])
        assert isinstance(ei.value, ValueError), repr(ei.value)
        assert words in str(ei.value), str(ei.value)
        assert api_store.max_commitlog_offset() == end
    api_store.flush()
    assert snapshot(tmp_store_dir) == before
    # the store still works
    r = api_store.put(make_message(3))
    assert r.ok and api_store.read_at(r.commitlog_offset).body == body_for(3)
    assert [m.body for m in api_store.scan()] == [body_for(0, 10), body_for(3)]


@pytest.mark.parametrize("kw,field", [
    (dict(flush="fast"), "flush"),
    (dict(flush=None), "flush"),
    (dict(segment_size=1000), "segment_size"),
    (dict(segment_size=65536 + 100), "segment_size"),
    (dict(segment_size="1G"), "segment_size"),
    (dict(segment_size=True), "segment_size"),
    (dict(max_body_size=-1), "max_body_size"),
    (dict(max_body_size="4M"), "max_body_size"),
    # issue 22.6: a body no segment can hold is refused when the config is made
    (dict(segment_size=65536, max_body_size=65536), "max_body_size"),
    (dict(max_body_size=(1 << 30) + 1), "max_body_size"),
    (dict(flush_interval_ms=0), "flush_interval_ms"),
    (dict(sync_flush_timeout_ms=-5), "sync_flush_timeout_ms"),
    (dict(flush_least_pages=-1), "flush_least_pages"),
    (dict(prefault="yes"), "prefault"),
    (dict(default_queues=0), "default_queues"),
    (dict(store_host="localhost"), "store_host"),
])
def test_bad_config_refused(kw, field):
    with pytest.raises(InvalidConfigError) as ei:
        strata.StoreConfig(**kw)
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, StrataError)
    assert field in str(ei.value)


def test_max_body_size_defaults_to_what_a_segment_holds(tmp_store_dir):
    """None (the default) is 4 MiB, or the largest body a smaller segment can hold; that
    body is stored whole, one byte more is refused before anything is written."""
    assert strata.StoreConfig().max_body_size == 4 << 20
    cfg = small_store_config()
    assert cfg.segment_size < 4 << 20 and cfg.max_body_size < cfg.segment_size
    with strata.open(tmp_store_dir, cfg) as store:
        r = store.put(strata.Message("t", b"x" * cfg.max_body_size))
        assert store.read_at(r.commitlog_offset).body == b"x" * cfg.max_body_size
        end = store.max_commitlog_offset()
        with pytest.raises(MessageTooLargeError, match="max_body_size"):
            store.put(strata.Message("t", b"x" * (cfg.max_body_size + 1)))
        assert store.max_commitlog_offset() == end


def test_bad_config_object_refused_before_touching_disk(tmp_store_dir):
    with pytest.raises(StrataError) as ei:
        strata.open(tmp_store_dir, {"flush": "sync"})
    assert isinstance(ei.value, ValueError) and "StoreConfig" in str(ei.value)
    cfg = small_store_config()
    cfg.flush = "fast"  # changed after construction: still caught at open
    with pytest.raises(InvalidConfigError, match="flush"):
        strata.open(tmp_store_dir, cfg)
    assert not tmp_store_dir.exists()


# --------------------------------------------------------------------------- other processes

READER_SRC = r'''
import json, sys
sys.path.insert(0, sys.argv[2])
import strata
from support import body_for

store = strata.open(sys.argv[1], strata.StoreConfig(**json.loads(sys.argv[3])), readonly=True)
for line in sys.stdin:
    cmd = line.split()
    try:
        if cmd[0] == "scan":
            offs, bad = [], []
            for m in store.scan(verify_crc=True):
                offs.append(m.commitlog_offset)
                seq = int(m.keys[0][1:])
                if m.body != body_for(seq, len(m.body)) or len(m.body) == 0:
                    bad.append(m.commitlog_offset)
            out = {"offsets": offs, "bad": bad}
        elif cmd[0] == "read":
            m = store.read_at(int(cmd[1]))
            out = {"body": None if m is None else m.body.hex()}
        elif cmd[0] == "put":
            try:
                store.put(strata.Message("t", b"x"))
                out = {"error": None}
            except Exception as e:
                out = {"error": type(e).__name__}
        elif cmd[0] == "exit":
            break
    except Exception as e:
        out = {"exception": f"{type(e).__name__}: {e}"}
    print(json.dumps(out), flush=True)
store.close()
'''


class Reader:
    """A read-only store opened in another process, driven line by line."""

    def __init__(self, tmp_path: Path, store_dir: Path, config: dict | None = None) -> None:
        script = tmp_path / "reader.py"
        script.write_text(READER_SRC)
        self.proc = subprocess.Popen([sys.executable, str(script), str(store_dir),
                                      str(TESTS_DIR), json.dumps(config or SMALL)],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ask(self, *cmd) -> dict:
        self.proc.stdin.write(" ".join(map(str, cmd)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read()
        out = json.loads(line)
        assert "exception" not in out, out["exception"]
        return out

    def close(self) -> None:
        try:
            self.proc.stdin.write("exit\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self.proc.stderr.close()


def test_second_writer_in_another_process_gets_store_locked(tmp_store_dir, tmp_path):
    code = ("import json, sys, strata\n"
            "try:\n"
            "    strata.open(sys.argv[1], strata.StoreConfig(**json.loads(sys.argv[2])))\n"
            "    print('OPENED')\n"
            "except strata.errors.StoreLockedError as e:\n"
            "    print('LOCKED', e)\n")
    with strata.open(tmp_store_dir, small_store_config()) as store:
        store.put(make_message(0))
        out = subprocess.run([sys.executable, "-c", code, str(tmp_store_dir),
                              json.dumps(SMALL)], capture_output=True, text=True, timeout=60)
        assert out.stdout.startswith("LOCKED"), out.stdout + out.stderr
        assert str(tmp_store_dir) in out.stdout and "readonly=True" in out.stdout
        # the refused opener changed nothing
        assert store.put(make_message(1)).ok
    # once the writer has closed, the directory is free
    out = subprocess.run([sys.executable, "-c", code, str(tmp_store_dir), json.dumps(SMALL)],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("OPENED"), out.stdout + out.stderr


def test_second_writer_in_same_process_gets_store_locked(tmp_store_dir):
    with strata.open(tmp_store_dir, small_store_config()):
        with pytest.raises(StoreLockedError, match="already open for writing in this process"):
            strata.open(tmp_store_dir, small_store_config())


class GateFileOps(FileOps):
    """Commit-log msyncs wait while the gate is closed: data sits written but not durable."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()

    def msync(self, path, mm, start, length, fd=None):
        if not self.gate.is_set() and "commitlog" in Path(path).parts:
            self.waiting.set()
            self.gate.wait()
        super().msync(path, mm, start, length, fd)


def test_readonly_process_sees_nothing_beyond_flushed_offset_in_sync_mode(tmp_store_dir,
                                                                           tmp_path):
    fops = GateFileOps()
    store = MessageStore(tmp_store_dir, small_store_config(flush="sync"), file_ops=fops)
    reader = None
    try:
        results = [store.put(make_message(i)) for i in range(10)]
        assert all(r.ok for r in results)
        reader = Reader(tmp_path, tmp_store_dir)
        assert reader.ask("scan") == {"offsets": [r.commitlog_offset for r in results], "bad": []}

        fops.gate.clear()
        pending = store.max_commitlog_offset()
        done = []
        t = threading.Thread(target=lambda: done.append(store.put(make_message(10))))
        t.start()
        assert fops.waiting.wait(30)  # the record is in the page cache, its fsync stalled
        assert store.max_commitlog_offset() > pending
        assert store.flushed_offset() <= pending
        # neither the writer's readers nor another process see it before it is durable
        assert store.read_at(pending) is None
        assert reader.ask("read", pending) == {"body": None}
        assert reader.ask("scan")["offsets"] == [r.commitlog_offset for r in results]

        fops.gate.set()
        t.join(30)
        assert done and done[0].ok and done[0].commitlog_offset == pending
        assert reader.ask("read", pending) == {"body": body_for(10).hex()}
        assert reader.ask("scan")["offsets"][-1] == pending
        assert reader.ask("put") == {"error": "ReadOnlyStoreError"}
    finally:
        fops.gate.set()
        if reader is not None:
            reader.close()
        store.close()


def test_readonly_process_never_sees_a_torn_record(tmp_store_dir, tmp_path):
    """A reader in another process scans (CRC-verified) while the writer appends and rolls
    segments: every record it sees is whole, and what it saw once it sees again."""
    store = strata.open(tmp_store_dir, small_store_config())
    store.put(make_message(0))
    reader = Reader(tmp_path, tmp_store_dir)
    stop = threading.Event()
    written = [1]

    def write():
        seq = 1
        while not stop.is_set() and seq < 5000:
            n = 1 + seq % 17
            store.put_batch([make_message(s, size=50 + (s * 37) % 1500)
                             for s in range(seq, seq + n)])
            seq += n
            written[0] = seq

    t = threading.Thread(target=write)
    t.start()
    try:
        last: list[int] = []
        for _ in range(15):
            got = reader.ask("scan")
            assert got["bad"] == []
            assert got["offsets"][:len(last)] == last
            last = got["offsets"]
    finally:
        stop.set()
        t.join()
    assert written[0] > 1
    final = reader.ask("scan")
    assert len(final["offsets"]) == written[0] and final["bad"] == []
    reader.close()
    store.close()


def test_readonly_open_in_process(tmp_store_dir):
    cfg = small_store_config()
    with pytest.raises(StoreNotFoundError):
        strata.open(tmp_store_dir, cfg, readonly=True)
    assert not tmp_store_dir.exists()  # a reader creates nothing

    with strata.open(tmp_store_dir, small_store_config()) as writer:
        r = writer.put(make_message(0))
        with strata.open(tmp_store_dir, cfg, readonly=True) as ro:
            assert ro.read_at(r.commitlog_offset).body == body_for(0)
            with pytest.raises(ReadOnlyStoreError):
                ro.put(make_message(1))
            with pytest.raises(ReadOnlyStoreError):
                ro.put_batch([make_message(1)])
            r2 = writer.put(make_message(2))
            assert ro.read_at(r2.commitlog_offset).body == body_for(2)  # follows the writer
    before = snapshot(tmp_store_dir)
    with strata.open(tmp_store_dir, cfg, readonly=True) as ro:  # no writer: reads the files
        assert [m.body for m in ro.scan()] == [body_for(0), body_for(2)]
        with pytest.raises(ReadOnlyStoreError):
            ro.put(make_message(3))
    assert snapshot(tmp_store_dir) == before


def test_readonly_open_with_default_config(tmp_store_dir):
    """Tools (CLI, Spark) open a store read-only without knowing the writer's config: file
    sizes must come from the files, not from the opener's config."""
    with strata.open(tmp_store_dir, small_store_config()) as writer:
        results = writer.put_batch([make_message(i, size=900) for i in range(200)])
    with strata.open(tmp_store_dir, readonly=True) as ro:
        assert [m.body for m in ro.scan(verify_crc=True)] == \
            [body_for(i, 900) for i in range(200)]
        assert ro.get_by_id(results[150].msg_id).body == body_for(150, 900)


# --------------------------------------------------------------------------- lifetime


def test_context_manager_closes_cleanly(tmp_store_dir):
    with strata.open(tmp_store_dir, small_store_config()) as store:
        r = store.put(make_message(0))
        assert not store.closed
    assert store.closed
    with pytest.raises(RuntimeError):
        with strata.open(tmp_store_dir, small_store_config()) as store:
            store.put(make_message(1))
            raise RuntimeError("boom")
    assert store.closed
    with strata.open(tmp_store_dir, small_store_config()) as store:  # lock was released
        assert store.recovery_report.clean
        assert [m.body for m in store.scan()] == [body_for(0), body_for(1)]
        assert store.get_by_id(r.msg_id).body == body_for(0)


def test_use_after_close_raises(tmp_store_dir):
    store = strata.open(tmp_store_dir, small_store_config())
    r = store.put(make_message(0))
    store.close()
    store.close()  # idempotent
    for call in (lambda: store.put(make_message(1)),
                 lambda: store.put_batch([make_message(1)]),
                 lambda: store.read_at(r.commitlog_offset),
                 lambda: store.get_by_id(r.msg_id),
                 lambda: list(store.scan()),
                 lambda: store.flush()):
        with pytest.raises(StoreClosedError, match="closed"):
            call()


def test_empty_batch_is_a_no_op(tmp_store_dir):
    with strata.open(tmp_store_dir, small_store_config()) as store:
        assert store.put_batch([]) == []
        assert store.max_commitlog_offset() == 0


def test_put_batch_takes_any_iterable_of_messages(tmp_store_dir):
    with strata.open(tmp_store_dir, small_store_config()) as store:
        got = store.put_batch(make_message(i) for i in range(40))   # a generator
        assert [store.read_at(r.commitlog_offset).body for r in got] == \
            [body_for(i) for i in range(40)]
        with pytest.raises(InvalidInputError, match="iterable of strata.Message"):
            store.put_batch(42)
        assert store.max_commitlog_offset() == got[-1].commitlog_offset + got[-1].size


# --------------------------------------------------------------------------- sync flush


class SlowSyncFileOps(FaultInjectingFileOps):
    """Commit-log msyncs take ``delay`` seconds (a slow or overloaded disk), or wait while
    ``stalled`` is set (a disk that answers only when the test says so)."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay
        self.log_syncs = 0
        self.stalled = threading.Event()
        self._released = threading.Event()

    def stall(self) -> None:
        self._released.clear()
        self.stalled.set()

    def release(self) -> None:
        self.stalled.clear()
        self._released.set()

    def msync(self, path, mm, start, length, fd=None):
        if "commitlog" in Path(path).parts:
            with self._lock:
                self.log_syncs += 1
            if self.stalled.is_set():
                self._released.wait(60)
            if self.delay:
                time.sleep(self.delay)
        super().msync(path, mm, start, length, fd)


def test_sync_put_past_timeout_reports_flush_disk_timeout(tmp_store_dir):
    fops = SlowSyncFileOps()
    cfg = small_store_config(flush="sync", sync_flush_timeout_ms=1)
    store = MessageStore(tmp_store_dir, cfg, file_ops=fops)
    try:
        # the disk answers no fsync until released: however slowly this thread runs, the
        # put's 1 ms wait ends before its data is durable
        fops.stall()
        r = store.put(make_message(0))
        assert r.status is strata.PutStatus.FLUSH_DISK_TIMEOUT and not r.ok
        rs = store.put_batch([make_message(1), make_message(2)])
        assert [x.status for x in rs] == [strata.PutStatus.FLUSH_DISK_TIMEOUT] * 2
        # the data was stored all the same, and becomes durable when the disk catches up
        assert store.read_at(r.commitlog_offset) is None or \
            store.read_at(r.commitlog_offset).body == body_for(0)
        fops.release()
        store.flush()
        assert store.flushed_offset() == store.max_commitlog_offset()
        assert [m.body for m in store.scan()] == [body_for(i) for i in range(3)]
        store._group_commit.timeout = 5.0  # 1 ms is too tight for a loaded machine's fsync
        assert store.put(make_message(3)).ok
    finally:
        fops.release()
        store.close()
    with strata.open(tmp_store_dir, small_store_config()) as store:
        assert [m.body for m in store.scan()] == [body_for(i) for i in range(4)]


def test_flush_makes_everything_visible_however_slow_the_disk(tmp_store_dir):
    """``flush()`` returns once readers can see what it made durable: it waits for the group
    commit to count it, not for the puts' sync_flush_timeout_ms (1 ms here), which the group's
    fsync under way can outlast (the test above failed so now and then under load)."""
    fops = SlowSyncFileOps()
    store = MessageStore(tmp_store_dir, small_store_config(flush="sync",
                                                           sync_flush_timeout_ms=1),
                         file_ops=fops)
    try:
        fops.stall()                                  # no fsync answers until released
        r = store.put(make_message(0))                # its fsync is under way ...
        rs = store.put_batch([make_message(i) for i in (1, 2)])    # ... when these come
        assert {x.status for x in [r, *rs]} == {strata.PutStatus.FLUSH_DISK_TIMEOUT}
        fops.delay = 0.2
        fops.release()
        store.flush()                                 # the disk is still slow
        assert store.confirmed_offset() == store.max_commitlog_offset()
        assert [m.body for m in store.scan()] == [body_for(i) for i in range(3)]
    finally:
        fops.delay = 0
        fops.release()
        store.close()


def test_group_commit_shares_fsyncs_between_threads(tmp_store_dir):
    fops = SlowSyncFileOps(delay=0.002)
    cfg = small_store_config(flush="sync", segment_size=1 << 20)
    store = MessageStore(tmp_store_dir, cfg, file_ops=fops)
    threads, per_thread = 16, 25
    results: list = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def producer(t):
        start.wait()
        for i in range(per_thread):
            r = store.put(make_message(t * 1000 + i))
            with lock:
                results.append((t * 1000 + i, r))
    try:
        before = fops.log_syncs
        ts = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        syncs = fops.log_syncs - before
        puts = threads * per_thread
        assert len(results) == puts and all(r.ok for _, r in results)
        # producers released by one fsync are gathered into the next: groups of ~16, not ~8
        assert 0 < syncs * 4 <= puts, (syncs, puts)
        for seq, r in results:
            assert store.flushed_offset() >= r.commitlog_offset + r.size
            assert store.read_at(r.commitlog_offset).body == body_for(seq)
    finally:
        store.close()


def test_queue_count_grows_and_never_shrinks(tmp_store_dir):
    with strata.open(tmp_store_dir, small_store_config()) as store:
        store.create_topic("t", queues=2)
        store.put_batch([make_message(i, topic="t") for i in range(4)])
        assert store.set_queue_count("t", 3) == 3
        got = store.put_batch([make_message(i, topic="t") for i in range(4, 10)])
        assert {r.queue_id for r in got} == {0, 1, 2}        # round robin over the new count
        assert store.set_queue_count("t", 3) == 3             # unchanged is fine
        for bad, match in ((2, "can only grow"), (0, "queues must be"), (True, "queues must be")):
            with pytest.raises(InvalidInputError, match=match):
                store.set_queue_count("t", bad)
        with pytest.raises(InvalidInputError, match="no topic 'nope'"):
            store.set_queue_count("nope", 4)
        assert store.wait_dispatched()
        total = sum(store.max_offset("t", q) for q in range(store.queue_count("t")))
        assert total == 10 and store.queue_count("t") == 3
    with strata.open(tmp_store_dir, small_store_config()) as store:   # persisted
        assert store.queue_count("t") == 3
        assert store.get("t", 2, 0, 10).status is strata.GetStatus.FOUND


def test_message_fields_beyond_topic_and_body_read_set_compare_and_pickle(tmp_store_dir):
    """Keys, tags, properties, routing, flags and born host live in one tuple inside
    Message; they read, write, validate, compare and pickle like plain fields, and a message
    of topic and body only carries none."""
    import pickle
    plain = strata.Message("t", b"x")
    assert (plain.keys, plain.tags, plain.properties, plain.born_timestamp) == \
        ((), None, None, None)
    keyed = strata.Message("t", b"x", keys="k", tags="a", born_timestamp=5)
    assert (keyed.keys, keyed.tags, keyed.born_timestamp) == (("k",), "a", 5)
    keyed.keys, keyed.tags, keyed.born_timestamp = (), None, None
    assert keyed == plain and keyed._ext is None
    empty = strata.Message("t", b"x", keys=[], properties={})  # kept as given
    assert empty.keys == [] and empty.properties == {} and empty != plain
    for bad in (dict(flag=1.5), dict(reconsume_times=True), dict(born_timestamp=-1),
                dict(keys=("k",), sys_flag="1")):
        with pytest.raises(InvalidInputError):
            strata.Message("t", b"x", **bad)
    assert (plain.queue_id, plain.shard_key, plain.flag, plain.born_host,
            plain.reconsume_times, plain.sys_flag, plain.prepared_transaction_offset) == \
        (None, None, 0, None, 0, 0, 0)
    assert plain._ext is None
    routed = strata.Message("t", b"x", queue_id=1, flag=7)
    assert routed.queue_id == 1 and routed.flag == 7 and routed != plain
    assert "queue_id=1" in repr(routed) and "flag=7" in repr(routed)
    assert pickle.loads(pickle.dumps(routed)) == routed
    routed.queue_id, routed.flag = None, 0  # back to the defaults: plain again
    assert routed == plain and routed._ext is None
    with pytest.raises(InvalidInputError, match="flag"):
        plain.flag = 2**40
    with pytest.raises(InvalidInputError, match="queue_id"):
        plain.queue_id = -1
    assert plain._ext is None  # a refused assignment changes nothing
    later = [strata.Message("t", bytes([i])) for i in range(40)]
    for m in later:
        m.queue_id = 2  # set after construction: the batch is routed, not round-robin
    with strata.open(tmp_store_dir, small_store_config()) as store:
        store.create_topic("t", queues=4)
        assert {r.queue_id for r in store.put_batch(later)} == {2}


def test_put_results_are_a_sequence_made_when_first_read(tmp_store_dir):
    """put_batch returns PutResults: no per-message objects until read, then a sequence that
    indexes, slices, iterates, adds and compares like the list of PutResult it stands for."""
    import pickle
    with strata.open(tmp_store_dir, small_store_config()) as store:
        store.create_topic("t", queues=2)
        results = store.put_batch([strata.Message("t", bytes([i])) for i in range(40)])
        assert isinstance(results, strata.PutResults)
        assert results._items is None                 # nothing made by the put itself
        assert len(results) == 40 and results.ok and results.status is strata.PutStatus.OK
        assert results._items is None                 # len/status/ok need no items either
        first, last = results[0], results[-1]
        assert isinstance(first, strata.PutResult) and first.topic == "t"
        assert results._items is None                 # one index makes only that result
        with pytest.raises(IndexError):
            results[40]
        assert [r.queue_offset for r in results[:4]] == [0, 0, 1, 1]
        assert [r.queue_id for r in results[-2:]] == [0, 1]
        assert [store.read_at(r.commitlog_offset).body for r in results] == \
            [bytes([i]) for i in range(40)]
        as_list = list(results)
        assert (first, last) == (as_list[0], as_list[-1])
        assert results == as_list and as_list == results and results == tuple(as_list)
        assert results != as_list[:-1]
        more = store.put_batch([strata.Message("t", b"y")] * 3)
        joined = results + more
        assert isinstance(joined, list) and joined == as_list + list(more)
        acc = []
        acc += results                                # list += PutResults extends the list
        assert acc == as_list and as_list + more == as_list + list(more)
        assert pickle.loads(pickle.dumps(results)) == as_list
        assert "PutResults([PutResult(OK" in repr(more)
        assert store.put_batch([]) == [] and len(store.put_batch([])) == 0


def test_check_batch_refuses_what_put_batch_refuses_and_writes_nothing(tmp_store_dir):
    with strata.open(tmp_store_dir, small_store_config(max_body_size=100)) as store:
        store.create_topic("t", queues=2)
        end = store.confirmed_offset()
        store.check_batch([strata.Message("t", b"ok"), strata.Message("new-topic", b"ok")])
        for bad, match in (([strata.Message("t", b"x" * 101)], "body"),
                           ([strata.Message("t", b"x", queue_id=2)], "queue_id 2"),
                           ([strata.Message("t", b"x", properties={"p": "v" * 40000})],
                            "properties")):
            with pytest.raises(InvalidInputError, match=match):
                store.check_batch(bad)
            with pytest.raises(InvalidInputError, match=match):
                store.put_batch(bad)
        assert store.confirmed_offset() == end and store.topics() == ["t"]
