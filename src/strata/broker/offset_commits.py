"""Committed offsets (and group memberships) made durable off the event loop: their journal
records are appended (and, under ``--flush sync``, fsynced) on one writer thread, in the
order they were made, and each committer is answered only then. The state in memory takes
them only after that write succeeded: OffsetFetch never answers with a commit that is not
durable, and a commit the journal refused (a full disk, an I/O error) leaves the group's
offsets as they were.

Commits that arrive while a write is under way go together in the next write (one append,
one fsync for all of them: a group commit across connections). After a write the journal is
compacted on the event loop when it has grown past its limit.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from strata.broker import journal as jr
from strata.broker.group_state import Committed, ConsumerGroups

log = logging.getLogger(__name__)


class CommitWriter:
    """The one writer of committed offsets and memberships of a broker (runs on its event
    loop)."""

    def __init__(self, groups: ConsumerGroups, *, sync: bool) -> None:
        self.groups = groups
        self.sync = sync
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="strata-commits")
        self._pending: list[tuple[bytes, Callable[[], None], asyncio.Future]] = []
        self._drainer: asyncio.Task | None = None
        self.writes = 0          # appends made (each one covers one or more commits)
        self.commits = 0
        self.failed = 0          # commits and memberships the journal refused

    async def commit(self, group: str, offsets: list[tuple[str, int, Committed]]) -> None:
        """Store ``group``'s offsets — (topic, queue id, committed) — and return once they
        are durable: written (a killed process keeps them) or, with ``sync``, fsynced; only
        then does the state in memory (OffsetFetch) have them. OSError if the journal could
        not take them: the state keeps the offsets it had."""
        if not offsets:
            return
        self.commits += 1
        await self._store(self.groups.encode_commits(group, offsets),
                          lambda: self.groups.apply_commits(group, offsets))

    async def store_membership(self, group: str, image: bytes) -> None:
        """Store ``group``'s membership image (empty: the group is gone) as ``commit`` stores
        offsets: durable first, then in the state (and in the next compaction)."""
        await self._store(jr.encode_members(group, image),
                          lambda: self.groups.apply_membership(group, image))

    async def _store(self, data: bytes, apply: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending.append((data, apply, fut))
        self.groups.writing += 1
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        await fut

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await loop.run_in_executor(self._executor, self._write,
                                           b"".join(d for d, _a, _f in batch))
            except Exception as exc:    # noqa: BLE001 - every waiter gets the error
                log.error("committed offsets not stored in %s: %s", self.groups.journal.path,
                          exc)
                self.groups.writing -= len(batch)
                self.failed += len(batch)
                for _d, _a, f in batch:
                    if not f.done():
                        f.set_exception(exc)
                continue
            self.writes += 1
            for _d, apply, f in batch:
                apply()
                if not f.done():
                    f.set_result(None)
            # only now: a compaction (maybe on another thread) must find them in the state
            self.groups.writing -= len(batch)
            self.groups._maybe_compact()

    def _write(self, data: bytes) -> None:
        with self.groups.append_lock:      # not between a compaction's snapshot and rewrite
            self.groups.journal.append(data)
        if self.sync:
            self.groups.journal.sync()

    async def close(self) -> None:
        """Finish the writes under way, then stop the writer thread."""
        if self._drainer is not None:
            await asyncio.shield(self._drainer)
        self._executor.shutdown(wait=True)
