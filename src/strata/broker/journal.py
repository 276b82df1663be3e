"""The consumer-group journal: the bytes of ``broker/groups.journal`` and the file itself.

An append-only file: a 16-byte header, then records ``[u32 length][u32 crc32c][payload]``
(little-endian; the CRC covers the payload). Each payload starts with a type byte. Pops,
acks, invisible-time changes and renewals are appended as they happen (``os.write``: a process crash
loses none of them); ``compact`` rewrites the file as one STATE record per queue plus the
handle counter (written whole to a temporary file, fsynced, renamed). Reading stops at the
first record whose length or CRC does not hold (a torn tail) and the opener truncates there.
The framing, the torn-tail cut and the file are ``strata.files.journal``'s (shared with the
tier's metadata log); this module owns the header and the payloads.
docs/format.md ("Broker state") describes every byte.
"""

from __future__ import annotations

import enum
import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

from crc32c import crc32c

from strata.broker.errors import CorruptJournalError
from strata.files import journal as framing
from strata.files.io import FileOps
from strata.files.journal import JournalReader, JournalWriter

log = logging.getLogger(__name__)

MAGIC = b"STRATAGJ"
VERSION = 1               # the groups journal before RENEW records
RENEW_VERSION = 2         # the groups journal since RENEW records
COMMIT_VERSION = 3        # the groups journal since COMMIT records
MEMBERS_VERSION = 4       # the groups journal since MEMBERS records
# the groups journal since given-back deliveries (a POP or STATE entry with attempt 0 and a
# handle id: due, never delivered; before, attempt 0 meant held back); it reads 1 to 4 too
GROUPS_VERSION = 5
GROUPS_READABLE = (VERSION, RENEW_VERSION, COMMIT_VERSION, MEMBERS_VERSION, GROUPS_VERSION)
HEADER = struct.Struct("<8sII")           # magic, version, crc32c of the first 12 bytes
RECORD_HEAD = framing.FRAME              # payload length, crc32c(payload)
MAX_PAYLOAD = framing.MAX_PAYLOAD
_STR_LEN = struct.Struct("<H")
_QUEUE = struct.Struct("<I")
_POP_HEAD = struct.Struct("<qqI")         # pop offset after, deadline ms, entry count
_POP_ENTRY = struct.Struct("<qIQ")        # queue offset, delivery attempt, handle id
_ACK_HEAD = struct.Struct("<I")
_OFFSET = struct.Struct("<q")
_CHANGE = struct.Struct("<qqQ")           # queue offset, deadline ms, handle id
_STATE_HEAD = struct.Struct("<qI")        # pop offset, in-flight count
_STATE_ENTRY = struct.Struct("<qqIQ")     # queue offset, deadline ms, attempt, handle id
_COUNTER = struct.Struct("<Q")
_RENEW_HEAD = struct.Struct("<I")         # entry count (after the client id)
_RENEW_ENTRY = struct.Struct("<qQqq")     # queue offset, handle id, deadline ms, renew until ms
_COMMIT = struct.Struct("<qiqi")          # committed offset, leader epoch, commit ms, metadata len
_IMAGE_LEN = struct.Struct("<I")          # length of a MEMBERS record's membership image


class Kind(enum.IntEnum):
    POP = 1
    ACK = 2
    CHANGE = 3
    STATE = 4
    COUNTER = 5
    RENEW = 6
    COMMIT = 7
    MEMBERS = 8


class Entry(NamedTuple):
    """One in-flight delivery: a queue offset, its attempt (1 = first), its handle id and,
    where the record has one per entry, its deadline (and in a RENEW, until when it may be
    renewed). A named tuple: live changes make one per message (``group_state``)."""

    offset: int
    attempt: int
    handle_id: int
    deadline_ms: int = 0
    renew_until_ms: int = 0


@dataclass(frozen=True)
class JournalRecord:
    """A decoded record. ``offset`` is the pop offset after a POP / the pop offset of a STATE;
    ``entries`` the deliveries (POP, STATE, CHANGE, RENEW) or acked offsets (ACK, attempt 0);
    ``client`` the client a RENEW's deliveries are renewed for. A COMMIT (a committed
    offset, as Kafka consumers commit them) has the offset in ``offset``, and
    ``leader_epoch``, ``metadata`` (None: null) and ``commit_ms``. A MEMBERS record has
    only ``group`` and ``image``: the group's membership as its protocol's coordinator
    encodes it (opaque here; empty: the group is gone)."""

    kind: Kind
    group: str = ""
    topic: str = ""
    queue_id: int = 0
    offset: int = 0
    deadline_ms: int = 0
    entries: tuple[Entry, ...] = ()
    counter: int = 0
    client: str = ""
    leader_epoch: int = -1
    metadata: str | None = None
    commit_ms: int = 0
    image: bytes = b""


def _names(group: str, topic: str, queue_id: int) -> bytes:
    g, t = group.encode(), topic.encode()
    return _STR_LEN.pack(len(g)) + g + _STR_LEN.pack(len(t)) + t + _QUEUE.pack(queue_id)


_frame = framing.frame


def encode_pop(group: str, topic: str, queue_id: int, pop_offset: int, deadline_ms: int,
               entries: list[tuple[int, int, int]]) -> bytes:
    """A POP record: ``entries`` are (queue offset, attempt, handle id); (offset, 0, 0) is a
    message of a FIFO topic passed over and held back, not delivered; (offset, 0, handle) a
    delivery given back before any client saw it (due at the deadline, never delivered)."""
    pack = _POP_ENTRY.pack
    return _pop_frame(group, topic, queue_id, pop_offset, deadline_ms, len(entries),
                      b"".join([pack(*e) for e in entries]))


def _pop_frame(group: str, topic: str, queue_id: int, pop_offset: int, deadline_ms: int,
               n: int, body: bytes) -> bytes:
    return _frame(bytes((Kind.POP,)) + _names(group, topic, queue_id)
                  + _POP_HEAD.pack(pop_offset, deadline_ms, n) + body)


def encode_ack(group: str, topic: str, queue_id: int, offsets: list[int]) -> bytes:
    return _frame(bytes((Kind.ACK,)) + _names(group, topic, queue_id)
                  + _ACK_HEAD.pack(len(offsets)) + struct.pack(f"<{len(offsets)}q", *offsets))


def encode_change(group: str, topic: str, queue_id: int, offset: int, deadline_ms: int,
                  handle_id: int) -> bytes:
    return _frame(bytes((Kind.CHANGE,)) + _names(group, topic, queue_id)
                  + _CHANGE.pack(offset, deadline_ms, handle_id))


def encode_state(group: str, topic: str, queue_id: int, pop_offset: int,
                 entries: list[tuple[int, int, int, int]]) -> bytes:
    """A STATE record: ``entries`` are (queue offset, deadline ms, attempt, handle id);
    attempt 0 (deadline and handle id 0) is a held-back message, as in POP."""
    body = b"".join(_STATE_ENTRY.pack(*e) for e in entries)
    return _frame(bytes((Kind.STATE,)) + _names(group, topic, queue_id)
                  + _STATE_HEAD.pack(pop_offset, len(entries)) + body)


def encode_renew(group: str, topic: str, queue_id: int, client: str,
                 entries: list[tuple[int, int, int, int]]) -> bytes:
    """A RENEW record: the deliveries ``entries`` — (queue offset, handle id, deadline ms,
    renew until ms) — are invisible until their deadline and renewed for ``client`` while it
    is connected, until ``renew until``."""
    c = client.encode()
    body = b"".join(_RENEW_ENTRY.pack(*e) for e in entries)
    return _frame(bytes((Kind.RENEW,)) + _names(group, topic, queue_id)
                  + _STR_LEN.pack(len(c)) + c + _RENEW_HEAD.pack(len(entries)) + body)


def encode_commit(group: str, topic: str, queue_id: int, offset: int, leader_epoch: int,
                  metadata: str | None, commit_ms: int) -> bytes:
    """A COMMIT record: ``group`` committed ``offset`` (the next offset to consume) for the
    queue, with the client's leader epoch (-1: none), metadata text (None: null) and the
    commit time (ms since the epoch). The last one of a queue stands."""
    meta = b"" if metadata is None else metadata.encode()
    return _frame(bytes((Kind.COMMIT,)) + _names(group, topic, queue_id)
                  + _COMMIT.pack(offset, leader_epoch, commit_ms,
                                 -1 if metadata is None else len(meta)) + meta)


def encode_members(group: str, image: bytes) -> bytes:
    """A MEMBERS record: ``group``'s membership image (members, generation, assignment: as
    the coordinator of its protocol encodes it, ``strata.broker.kafka.group_image``); an
    empty image says the group is gone. The last one of a group stands."""
    g = group.encode()
    return _frame(bytes((Kind.MEMBERS,)) + _STR_LEN.pack(len(g)) + g
                  + _IMAGE_LEN.pack(len(image)) + image)


def encode_counter(next_handle_id: int) -> bytes:
    return _frame(bytes((Kind.COUNTER,)) + _COUNTER.pack(next_handle_id))


frame = framing.frame
"""One record: ``[u32 length][u32 crc32c][payload]`` (shared by the broker's journals)."""


def encode(rec: JournalRecord) -> bytes:
    """The framed bytes of a record (the inverse of ``decode_payload``): a live change is
    built as a ``JournalRecord``, encoded and appended with this, then applied by the same
    code a replay runs (``ConsumerGroups._apply``)."""
    g, t, q = rec.group, rec.topic, rec.queue_id
    kind = rec.kind
    if kind is Kind.POP:
        pack = _POP_ENTRY.pack
        return _pop_frame(g, t, q, rec.offset, rec.deadline_ms, len(rec.entries),
                          b"".join([pack(o, a, h) for o, a, h, _d, _u in rec.entries]))
    if kind is Kind.ACK:
        return encode_ack(g, t, q, [e[0] for e in rec.entries])
    if kind is Kind.CHANGE:
        return encode_change(g, t, q, rec.offset, rec.deadline_ms, rec.entries[0].handle_id)
    if kind is Kind.STATE:
        return encode_state(g, t, q, rec.offset, [(e.offset, e.deadline_ms, e.attempt,
                                                   e.handle_id) for e in rec.entries])
    if kind is Kind.RENEW:
        return encode_renew(g, t, q, rec.client, [(e.offset, e.handle_id, e.deadline_ms,
                                                   e.renew_until_ms) for e in rec.entries])
    if kind is Kind.COMMIT:
        return encode_commit(g, t, q, rec.offset, rec.leader_epoch, rec.metadata,
                             rec.commit_ms)
    if kind is Kind.MEMBERS:
        return encode_members(g, rec.image)
    if kind is Kind.COUNTER:
        return encode_counter(rec.counter)
    raise ValueError(f"no encoding for a {kind.name} record")


def encode_header(magic: bytes = MAGIC, version: int = GROUPS_VERSION) -> bytes:
    head = struct.pack("<8sI", magic, version)
    return head + struct.pack("<I", crc32c(head))


def decode_payload(p: bytes) -> JournalRecord:
    """One record's payload; ValueError (or struct.error) if it does not parse whole."""
    kind = Kind(p[0])
    if kind is Kind.COUNTER:
        if len(p) != 1 + _COUNTER.size:
            raise ValueError("COUNTER record of the wrong size")
        return JournalRecord(kind, counter=_COUNTER.unpack_from(p, 1)[0])
    if kind is Kind.MEMBERS:
        (gl,) = _STR_LEN.unpack_from(p, 1)
        group = p[3:3 + gl].decode()
        (n,) = _IMAGE_LEN.unpack_from(p, 3 + gl)
        if 3 + gl + _IMAGE_LEN.size + n != len(p):
            raise ValueError("MEMBERS record's image length does not fit")
        return JournalRecord(kind, group, image=bytes(p[3 + gl + _IMAGE_LEN.size:]))
    pos = 1
    (gl,) = _STR_LEN.unpack_from(p, pos)
    group = p[pos + 2:pos + 2 + gl].decode()
    pos += 2 + gl
    (tl,) = _STR_LEN.unpack_from(p, pos)
    topic = p[pos + 2:pos + 2 + tl].decode()
    pos += 2 + tl
    (queue_id,) = _QUEUE.unpack_from(p, pos)
    pos += _QUEUE.size
    if kind is Kind.POP:
        pop_offset, deadline, n = _POP_HEAD.unpack_from(p, pos)
        pos += _POP_HEAD.size
        entries = tuple(Entry(o, a, h, deadline) for o, a, h in
                        _POP_ENTRY.iter_unpack(p[pos:pos + n * _POP_ENTRY.size]))
        pos += n * _POP_ENTRY.size
        rec = JournalRecord(kind, group, topic, queue_id, pop_offset, deadline, entries)
    elif kind is Kind.ACK:
        (n,) = _ACK_HEAD.unpack_from(p, pos)
        pos += _ACK_HEAD.size
        offsets = struct.unpack_from(f"<{n}q", p, pos)
        pos += 8 * n
        rec = JournalRecord(kind, group, topic, queue_id,
                            entries=tuple(Entry(o, 0, 0) for o in offsets))
    elif kind is Kind.CHANGE:
        offset, deadline, handle = _CHANGE.unpack_from(p, pos)
        pos += _CHANGE.size
        rec = JournalRecord(kind, group, topic, queue_id, offset, deadline,
                            (Entry(offset, 0, handle, deadline),))
    elif kind is Kind.RENEW:
        (cl,) = _STR_LEN.unpack_from(p, pos)
        client = p[pos + 2:pos + 2 + cl].decode()
        pos += 2 + cl
        (n,) = _RENEW_HEAD.unpack_from(p, pos)
        pos += _RENEW_HEAD.size
        entries = tuple(Entry(o, 0, h, d, u) for o, h, d, u in
                        _RENEW_ENTRY.iter_unpack(p[pos:pos + n * _RENEW_ENTRY.size]))
        pos += n * _RENEW_ENTRY.size
        rec = JournalRecord(kind, group, topic, queue_id, entries=entries, client=client)
    elif kind is Kind.COMMIT:
        offset, epoch, commit_ms, ml = _COMMIT.unpack_from(p, pos)
        pos += _COMMIT.size
        if ml < -1 or pos + max(ml, 0) > len(p):
            raise ValueError("COMMIT record's metadata length does not fit")
        metadata = None if ml < 0 else p[pos:pos + ml].decode()
        pos += max(ml, 0)
        rec = JournalRecord(kind, group, topic, queue_id, offset, leader_epoch=epoch,
                            metadata=metadata, commit_ms=commit_ms)
    else:
        pop_offset, n = _STATE_HEAD.unpack_from(p, pos)
        pos += _STATE_HEAD.size
        entries = tuple(Entry(o, a, h, d) for o, d, a, h in
                        _STATE_ENTRY.iter_unpack(p[pos:pos + n * _STATE_ENTRY.size]))
        pos += n * _STATE_ENTRY.size
        rec = JournalRecord(kind, group, topic, queue_id, pop_offset, 0, entries)
    if pos != len(p):
        raise ValueError(f"{kind.name} record has {len(p) - pos} bytes too many")
    return rec


def read_records(data: bytes, magic: bytes = MAGIC,
                 decode: Callable[[bytes], Any] = decode_payload,
                 versions: tuple[int, ...] = GROUPS_READABLE,
                 reporter: framing.Reporter | None = None) -> tuple[list, int]:
    """The whole records after the header and the byte position where they end; ``magic``,
    ``decode`` and ``versions`` say which journal (the consumer groups' by default);
    ``reporter`` hears where and why the records end before the data does."""
    if len(data) < HEADER.size:
        raise CorruptJournalError(f"journal is {len(data)} bytes, shorter than its header")
    found, version, crc = HEADER.unpack_from(data)
    if found != magic or crc != crc32c(data[:12]):
        raise CorruptJournalError("journal header is damaged (magic or checksum)")
    if version not in versions:
        raise CorruptJournalError(f"journal version {version} is not one this strata reads")
    out: list = []
    reader = JournalReader(data, HEADER.size, reporter)
    for payload in reader:
        try:
            out.append(decode(payload))
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            reader.reject(f"a record that does not decode ({exc})")
            break
    return out, reader.end


class Journal:
    """The open journal file of one broker (a ``strata.files.journal.JournalWriter``);
    ``magic`` and ``decode`` name its kind of records (the consumer groups' by default).

    Rewrites run on the owner's thread; appends too, except that committed offsets
    (``strata.broker.offset_commits``) are appended from one writer thread; ``sync`` may run
    on another thread (the server fsyncs from an executor). The writer's locks keep them
    apart."""

    def __init__(self, path: Path, file_ops: FileOps | None = None, magic: bytes = MAGIC,
                 decode: Callable[[bytes], Any] = decode_payload,
                 version: int = GROUPS_VERSION,
                 readable: tuple[int, ...] = GROUPS_READABLE) -> None:
        self.path = path
        self.magic = magic
        self.version = version            # written by a new file and by a rewrite
        self.readable = readable
        self.decode = decode
        self.writer = JournalWriter(path, file_ops, keep_open=True)
        self.file_ops = self.writer.file_ops
        self.dropped_tail = 0

    @property
    def size(self) -> int:
        return self.writer.size

    def open(self) -> list:
        """Open (creating it if needed), return its records; a torn tail is cut off."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            self.writer.create(encode_header(self.magic, self.version))
        data = self.path.read_bytes()

        def torn(offset: int, dropped: int, reason: str) -> None:
            self.dropped_tail = dropped
            log.warning("%s: %d bytes after offset %d do not form whole records (%s: a write "
                        "cut short by a crash); they are cut off", self.path, dropped, offset,
                        reason)
        records, end = read_records(data, self.magic, self.decode, self.readable, torn)
        self.writer.start(end, len(data))
        return records

    def append(self, data: bytes) -> None:
        """Append whole records (a write cut short is taken back before the error is
        raised; see ``JournalWriter.append``)."""
        self.writer.append(data)

    def sync(self) -> None:
        """fsync what was appended (from any thread; a rewrite waits for it)."""
        self.writer.sync()

    def rewrite(self, records: Iterator[bytes]) -> None:
        """Replace the journal with a header and ``records``, atomically. If the new file
        cannot be written (a full disk) the old one stays, open for appends, and the error is
        raised."""
        self.writer.rewrite(encode_header(self.magic, self.version) + b"".join(records))

    def close(self) -> None:
        self.writer.close()
