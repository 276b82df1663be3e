"""The ref store's sync thread: fdatasync and confirms, pipelined behind the server thread.

The server thread applies ops and hands full write buffers to the OS; every time confirms
are due (``sync_interval``, a roll, a ``sync``/``terminate`` waiting, shutdown) it passes a
``SyncJob`` here and goes on applying ops. This thread makes the job's bytes durable — the
files rolled since the last job (fdatasync and close), the directory if a data file was
created, the current file up to the position the server had written when it made the job —
and only then calls the job's ``on_disk`` callbacks and wakes its waiters, job after job in
the order they were made. So a confirm still follows the fdatasync of every byte it covers
(DESIGN.md's durability contract), but the server no longer waits for the disk between
batches: on this machine that wait was half of a fsynced 1 KiB batch stream's wall time.

Jobs that queue up while a sync runs are taken together: one fdatasync per file for all of
them, then their confirms in order. A job with no confirms and no waiters (a roll nobody
waits on) only closes its rolled files: it does not fdatasync the current file, whose bytes
the next job that has someone to tell covers — one fdatasync less per roll.

Every few MiB the server also hands it a write-back hint (``CurrentFile.writeback_due``):
this thread asks the kernel to start writing those bytes (``FileOps.start_writeback``) so
that they are not all still dirty when a fdatasync comes, and so that the kernel's work of
queueing them for the disk is not done on the server thread. A hint makes nothing durable
and confirms nothing.
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from strata.errors import StrataError
from strata.files.io import fsync_dir

if TYPE_CHECKING:  # pragma: no cover
    from .client import StoreClient
    from .files import CurrentFile
    from .model import _Reply

log = logging.getLogger(__name__)


@dataclass
class SyncJob:
    """What one sync point makes durable, and whom it tells."""
    rolled: list["CurrentFile"]                 # files rolled since the previous job
    new_files: bool                             # a data file was created: fsync the directory
    cur: "CurrentFile"
    target: int                                 # cur's bytes the OS had when the job was made
    confirms: dict["StoreClient", set]
    waiters: list["_Reply"] = field(default_factory=list)


class Syncer:
    """One thread running ``SyncJob`` s in order (started and stopped by the store)."""

    def __init__(self, directory: str, callback: Callable[["StoreClient", set], None],
                 on_failure: Callable[[BaseException], None]) -> None:
        self.directory = directory
        self._callback = callback
        self._on_failure = on_failure
        self._jobs: collections.deque[SyncJob] = collections.deque()
        self._writebacks: list[tuple["CurrentFile", int, int]] = []
        self._cond = threading.Condition()
        self._stop = False
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="refstore-sync", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def submit(self, job: SyncJob) -> None:
        with self._cond:
            if self.failure is not None:
                _fail(job, self.failure)
                return
            self._jobs.append(job)
            self._cond.notify()

    def start_writeback(self, f: "CurrentFile", start: int, end: int) -> None:
        """Have this thread start the write-back of ``f``'s bytes ``[start, end)`` (a hint
        run before the next jobs: it keeps the kernel's work of queueing the pages for the
        disk off the server thread, and confirms nothing)."""
        with self._cond:
            self._writebacks.append((f, start, end))
            self._cond.notify()

    def stop(self, timeout: float | None = None, drop_pending: bool = False) -> list[SyncJob]:
        """Run every job submitted so far, then end the thread. With ``drop_pending`` (a
        crash) the jobs not started are dropped instead, and returned."""
        with self._cond:
            self._stop = True
            dropped = list(self._jobs) if drop_pending else []
            if drop_pending:
                self._jobs.clear()
                self._writebacks.clear()
            self._cond.notify()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)
        return dropped

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._writebacks and not self._stop:
                    self._cond.wait()
                if not self._jobs and not self._writebacks:
                    return
                jobs = list(self._jobs)
                self._jobs.clear()
                writebacks, self._writebacks = self._writebacks, []
            try:
                for f, start, end in writebacks:
                    f.start_writeback(start, end)
                _make_durable(self.directory, jobs)
            except BaseException as exc:   # an I/O failure: no confirm, say why, stop
                log.exception("ref store %s: sync thread failed", self.directory)
                with self._cond:
                    self.failure = exc
                    jobs.extend(self._jobs)
                    self._jobs.clear()
                for job in jobs:
                    _fail(job, exc)
                self._on_failure(exc)
                return
            for job in jobs:
                for client, ids in job.confirms.items():
                    if client.on_disk is not None and ids:
                        self._callback(client, ids)
                for w in job.waiters:
                    w.set()


def _make_durable(directory: str, jobs: list[SyncJob]) -> None:
    """fdatasync every byte the jobs cover: rolled files, the directory, current files."""
    for job in jobs:
        for old in job.rolled:
            old.close()
    if any(job.new_files for job in jobs):
        fsync_dir(directory)
    targets: dict[int, tuple["CurrentFile", int]] = {}
    for job in jobs:
        if not job.waiters and not any(job.confirms.values()):
            continue     # nobody to tell: the current file's bytes wait for a later job
        f, t = targets.get(id(job.cur), (job.cur, 0))
        targets[id(job.cur)] = (f, max(t, job.target))
    for f, target in targets.values():
        f.sync_to(target)


def _fail(job: SyncJob, exc: BaseException) -> None:
    for w in job.waiters:
        w.fail(StrataError(f"ref store failed: {exc!r}"))
