"""The topic table: topic name -> number of queues and accepted message type, persisted as
JSON in ``config/topics.json``."""

from __future__ import annotations

import enum
import json
import logging
import os
from pathlib import Path

from crc32c import crc32c

from strata.errors import CorruptStoreError, InvalidInputError, TopicExistsError
from strata.files.io import DEFAULT_FILE_OPS, FileOps
from strata.files.layout import TOPICS_FILE
from strata.format.record import encode_topic, is_topic_name
from strata.index.consume_queue import oldest_unit_offset

log = logging.getLogger(__name__)

MAX_QUEUES = 1024
SCAN_UNITS = 4096  # units of a queue's first file looked at for its oldest one


class TopicType(str, enum.Enum):
    """The one kind of message a topic accepts (RocketMQ 5's topic message type)."""

    NORMAL = "normal"
    FIFO = "fifo"
    DELAY = "delay"
    TRANSACTION = "transaction"


def as_topic_type(value: object) -> TopicType:
    """``value`` (a TopicType or its name, any case) as a TopicType; InvalidInputError
    listing the types otherwise."""
    if isinstance(value, TopicType):
        return value
    try:
        return TopicType(value.lower() if isinstance(value, str) else value)
    except ValueError:
        raise InvalidInputError(
            f"message type must be one of {', '.join(t.value for t in TopicType)}, got "
            f"{value!r}") from None


def check_new_topic(topic: str, queues: int,
                    message_type: TopicType | str = TopicType.NORMAL) -> TopicType:
    """Check what ``create_topic`` is given, before anything is opened or written: the name
    (InvalidTopicError), the queue count and the message type (InvalidInputError naming the
    problem). Returns the message type as a TopicType."""
    encode_topic(topic)
    if not isinstance(queues, int) or isinstance(queues, bool) or not 1 <= queues <= MAX_QUEUES:
        raise InvalidInputError(f"queues must be an int in 1..{MAX_QUEUES}, got {queues!r}")
    return as_topic_type(message_type)


class TopicTable:
    """Which topics exist, how many queues each has and which message type it accepts.

    ``queues_dir`` (the store's ``consumequeue/``) lets a damaged file be recovered: every
    topic that has a queue directory comes back with as many queues as its highest queue
    directory says, created at its oldest unit's commit-log offset."""

    def __init__(self, directory: Path, *, readonly: bool = False,
                 file_ops: FileOps = DEFAULT_FILE_OPS, queues_dir: Path | None = None) -> None:
        self.path = Path(directory) / TOPICS_FILE
        self.readonly = readonly
        self.file_ops = file_ops
        self.queues_dir = queues_dir
        self.queues: dict[str, int] = {}
        self.since: dict[str, int] = {}   # commit-log offset at which the topic was created
        self.types: dict[str, TopicType] = {}   # topics that are not NORMAL
        self._loaded_stamp: tuple | None = None  # (inode, mtime, size) of the file last read
        self.recovered: str | None = None  # what load() did about a damaged file

    def load(self) -> None:
        try:
            st = os.stat(self.path)
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self._check_against_queue_dirs({}, "missing topic table", checked=False)
            return
        try:
            queues, since, types, checked = parse_table(raw)
        except ValueError as exc:
            self._recover(f"unreadable topic table ({exc})")
        else:
            self.queues, self.since, self.types = queues, since, types
            self._check_against_queue_dirs(queues, "topic table", checked=checked)
        self._loaded_stamp = (st.st_ino, st.st_mtime_ns, st.st_size)

    def _check_against_queue_dirs(self, queues: dict[str, int], what: str, *,
                                  checked: bool) -> None:
        """A topic or queue that has a consume-queue directory but is missing from the table
        is damage (a table without its checksum: an old file, or none at all): the table is
        rebuilt from the directories. A table whose checksum holds is what the writer wrote
        last; directories beyond it are a ``delete_topic`` cut short, only logged."""
        if self.queues_dir is None or self.readonly:
            return
        found = queue_counts_from_dirs(self.queues_dir)
        extra = sorted(t for t, n in found.items() if queues.get(t, 0) < n)
        if not extra:
            return
        if checked:
            log.warning("%s: queue directories of %s outlive the topic table (a delete_topic "
                        "cut short?); the table's checksum holds, so it stands", self.path,
                        ", ".join(extra[:5]))
            return
        self._recover(f"{what} lacks queues that {self.queues_dir} holds "
                      f"({', '.join(extra[:5])})")

    def _recover(self, problem: str) -> None:
        """A damaged file: the topics come back from the queue directories (a writer rewrites
        the file), or CorruptStoreError says what is wrong and how to repair it."""
        if self.queues_dir is None:
            raise CorruptStoreError(
                f"{self.path}: {problem}; open the store for writing once to rebuild it from "
                "the consume-queue directories")
        queues, since = topics_from_queue_dirs(self.queues_dir)
        self.queues, self.since, self.types = queues, since, {}
        self.recovered = (
            f"{self.path}: {problem}; recovered {len(queues)} topic(s) from {self.queues_dir} "
            "(queue counts from the queue directories, every message type normal; topics that "
            "never held a message are gone and come back with the next put or create_topic)")
        log.warning("%s", self.recovered)
        if not self.readonly:
            self.save()
            self.recovered += "; file rewritten"

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
        self._write(self.queues, self.since, self.types)

    def _write(self, queues: dict[str, int], since: dict[str, int],
               types: dict[str, TopicType]) -> None:
        """Replace the file crash-safely with this table (DiskFullError if there is no room;
        the caller's table is then unchanged). A NORMAL topic has no ``type`` field, so a
        store without typed topics stays readable by a strata that predates types."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        topics: dict = {}
        for t, n in sorted(queues.items()):
            entry: dict = {"queues": n, "since": since.get(t, 0)}
            if types.get(t, TopicType.NORMAL) is not TopicType.NORMAL:
                entry["type"] = types[t].value
            topics[t] = entry
        data: dict = {"version": 1, "topics": topics}
        data["crc32c"] = table_checksum(data)
        self.file_ops.write_atomic(self.path, json.dumps(data, indent=1).encode())

    def create(self, topic: str, queues: int, since: int = 0,
               message_type: TopicType = TopicType.NORMAL) -> bool:
        """Create ``topic`` with ``queues`` queues accepting ``message_type``; False if it
        already exists (unchanged)."""
        message_type = check_new_topic(topic, queues, message_type)
        if topic in self.queues:
            return False
        self._change(topic, queues, since, message_type)
        return True

    def check_same(self, topic: str, queues: int | None, kind: TopicType | None) -> None:
        """TopicExistsError if existing ``topic`` has another queue count than ``queues`` or
        another type than ``kind`` (None: either is fine), naming what it has."""
        have = self.queues.get(topic)
        if have is None:
            return
        if queues is not None and queues != have:
            raise TopicExistsError(
                f"topic {topic!r} exists with {have} queues, not {queues}; it keeps its "
                f"{have} (set_queue_count({topic!r}, n) adds queues; a count never shrinks)")
        has = self.type_of(topic)
        if kind is not None and kind is not has:
            raise TopicExistsError(
                f"topic {topic!r} exists accepting {has.value} messages, not "
                f"{kind.value}; a topic's message type never changes (delete_topic and "
                "create it again)")

    def type_of(self, topic: str) -> TopicType | None:
        """The message type ``topic`` accepts (None: no such topic)."""
        if topic not in self.queues:
            return None
        return self.types.get(topic, TopicType.NORMAL)

    def ensure(self, topic: str, queues: int, *, at_least: int = 0, since: int = 0) -> int:
        """The queue count of ``topic``, creating it (or widening it to ``at_least``)."""
        n = self.queues.get(topic)
        if n is None:
            self._change(topic, max(queues, at_least), since, TopicType.NORMAL)
        elif n < at_least:
            self._change(topic, at_least, self.since.get(topic, 0),
                         self.types.get(topic, TopicType.NORMAL))
        return self.queues[topic]

    def delete(self, topic: str) -> bool:
        if topic not in self.queues:
            return False
        self._change(topic, None, None, None)
        return True

    def _change(self, topic: str, queues: int | None, since: int | None,
                message_type: TopicType | None) -> None:
        """Set (or with None, drop) one topic: the file first, then the table, so a write
        that fails (a full disk) leaves both as they were."""
        new_queues, new_since, new_types = dict(self.queues), dict(self.since), dict(self.types)
        new_types.pop(topic, None)
        if queues is None:
            new_queues.pop(topic, None)
            new_since.pop(topic, None)
        else:
            new_queues[topic], new_since[topic] = queues, since
            if message_type is not TopicType.NORMAL:
                new_types[topic] = message_type
        self._write(new_queues, new_since, new_types)
        self.queues, self.since, self.types = new_queues, new_since, new_types


def table_checksum(data: dict) -> int:
    """CRC32C of the canonical JSON (sorted keys, no spaces, ASCII) of ``data``, the table's
    fields other than ``crc32c``."""
    return crc32c(json.dumps(data, sort_keys=True, separators=(",", ":")).encode("ascii"))


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys are all different (a flipped byte can make two equal)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _v in pairs if k in seen or seen.add(k))
        raise ValueError(f"key {dup!r} appears twice")
    return out


def _count(value: object, what: str, lo: int, hi: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < lo or \
            (hi is not None and value > hi):
        raise ValueError(f"{what} is {value!r}")
    return value


def parse_table(raw: bytes) -> tuple[dict[str, int], dict[str, int], dict[str, TopicType],
                                      bool]:
    """(queues, since, types of the topics that are not NORMAL, checksummed) from the bytes
    of ``topics.json``; ValueError naming what is wrong when they are not a whole, intact
    table (a checksum that does not match, a key that appears twice or is unknown, a value
    out of range, a name that is not a topic's). A file without ``crc32c`` (written before
    strata had it) loads unchecked; a topic without ``type`` (NORMAL, or a file written
    before strata had types) is NORMAL."""
    data = json.loads(raw, object_pairs_hook=_unique_keys)  # bytes: non-UTF-8 is a ValueError
    if not isinstance(data, dict) or not isinstance(data.get("topics"), dict):
        raise ValueError("no topics object")
    unknown = sorted(set(data) - {"version", "topics", "crc32c"})
    if unknown or data.get("version") != 1:
        raise ValueError(f"unknown keys {unknown}" if unknown else
                         f"version is {data.get('version')!r}")
    checked = "crc32c" in data
    if checked:
        stored = data.pop("crc32c")
        actual = table_checksum(data)
        if stored != actual:
            raise ValueError(f"checksum mismatch (stored {stored!r}, computed {actual})")
    queues: dict[str, int] = {}
    since: dict[str, int] = {}
    types: dict[str, TopicType] = {}
    for topic, entry in data["topics"].items():
        if not is_topic_name(topic) or not isinstance(entry, dict) or \
                not set(entry) <= {"queues", "since", "type"}:
            raise ValueError(f"bad entry for topic {topic[:40]!r}")
        queues[topic] = _count(entry.get("queues"), f"{topic}'s queue count", 1, MAX_QUEUES)
        since[topic] = _count(entry.get("since", 0), f"{topic}'s since", 0)
        kind = entry.get("type", TopicType.NORMAL.value)
        if kind not in {t.value for t in TopicType}:
            raise ValueError(f"{topic}'s type is {kind!r}")
        if kind != TopicType.NORMAL.value:
            types[topic] = TopicType(kind)
    return queues, since, types, checked


def topics_from_queue_dirs(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Topics as the consume-queue directories show them: ``root/<topic>/<queue id>/``, the
    queue count one more than the highest queue id, created at (no later than) the commit-log
    offset of the oldest unit found."""
    queues = queue_counts_from_dirs(root)
    since: dict[str, int] = {}
    for topic, n in queues.items():
        tdir = Path(root) / topic
        firsts = [f for f in (oldest_unit_offset(tdir / str(q), SCAN_UNITS) for q in range(n)
                              if (tdir / str(q)).is_dir()) if f is not None]
        since[topic] = min(firsts, default=0)
    return queues, since


def queue_counts_from_dirs(root: Path) -> dict[str, int]:
    """Topic -> one more than its highest queue directory ``root/<topic>/<queue id>/`` (only
    directory listings: what a writer's open cross-checks the table with)."""
    queues: dict[str, int] = {}
    if not Path(root).is_dir():
        return queues
    for tdir in sorted(Path(root).iterdir()):
        if not is_topic_name(tdir.name) or not tdir.is_dir():
            continue
        ids = [int(q.name) for q in tdir.iterdir() if q.is_dir() and q.name.isdigit()]
        if ids and max(ids) < MAX_QUEUES:
            queues[tdir.name] = max(ids) + 1
    return queues
