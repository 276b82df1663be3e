"""The topic table: topic name -> number of queues, persisted as JSON in ``config/topics.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from strata.errors import CorruptStoreError, InvalidInputError
from strata.files.io import DEFAULT_FILE_OPS, FileOps
from strata.format.record import encode_topic

TOPICS_FILE = Path("config") / "topics.json"
MAX_QUEUES = 1024


class TopicTable:
    """Which topics exist and how many queues each has."""

    def __init__(self, directory: Path, *, readonly: bool = False,
                 file_ops: FileOps = DEFAULT_FILE_OPS) -> None:
        self.path = Path(directory) / TOPICS_FILE
        self.readonly = readonly
        self.file_ops = file_ops
        self.queues: dict[str, int] = {}
        self.since: dict[str, int] = {}   # commit-log offset at which the topic was created
        self._loaded_stamp: tuple | None = None  # (inode, mtime, size) of the file last read

    def load(self) -> None:
        try:
            st = os.stat(self.path)
            raw = self.path.read_text("utf-8")
        except FileNotFoundError:
            return
        try:
            data = json.loads(raw)
            self.queues = {str(t): int(v["queues"]) for t, v in data["topics"].items()}
            self.since = {str(t): int(v.get("since", 0)) for t, v in data["topics"].items()}
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptStoreError(f"{self.path}: unreadable topic table ({exc})") from None
        self._loaded_stamp = (st.st_ino, st.st_mtime_ns, st.st_size)

    def reload(self) -> None:
        """Read-only openers: pick up topics the writer created since. The writer replaces the
        file on every change, so an unchanged (inode, mtime, size) means nothing to read."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        if (st.st_ino, st.st_mtime_ns, st.st_size) != self._loaded_stamp:
            self.load()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": 1, "topics": {t: {"queues": n, "since": self.since.get(t, 0)}
                                         for t, n in sorted(self.queues.items())}}
        self.file_ops.write_atomic(self.path, json.dumps(data, indent=1).encode())

    def create(self, topic: str, queues: int, since: int = 0) -> bool:
        """Create ``topic`` with ``queues`` queues; False if it already exists (unchanged)."""
        encode_topic(topic)
        if not isinstance(queues, int) or isinstance(queues, bool) or not 1 <= queues <= MAX_QUEUES:
            raise InvalidInputError(f"queues must be an int in 1..{MAX_QUEUES}, got {queues!r}")
        if topic in self.queues:
            return False
        self.queues[topic] = queues
        self.since[topic] = since
        self.save()
        return True

    def ensure(self, topic: str, queues: int, *, at_least: int = 0, since: int = 0) -> int:
        """The queue count of ``topic``, creating it (or widening it to ``at_least``)."""
        n = self.queues.get(topic)
        if n is None:
            self.queues[topic] = max(queues, at_least)
            self.since[topic] = since
            self.save()
        elif n < at_least:
            self.queues[topic] = at_least
            self.save()
        return self.queues[topic]

    def delete(self, topic: str) -> bool:
        if self.queues.pop(topic, None) is None:
            return False
        self.since.pop(topic, None)
        self.save()
        return True
