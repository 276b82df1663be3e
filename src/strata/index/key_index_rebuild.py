"""Rebuilding a large stretch of the key index in the background.

When an open finds the key index must be re-dispatched over more of the log than
``BACKGROUND_REBUILD_BYTES`` (a deleted folder or first file of a big store), the store opens
without waiting for it: a thread re-dispatches the log into the index from the point the open
found, while the store's own dispatch feeds the consume queues as usual and holds the key
index's share back (the rebuild covers those records too, in log order, as the index needs).
Once the rebuild has reached what was held back, the store's dispatch feeds the index again.
Meanwhile ``query`` raises ``IndexRebuildingError`` naming the progress: it never answers from
a partial index (which would silently miss keys).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable, Sequence

from strata.errors import IndexRebuildingError
from strata.files.io import fsync_dir
from strata.index.dispatch import ReputService
from strata.index.dispatch_batch import DispatchBatch
from strata.index.key_index import KeyIndex
from strata.log.commit_log import CommitLog

log = logging.getLogger(__name__)

BACKGROUND_REBUILD_BYTES = 64 << 20   # a larger re-dispatch of the index runs in the background
MARKER_NAME = "rebuilding"   # index/rebuilding: exists while the index lacks a stretch of log


def marker_says_rebuilding(directory: Path) -> bool:
    """Read-only openers: a writer's background rebuild has not finished (it is running, or
    its writer stopped first: the next writer open resumes it), so the index misses keys."""
    return (Path(directory) / MARKER_NAME).exists()


def clear_marker(directory: Path) -> None:
    """A writer's open that starts no background rebuild: the index is whole again."""
    try:
        (Path(directory) / MARKER_NAME).unlink()
    except FileNotFoundError:
        pass


class KeyIndexRebuild:
    """One background rebuild of ``index`` from commit-log offset ``start``; ``held_to``: the
    log's end at open (the rebuild reaches at least there)."""

    def __init__(self, clog: CommitLog, index: KeyIndex, inner, start: int, held_to: int,
                 confirmed: Callable[[], int]) -> None:
        self.index = index
        self.inner = inner             # the store's key-index dispatcher
        self.start = start
        self._gate = threading.Lock()
        self._held_to = held_to        # live batches held back reach up to here
        self._active = True
        self._stop = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._reput = ReputService(clog, confirmed, [inner], start)
        self._thread = threading.Thread(target=self._run, name="strata-index-rebuild",
                                        daemon=True)

    # the store's dispatch chain calls this in place of the key-index dispatcher
    def dispatch(self, batch: DispatchBatch | Sequence) -> None:
        if not isinstance(batch, DispatchBatch):
            batch = DispatchBatch.from_requests(batch)
        with self._gate:
            if self._active:
                if len(batch):
                    self._held_to = max(self._held_to, batch.end)
                return
        self.inner.dispatch(batch)

    @property
    def active(self) -> bool:
        return self._active

    @property
    def position(self) -> int:
        """The commit-log offset the index covers up to (while active)."""
        return self._reput.reput_offset

    def start_thread(self) -> None:
        marker = self.index.directory / MARKER_NAME
        marker.write_bytes(b"")   # read-only openers look for it (not synced: a power loss
        #                           makes the next writer open find the index short again)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._gate:
                    target = self._held_to
                    if self._reput.reput_offset >= target:
                        self._active = False    # from now on the store's dispatch feeds it
                        break
                before = self._reput.reput_offset
                self._reput.dispatch_once(target)
                if self._reput.reput_offset == before:   # nothing more to read up to target
                    with self._gate:
                        if self._held_to == target:
                            self._active = False
                            break
            else:
                return
            self.index.flush()   # what the marker's removal tells readers is there, durable
            clear_marker(self.index.directory)
            fsync_dir(self.index.directory)
            log.warning("key index %s: rebuilt from the commit log from offset %d",
                        self.index.directory, self.start)
        except BaseException as exc:   # the next open rebuilds again from the checkpoint
            self.error = exc
            log.exception("key index rebuild failed at offset %d", self._reput.reput_offset)
        finally:
            self.done.set()

    def check_query(self) -> None:
        """IndexRebuildingError while the rebuild runs (or failed)."""
        if self._active:
            what = (f"failed at commit-log offset {self._reput.reput_offset}: {self.error}"
                    if self.error is not None else
                    f"at commit-log offset {self._reput.reput_offset} of {self._held_to}")
            raise IndexRebuildingError(
                f"the key index is being rebuilt from the commit log ({what}); query again "
                "once it is done (store.wait_index_rebuilt())")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
