"""RefStore: the reference-counted message store (RabbitMQ's msg_store design, in Python).

One *server* thread applies clients' writes, removes, contains calls and terminations in the
order they were issued and hands full write buffers to the OS without the lock; one *sync*
thread (``syncer.py``) fdatasyncs behind it and delivers confirms; one *GC* thread deletes
emptied files and combines pairs of files. Clients read directly (cache, current write buffer, or ``pread`` of a pinned file) without
going through the server. Everything shared is guarded by one lock, held briefly.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
import uuid
from typing import Iterable

from strata.errors import InvalidConfigError, StoreClosedError, StrataError
from strata.format import refstore_record as rec

from . import append, batch_split, encode, index, opening, snapshot
from .apply import (OP_CONTAINS, OP_DELETE, OP_DYING, OP_REMOVE, OP_SYNC, OP_TERMINATE,
                    OP_WRITE, apply_contains, apply_removes, apply_writes)
from .cache import WriteBackCache
from .client import OnDisk, StoreClient
from .files import CurrentFile, FileReaders, lock_directory
from .flying import FlyingTable
from .gc import GarbageCollector
from .syncer import Syncer, SyncJob
from .index import FILE, OFFSET, REF, SIZE, MessageIndex
from .model import (DEFAULT_FILE_SIZE_LIMIT, DEFAULT_GC_GARBAGE_RATIO,  # noqa: F401 - re-exported
                    DEFAULT_MAX_IN_FLIGHT_BYTES, DEFAULT_SYNC_INTERVAL,
                    DEFAULT_WRITE_BUFFER_SIZE, MIN_FILE_SIZE_LIMIT, FaultHook, FileStat, Kind,
                    StoreStats, _check_config, _Reply)
from .summary import FileInfo, FileSummary

log = logging.getLogger(__name__)

# op codes on the server queue (strata.refstore.apply)
_W, _R, _C, _T, _DYING, _DEL, _SYNC = (OP_WRITE, OP_REMOVE, OP_CONTAINS, OP_TERMINATE, OP_DYING,
                                       OP_DELETE, OP_SYNC)


class RefStore:
    """A directory of numbered data files holding messages by id, reference counted.

    Use :func:`strata.refstore.open` rather than the constructor.
    """

    def __init__(self, directory: str, kind: str | Kind = Kind.PERSISTENT, *,
                 file_size_limit: int = DEFAULT_FILE_SIZE_LIMIT,
                 sync_interval: float = DEFAULT_SYNC_INTERVAL,
                 gc_garbage_ratio: float = DEFAULT_GC_GARBAGE_RATIO,
                 write_buffer_size: int = DEFAULT_WRITE_BUFFER_SIZE,
                 max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES,
                 client_refs: Iterable[str] | None = None,
                 recover_refs=None,
                 auto_gc: bool = True,
                 fault_hook: FaultHook | None = None) -> None:
        try:
            self.kind = Kind(kind)
        except ValueError:
            raise InvalidConfigError(
                f"kind must be 'persistent' or 'transient', got {kind!r}") from None
        _check_config(file_size_limit, sync_interval, gc_garbage_ratio, write_buffer_size,
                      max_in_flight_bytes)
        if not isinstance(directory, (str, os.PathLike)):
            raise InvalidConfigError(f"directory must be a path, got {directory!r}")
        self.directory = os.fspath(directory)
        if os.path.exists(self.directory) and not os.path.isdir(self.directory):
            raise InvalidConfigError(f"{self.directory!r} exists and is not a directory")
        os.makedirs(self.directory, exist_ok=True)
        self.file_size_limit = file_size_limit
        self.max_body_size = file_size_limit - rec.OVERHEAD
        self.sync_interval = float(sync_interval)
        self.gc_garbage_ratio = float(gc_garbage_ratio)
        self.max_in_flight_bytes = max_in_flight_bytes
        self.auto_gc = auto_gc
        self._fault_hook = fault_hook
        wanted_refs = None if client_refs is None else [str(r) for r in client_refs]

        self._dirlock = lock_directory(self.directory)
        try:
            self.recovery = opening.recover_at_open(self.directory, self.kind, wanted_refs,
                                                    recover_refs)
        except BaseException:
            self._dirlock.release()
            raise

        # shared state, all guarded by _lock
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)      # server: new ops
        self._changed = threading.Condition(self._lock)   # GC, readers, credit, idle waits
        self._index: MessageIndex = self.recovery.index
        self._summary: FileSummary = self.recovery.summary
        self._cache = WriteBackCache()
        self._flying = FlyingTable()
        self._readers = FileReaders(self.directory)
        self._ops: collections.deque = collections.deque()
        self._parked: list[tuple[int, tuple]] = []
        self._clients: dict[str, StoreClient | None] = {}
        for ref in self.recovery.client_refs + (wanted_refs or []):
            self._clients[ref] = None
        self._confirms: dict[StoreClient, set] = {}
        self._confirm_due: float | None = None
        self._sync_waiters: list[_Reply] = []
        self._unsynced: list[CurrentFile] = []
        self._dir_unsynced = True      # a data file was created: fsync the directory at sync
        self._in_flight = 0
        self._paused = False
        self._closing = False
        self._closed = False
        self._crashed = False
        self._stop_server = False
        self.failure: BaseException | None = None
        self.writes_eliminated = 0
        self.writes_ignored = 0
        self.removes_ignored = 0

        self._gc = GarbageCollector(self)
        newest = self._summary.newest()
        if newest is None:
            newest = self._summary.add(0)
        self._cur = CurrentFile(self.directory, newest.number, newest.size, write_buffer_size,
                                reserve_to=file_size_limit)
        if newest.size >= file_size_limit:
            self._roll()
        self._syncer = Syncer(self.directory, self._callback, self._sync_failed)
        self._server = threading.Thread(target=self._serve, name="refstore-server",
                                        daemon=True)
        self._syncer.start()
        self._server.start()
        self._gc.start()
        with self._lock:
            self._maybe_gc()

    # ================================================================== client side

    def client(self, ref: str | None = None, on_disk: OnDisk | None = None) -> StoreClient:
        """Register a client; ``ref`` names it across restarts (default: a fresh uuid)."""
        if ref is None:
            ref = uuid.uuid4().hex
        elif not isinstance(ref, str) or not ref or len(ref.encode("utf-8")) > 0xFFFF:
            raise rec.InvalidInputError(f"a client ref must be a non-empty str, got {ref!r}")
        if on_disk is not None and not callable(on_disk):
            raise rec.InvalidInputError("on_disk must be callable (it receives a list of ids)")
        with self._lock:
            self._check_usable()
            old = self._clients.get(ref)
            if old is not None and not old.closed:
                raise rec.InvalidInputError(f"client ref {ref!r} is already in use")
            c = StoreClient(self, ref, on_disk)
            self._clients[ref] = c
            return c

    def client_refs(self) -> list[str]:
        """Refs registered now (saved at clean shutdown)."""
        with self._lock:
            return sorted(self._clients)

    def _check_usable(self) -> None:
        if self._closing or self._closed or self._crashed:
            raise StoreClosedError(f"ref store {self.directory!r} is closed")
        if self.failure is not None:
            raise StrataError(f"ref store {self.directory!r} stopped after a failure: "
                              f"{self.failure!r}; reopen it to recover")

    def _enqueue(self, op) -> None:
        self._ops.append(op)
        self._work.notify()

    def _submit_writes(self, client: StoreClient, ids: list, bodies: list,
                       nbytes: int | None = None) -> None:
        """Queue a checked batch of writes (``nbytes``: the bodies' total length, if known)."""
        if nbytes is None:
            nbytes = sum(map(len, bodies))
        with self._lock:
            self._check_usable()
            if not self._on_server_thread():
                while self._in_flight > 0 and self._in_flight + nbytes > self.max_in_flight_bytes:
                    self._changed.wait()
                    self._check_usable()
            self._flying.client_write_many(client.ref, ids)
            self._cache.add_many(ids, bodies, nbytes)
            self._in_flight += nbytes
            self._enqueue((_W, client, ids, bodies, nbytes))

    def _submit_removes(self, client: StoreClient, ids: list) -> None:
        with self._lock:
            self._check_usable()
            fly = self._flying.client_remove
            ref = client.ref
            send = [m for m in ids if not fly(ref, m)]
            if send:
                self._enqueue((_R, client, send))

    def _call_contains(self, client: StoreClient, msg_id: bytes) -> bool:
        reply = _Reply()
        with self._lock:
            self._check_usable()
            self._refuse_on_server_thread("contains")
            self._enqueue((_C, client, msg_id, reply))
        return reply.wait()

    def _call_terminate(self, client: StoreClient) -> None:
        reply = _Reply()
        with self._lock:
            self._check_usable()
            self._refuse_on_server_thread("terminate")
            self._enqueue((_T, client, reply))
        reply.wait()

    def _submit_delete(self, client: StoreClient) -> None:
        with self._lock:
            self._check_usable()
            self._ops.appendleft((_DYING, client))   # overtakes the client's queued ops
            self._enqueue((_DEL, client))

    def _on_server_thread(self) -> bool:
        """True on the server thread or the sync thread (which runs the callbacks)."""
        t = threading.current_thread()
        return t is self._server or t is self._syncer.thread

    def _refuse_on_server_thread(self, what: str) -> None:
        if self._on_server_thread():
            raise StrataError(f"{what} cannot be called from an on_disk callback")

    def _wait_unlocked(self, info: FileInfo) -> None:
        """Wait (lock held) until the GC releases ``info``'s file."""
        self._changed.wait(0.5)
        if self.failure is not None or self._crashed:
            raise StrataError(f"ref store {self.directory!r} stopped while a read waited for "
                              f"garbage collection: {self.failure!r}")

    def _read(self, msg_id: bytes) -> bytes | None:
        with self._lock:
            while True:
                body = self._cache.get(msg_id)
                if body is not None:
                    return body
                e = self._index.get(msg_id)
                if e is None or e[REF] == 0:
                    return None
                _ref, number, off, total = e
                if number == self._cur.number:
                    raw = self._cur.read_buffered(off, total)
                    if raw is not None:
                        return rec.body_of(raw, 0, total, msg_id)
                info = self._summary.files[number]
                if info.locked:
                    self._wait_unlocked(info)
                    continue
                info.readers += 1
                break
        try:
            raw = self._readers.pread(number, off, total)
        finally:
            with self._lock:
                info.readers -= 1
                if info.readers == 0 and info.locked:
                    self._changed.notify_all()
        return rec.body_of(raw, 0, total, msg_id)

    # ================================================================== server thread

    def _serve(self) -> None:
        lock = self._lock
        try:
            encode.warm()
            append.warm()
            batch_split.warm()
            index.warm()
            while True:
                with lock:
                    while True:
                        if self._crashed:
                            return
                        if self._syncer.failure is not None:
                            raise self._syncer.failure
                        if self._ops and not self._paused:
                            break
                        if self._stop_server and not self._ops:
                            break
                        if self._sync_waiters:
                            break
                        if self._confirm_due is not None:
                            wait = self._confirm_due - time.monotonic()
                            if wait <= 0:
                                break
                        else:
                            wait = None
                        self._work.wait(wait)
                    n = 0
                    cur = self._cur
                    while self._ops and not self._paused and n < 64 and not cur.sealed:
                        self._apply(self._ops.popleft())
                        n += 1
                        cur = self._cur
                    stopping = self._stop_server and not self._ops
                    sync = (stopping or bool(self._sync_waiters) or bool(self._unsynced) or (
                        self._confirm_due is not None and time.monotonic() >= self._confirm_due))
                    if sync:
                        cur.seal()
                        rolled = self._unsynced
                        self._unsynced = []
                        dir_unsynced = self._dir_unsynced
                        self._dir_unsynced = False
                        confirms = self._confirms
                        self._confirms = {}
                        self._confirm_due = None
                        waiters = self._sync_waiters
                        self._sync_waiters = []
                    pending = list(cur.sealed)
                if pending:       # full buffers to the OS without the lock, then mark them
                    cur.write_sealed(pending)
                    with lock:
                        cur.sealed_written(pending)
                        stretch = cur.writeback_due()
                    if stretch is not None:   # start its write-back, off this thread
                        self._syncer.start_writeback(cur, *stretch)
                if sync:        # fdatasync and confirms on the sync thread, in order
                    self._syncer.submit(SyncJob(rolled, dir_unsynced, cur, cur.flushed,
                                                confirms, waiters))
                if sync and stopping:
                    self._syncer.stop()
                    return
        except BaseException as exc:   # a bug or an I/O failure: stop, and say why
            log.exception("ref store %s: server thread failed", self.directory)
            with lock:
                self.failure = self.failure or exc
                for op in self._ops:
                    if op[0] in (_C, _T, _SYNC):
                        op[-1].fail(StrataError(f"ref store failed: {exc!r}"))
                for w in self._sync_waiters:
                    w.fail(StrataError(f"ref store failed: {exc!r}"))
                self._changed.notify_all()
            self._syncer.stop()

    def _sync_failed(self, exc: BaseException) -> None:
        """The sync thread stopped on an error: the store stops too (server, waiters)."""
        with self._lock:
            self.failure = self.failure or exc
            self._work.notify_all()
            self._changed.notify_all()

    def _callback(self, client: StoreClient, ids) -> None:
        try:
            client.on_disk(list(ids))
        except Exception:   # a client's callback must not stop the store
            log.exception("ref store %s: on_disk callback of client %r raised",
                          self.directory, client.ref)

    def _apply(self, op) -> None:
        code = op[0]
        if code == _W:
            apply_writes(self, op[1], op[2], op[3], op[4])
            self._in_flight -= op[4]
            self._changed.notify_all()
        elif code == _R:
            apply_removes(self, op[1], op[2])
        elif code == _C:
            apply_contains(self, op[1], op[2], op[3])
        elif code == _T:
            self._sync_waiters.append(op[2])
        elif code == _SYNC:
            self._sync_waiters.append(op[1])
        elif code == _DYING:
            client = op[1]
            client.dying_mark = (self._cur.number, self._cur.size)
            self._confirms.pop(client, None)
        elif code == _DEL:
            client = op[1]
            self._confirms.pop(client, None)
            if self._clients.get(client.ref) is client:
                del self._clients[client.ref]

    def _want_confirm(self, client: StoreClient):
        if client.on_disk is None or client.dying_mark is not None:
            return None
        s = self._confirms.get(client)
        if s is None:
            s = self._confirms[client] = set()
        if self._confirm_due is None:
            self._confirm_due = time.monotonic() + self.sync_interval
        return s

    def _roll(self) -> None:
        """Close the current file and start the next one (lock held, server thread)."""
        old = self._cur
        self._unsynced.append(old)     # fsynced and closed by the next sync, off the lock
        self._summary.add(old.number + 1)
        self._cur = old.successor()    # old's bytes all written, its spare blocks given back
        self._dir_unsynced = True      # the new file's name: fsynced by the next sync
        self._maybe_gc(self._summary.files[old.number].valid == 0)

    # ================================================================== GC coordination

    def _maybe_gc(self, emptied: bool = True, force: bool = False) -> None:
        """Hand the GC work if any is due (lock held)."""
        if not (self.auto_gc or force or self._gc.forced) or self._closing or self._crashed:
            return
        if emptied:
            cur = self._cur.number
            for info in self._summary.files.values():
                if info.valid == 0 and info.number != cur and not info.locked:
                    info.locked = True
                    info.pending_delete = True
                    self._gc.deletes.append(info.number)
                    self._changed.notify_all()
        if self._gc.combine_pending:
            return
        pair = self.combine_candidate()
        if pair is not None:
            left, right = pair
            left.locked = right.locked = True
            self._gc.combines.append((left.number, right.number))
            self._gc.combine_pending = True
            self._changed.notify_all()

    def combine_candidate(self) -> tuple[FileInfo, FileInfo] | None:
        """The oldest adjacent pair worth combining, if the global trigger holds (lock held)."""
        s = self._summary
        limit = self.file_size_limit
        if s.sum_size <= 2 * limit or (s.sum_size - s.sum_valid) <= \
                self.gc_garbage_ratio * s.sum_size:
            return None
        cur = self._cur.number
        files = s.files
        for number in sorted(files):
            left = files[number]
            if left.right is None or left.right == cur:
                break
            right = files[left.right]
            if left.locked or right.locked or left.valid == 0 or right.valid == 0:
                continue
            if left.valid + right.valid <= limit:
                return left, right
        return None

    def _release_parked(self, numbers) -> None:
        """Send ops parked behind the GC of ``numbers`` back to the front of the queue."""
        keep, go = [], []
        for parked in self._parked:          # (file number, op)
            if parked[0] in numbers:
                go.append(parked[1])
            else:
                keep.append(parked)              # still parked: keeps its file number
        self._parked = keep
        if go:
            self._ops.extendleft(reversed(go))
            self._work.notify()

    def _fault(self, step: str, **info) -> None:
        if self._crashed:
            raise StrataError("ref store crashed")
        if self._fault_hook is not None:
            self._fault_hook(step, info)

    # ================================================================== public operations

    def sync(self) -> None:
        """Return once every op issued before the call is applied, fsynced and confirmed."""
        reply = _Reply()
        with self._lock:
            self._check_usable()
            self._refuse_on_server_thread("sync")
            self._enqueue((_SYNC, reply))
        reply.wait()

    def compact(self, timeout: float | None = None) -> StoreStats:
        """Run the GC until the garbage ratio is at or below the threshold or nothing fits."""
        self.sync()
        return self._gc.run_until_idle(timeout)

    def wait_gc_idle(self, timeout: float | None = None) -> StoreStats:
        """Wait until the GC has no work queued or running (automatic GC only)."""
        return self._gc.wait_idle(timeout)

    @contextlib.contextmanager
    def paused(self):
        """Hold the server: ops queue up (to test flying elimination and dying clients)."""
        with self._lock:
            self._paused = True
        try:
            yield self
        finally:
            with self._lock:
                self._paused = False
                self._work.notify()

    def locate(self, msg_id: bytes) -> tuple[int, int, int, int] | None:
        """(ref count, file, offset, size) of ``msg_id``'s index entry, or None."""
        msg_id = rec.check_msg_id(msg_id)
        with self._lock:
            e = self._index.get(msg_id)
            return None if e is None else (e[REF], e[FILE], e[OFFSET], e[SIZE])

    def stats(self) -> StoreStats:
        with self._lock:
            s = self._summary
            files = tuple(FileStat(i.number, i.valid, i.size, i.locked) for i in s.in_order())
            return StoreStats(files, self._cur.number, s.sum_valid, s.sum_size,
                              len(self._index), len(self._flying), len(self._cache),
                              self._in_flight, self._gc.combined, self._gc.deleted,
                              self._gc.bytes_moved, self.writes_eliminated,
                              self.writes_ignored, self.removes_ignored)

    def message_count(self) -> int:
        """Messages with at least one reference (walks the index)."""
        with self._lock:
            return self._index.live_count()

    @property
    def recovered_clean(self) -> bool:
        return self.recovery.clean

    @property
    def closed(self) -> bool:
        return self._closed or self._crashed

    def close(self) -> None:
        """Clean shutdown: finish the GC step in progress, apply every queued op, fsync,
        and (persistent stores) save index, summary and client refs for a scan-free restart."""
        with self._lock:
            if self._closed or self._crashed:
                return
            self._closing = True
            self._paused = False
        self._gc.stop()
        with self._lock:
            for info in self._summary.files.values():
                if info.pending_delete:      # deletions not started: redone at next start
                    info.locked = False
                    info.pending_delete = False
            self._release_parked(set(self._summary.files) | {n for n, _ in self._parked})
            self._stop_server = True
            self._work.notify()
        self._server.join()
        try:
            if self.kind is Kind.PERSISTENT and self.failure is None and \
                    self._gc.error is None:
                with self._lock:
                    rows = [snapshot.SummaryRow(i.number, i.valid, i.size, i.left, i.right)
                            for i in self._summary.in_order()]
                    cols = self._index.columns()
                    refs = sorted(self._clients)
                self._cur.close()
                snapshot.save(self.directory, refs, cols, rows, self.file_size_limit)
            else:
                self._cur.close()
        finally:
            self._readers.close_all()
            self._closed = True
            self._dirlock.release()

    def crash(self) -> None:
        """Testing seam: stop as a killed process would (unflushed buffers lost, nothing saved)."""
        with self._lock:
            if self._closed or self._crashed:
                return
            self._crashed = True
            self._work.notify_all()
            self._changed.notify_all()
        self._gc.stop(join_timeout=10)
        self._server.join(10)
        dropped = self._syncer.stop(10, drop_pending=True)
        for f in [old for job in dropped for old in job.rolled] + self._unsynced + [self._cur]:
            try:
                os.close(f.fd)             # the write buffer is dropped, as in a real crash
            except OSError:
                pass
            f.fd = -1
        self._readers.close_all()
        self._dirlock.release()

    def __enter__(self) -> "RefStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RefStore({self.directory!r}, kind={self.kind.value!r})"


def open(path, kind: str = "persistent", **options) -> RefStore:  # noqa: A001 - mirrors strata.open
    """Open (creating if needed) a ref store in directory ``path``.

    ``kind="transient"`` wipes the directory's ref-store files first and never recovers.
    Options: file_size_limit, sync_interval, gc_garbage_ratio, write_buffer_size,
    max_in_flight_bytes, client_refs, recover_refs, auto_gc, fault_hook.
    """
    return RefStore(path, kind, **options)
