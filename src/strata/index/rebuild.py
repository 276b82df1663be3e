"""Build consume queues and a key index from dispatch requests into a fresh directory.

``rebuild-index`` extracts the records of every commit-log segment (in parallel) as
``DispatchBatch``es and feeds them here in log order. The builder runs the very dispatchers the store's reput service runs
(``TopicGate`` + ``ConsumeQueueSet`` and ``KeyIndexDispatcher``), so the files it writes are the
files dispatch writes, byte for byte.
"""

from __future__ import annotations

import os
from pathlib import Path

from strata.files.io import fsync_dir
from strata.files.layout import CONSUMEQUEUE_DIR, INDEX_DIR
from strata.index.dispatch_batch import DispatchBatch
from strata.index.key_index import KeyIndex
from strata.index.queues import ConsumeQueueSet, KeyIndexDispatcher, TopicGate


class TopicsSnapshot:
    """The two maps ``TopicGate`` reads: queue count and creation offset per topic."""

    def __init__(self, queues: dict[str, int], since: dict[str, int]) -> None:
        self.queues = dict(queues)
        self.since = dict(since)


class IndexBuilder:
    """Writes ``<root>/consumequeue`` and ``<root>/index`` from requests given in log order."""

    def __init__(self, root: Path, topics: TopicsSnapshot, *, units_per_file: int,
                 index_slots: int, index_entries: int) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / CONSUMEQUEUE_DIR).mkdir(exist_ok=True)
        self.queues = ConsumeQueueSet(self.root / CONSUMEQUEUE_DIR, units_per_file)
        self.key_index = KeyIndex(self.root / INDEX_DIR, slots=index_slots, entries=index_entries)
        self._chain = [TopicGate(topics, self.queues), KeyIndexDispatcher(self.key_index)]
        self.records = 0
        self.end = 0

    def dispatch(self, batch: DispatchBatch) -> None:
        """Dispatch one batch of whole records, in commit-log order."""
        if not len(batch):
            return
        first = int(batch.offsets[0])
        if first < self.end:
            raise ValueError(f"records out of log order: offset {first} after {self.end}")
        for d in self._chain:
            d.dispatch(batch)
        self.records += len(batch)
        self.end = batch.end

    def finish(self) -> None:
        """Flush every file (the key index seals full files, as the store's flush does), close
        them and fsync every directory, so the tree is durable before it is swapped in."""
        self.queues.flush()
        self.key_index.flush()
        self.queues.close()
        self.key_index.close()
        for dirpath, _dirs, _files in os.walk(self.root, topdown=False):
            fsync_dir(dirpath)

    def abandon(self) -> None:
        self.queues.close()
        self.key_index.close()
