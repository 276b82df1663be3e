"""Committed offsets made durable off the event loop: the journal records of
``ConsumerGroups.commit`` are appended (and, under ``--flush sync``, fsynced) on one writer
thread, in the order the commits were made, and each committer is answered only then.

Commits that arrive while a write is under way go together in the next write (one append,
one fsync for all of them: a group commit across connections). After a write the journal is
compacted on the event loop when it has grown past its limit.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from strata.broker.group_state import Committed, ConsumerGroups

log = logging.getLogger(__name__)


class CommitWriter:
    """The one writer of committed offsets of a broker (runs on its event loop)."""

    def __init__(self, groups: ConsumerGroups, *, sync: bool) -> None:
        self.groups = groups
        self.sync = sync
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="strata-commits")
        self._pending: list[tuple[bytes, asyncio.Future]] = []
        self._drainer: asyncio.Task | None = None
        self.writes = 0          # appends made (each one covers one or more commits)
        self.commits = 0

    async def commit(self, group: str, offsets: list[tuple[str, int, Committed]]) -> None:
        """Store ``group``'s offsets — (topic, queue id, committed) — and return once they
        are durable: written (a killed process keeps them) or, with ``sync``, fsynced.
        OSError if the journal could not take them (the state in memory has them already;
        the client's retry writes them again)."""
        data = self.groups.commit(group, offsets)
        if not data:
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending.append((data, fut))
        self.commits += 1
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        await fut

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await loop.run_in_executor(self._executor, self._write,
                                           b"".join(d for d, _ in batch))
            except Exception as exc:    # noqa: BLE001 - every waiter gets the error
                log.error("committed offsets not stored in %s: %s", self.groups.journal.path,
                          exc)
                for _d, f in batch:
                    if not f.done():
                        f.set_exception(exc)
                continue
            self.writes += 1
            for _d, f in batch:
                if not f.done():
                    f.set_result(None)
            self.groups._maybe_compact()

    def _write(self, data: bytes) -> None:
        self.groups.journal.append(data)
        if self.sync:
            self.groups.journal.sync()

    async def close(self) -> None:
        """Finish the writes under way, then stop the writer thread."""
        if self._drainer is not None:
            await asyncio.shield(self._drainer)
        self._executor.shutdown(wait=True)
