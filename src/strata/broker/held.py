"""Held messages: what the broker keeps back from their topics for a while — delay messages
until their delivery time, half messages of transactions until they are resolved.

A held message is encoded as a whole message record (the commit log's own format, CRC
included) and kept in a ref-counted store of its own, ``broker/held/`` (``strata.refstore``),
under a random 16-byte id; ``broker/held.journal`` (``strata.broker.held_journal``) is its
index: HOLD when a message is held, MOVING before held messages are put into their topics,
RELEASE when they are gone. A send is answered only once its body is fsynced by the ref store
and its HOLD is written (and, under ``--flush sync``, fsynced).

Moving into a topic is idempotent: each moved copy carries its held id (``__HELD_ID``), and
a MOVING record names the commit-log offset its copies start at, so after a crash between the
put and the RELEASE the open finds the copies already stored and releases them instead of
putting them again.

Runs on the server's event loop (one thread), except the journal's writes: its appends and
compactions run on a writer thread of their own (a ``GroupWorker``: in the order asked, the
ones asked while it is busy in one hop), so a write the disk holds up (a full page cache, a
compaction's fsync) holds only the sends, moves and resolutions that wait for it, never
another client's call. The state in memory changes on the loop, before its record is queued:
a compaction (which copies the entries on the loop and is queued behind the appends asked
before it) then writes what the file holds once those appends are in. The ref store's
confirms arrive on its own thread and are handed to the loop.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Sequence

import strata.refstore as refstore
from strata.broker import held_journal as hj
from strata.broker.group_worker import GroupWorker
from strata.broker.properties import PROP_HELD_ID, PROP_MESSAGE_GROUP
from strata.broker.journal import Journal
from strata.errors import CorruptRecordError
from strata.format.record import check_record, decode_record, encode_record
from strata.store.message import Message, PutResult, StoredMessage
from strata.store.message_store import MessageStore, now_ms

log = logging.getLogger(__name__)

JOURNAL_NAME = "held.journal"
STORE_NAME = "held"
CLIENT_REF = "held"
COMPACT_BYTES = 16 << 20
SYNC_INTERVAL_S = 0.02          # the ref store's fsync interval: what a held send waits at most
NO_HOST = ("0.0.0.0", 0)        # a held message without a born host

Put = Callable[[list[Message]], Awaitable[Sequence[PutResult]]]


@dataclass
class HeldEntry:
    """One held message: ``due_ms`` is its delivery time (delay) or next check (transaction)."""

    id: bytes
    kind: hj.Kind
    due_ms: int
    checks: int
    topic: str
    message_id: str
    busy: bool = False     # being moved or released right now
    moved_from: int | None = None   # a failed move's MOVING offset: its copies may exist


def encode_held(m: Message, now: int) -> bytes:
    """A held message as a whole message record (queue and log offsets 0)."""
    return encode_record(queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0,
                         born_ts=m.born_timestamp or now, store_ts=now, tx_offset=0,
                         reconsume=0, born_host=m.born_host or NO_HOST, store_host=NO_HOST,
                         topic=m.topic, keys=m.keys, tags=m.tags, properties=m.properties,
                         body=m.body)


def decode_held(data: bytes) -> StoredMessage:
    """The record ``encode_held`` made; CorruptRecordError if it fails its checks."""
    _kind, size = check_record(data, 0, len(data))
    if size != len(data):
        raise CorruptRecordError(f"held record is {len(data)} bytes, its header says {size}", 0)
    return decode_record(data, 0)


def released_message(sm: StoredMessage, held_id: bytes) -> Message:
    """The message a held record puts into its topic, marked with its held id."""
    props = sm.properties
    props[PROP_HELD_ID] = held_id.hex()
    born_host = None if sm.born_host == NO_HOST else sm.born_host
    return Message(sm.topic, sm.body, keys=sm.keys, tags=sm.tags, properties=props,
                   shard_key=props.get(PROP_MESSAGE_GROUP), born_timestamp=sm.born_timestamp,
                   born_host=born_host)


class HeldMessages:
    """The held store of one broker: bodies in a ref store, the index in a journal."""

    def __init__(self, directory: Path, store: MessageStore, put: Put | None, *,
                 sync: bool = False) -> None:
        self.store = store
        self.put = put            # how moved messages are stored (the service's batcher)
        self.sync = sync
        self.entries: dict[bytes, HeldEntry] = {}
        self._waiting: dict[bytes, asyncio.Future] = {}
        self._moving = 0          # moves between their MOVING and their RELEASE
        self._appended = 0        # records appended (counted for the group fsync)
        self._synced = 0          # of which an fsync covers this many
        self._syncing: asyncio.Task | None = None
        self._compacting = False  # a compaction is queued on the writer
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writer = GroupWorker("strata-held-journal", "held-journal")
        self.journal = Journal(directory / JOURNAL_NAME, magic=hj.MAGIC, decode=hj.decode,
                               version=hj.VERSION, readable=(hj.VERSION,))
        moving: dict[bytes, int] = {}        # id -> log offset its copy may start at
        for r in self.journal.open():
            self._apply(r, moving)
        try:
            found = self._finish_moves(moving)
            self.recovered_moves = len(found)
            # found ones still hold their reference (a clean start's saved counts, or the
            # rebuilt ones below); it is dropped right after the open
            self.refs = refstore.open(directory / STORE_NAME, client_refs=[CLIENT_REF],
                                      recover_refs=[(i, 1) for i in [*self.entries, *found]],
                                      sync_interval=SYNC_INTERVAL_S)
        except BaseException:
            self.journal.close()
            raise
        try:
            self.client = self.refs.client(CLIENT_REF, on_disk=self._on_disk)
            if found:
                self.client.remove(found)
            lost = [i for i in self.entries if self.refs.locate(i) is None]
            for i in lost:
                log.error("held message %s (topic %s) has no body in %s; it is dropped",
                          i.hex(), self.entries[i].topic, self.refs.directory)
                del self.entries[i]
            self.compact()
        except BaseException:
            self.refs.close()
            self.journal.close()
            raise

    # ------------------------------------------------------------------ open

    def _apply(self, r: hj.HeldRecord, moving: dict[bytes, int]) -> None:
        if r.type is hj.Type.HOLD:
            self.entries[r.ids[0]] = HeldEntry(r.ids[0], r.kind, r.due_ms, r.checks, r.topic,
                                               r.message_id)
        elif r.type is hj.Type.CHECKED:
            e = self.entries.get(r.ids[0])
            if e is not None:
                e.checks, e.due_ms = r.checks, r.due_ms
        elif r.type is hj.Type.MOVING:
            for i in r.ids:
                if i in self.entries:
                    moving[i] = min(moving.get(i, r.log_offset), r.log_offset)
        else:
            for i in r.ids:
                self.entries.pop(i, None)
                moving.pop(i, None)

    def _stored_copies(self, moving: dict[bytes, int]) -> list[bytes]:
        """Of the held ids whose move began at the given commit-log offsets, those whose copy
        is in the commit log (a scan of the log: any thread)."""
        wanted = {i.hex(): i for i in moving}
        found: list[bytes] = []
        for m in self.store.scan(min(moving.values())):
            hid = m.properties.get(PROP_HELD_ID)
            if hid is not None and hid in wanted:
                found.append(wanted.pop(hid))
        return found

    def _released_as_moved(self, found: list[bytes]) -> bytes:
        """Take ``found`` out of the entries; their RELEASE record (b"" if none) for the
        caller to append."""
        if not found:
            return b""
        for i in found:
            del self.entries[i]
        return hj.encode_release(hj.Reason.MOVED, found)

    def _finish_moves(self, moving: dict[bytes, int]) -> list[bytes]:
        """Moves a crash cut short: copies found in the commit log are released, the rest
        stay held (and move again when due / committed). Returns the ids found."""
        if not moving:
            return []
        found = self._stored_copies(moving)
        self._append_now(self._released_as_moved(found))
        log.info("held messages: %d moves cut short by a crash were already stored, %d will "
                 "be moved again", len(found), len(moving) - len(found))
        return found

    def compact(self) -> None:
        """Rewrite the journal as one HOLD per held message (atomically), and one MOVING per
        failed move whose copies may be stored. Here and now: at open and close, and on the
        writer thread (``_maybe_compact``)."""
        self._rewrite(list(self.entries.values()))

    def _rewrite(self, entries: list[HeldEntry]) -> None:
        failed: dict[int, list[bytes]] = {}
        for e in entries:
            if e.moved_from is not None:
                failed.setdefault(e.moved_from, []).append(e.id)
        upto = self._appended
        self.journal.rewrite([*(hj.encode_hold(e.id, e.kind, e.due_ms, e.checks, e.topic,
                                               e.message_id) for e in entries),
                              *(hj.encode_moving(o, ids) for o, ids in failed.items())])
        self._synced = max(self._synced, upto)       # written whole and fsynced

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    # ------------------------------------------------------------------ hold

    def _on_disk(self, ids: list[bytes]) -> None:       # the ref store's thread
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._confirmed, ids)

    def _confirmed(self, ids: list[bytes]) -> None:
        for i in ids:
            fut = self._waiting.pop(i, None)
            if fut is not None and not fut.done():
                fut.set_result(None)

    def _append_now(self, data: bytes) -> None:
        """Append records here and now (at open; on the writer thread)."""
        if data:
            self.journal.append(data)
            self._appended += 1

    async def _append(self, data: bytes) -> None:
        """Append records on the writer thread, after every write asked before; returns once
        they are written (a process crash keeps them; ``_sync_journal`` for a power cut).
        A caller cancelled meanwhile leaves the write going on (it is in the queue)."""
        await asyncio.shield(self._writer.submit(self._append_now, data))

    async def _sync_journal(self) -> None:
        """Under sync flush: return once an fsync covers every record appended so far.
        Callers that wait together share one fsync (group commit)."""
        if not self.sync:
            return
        target = self._appended
        while self._synced < target:
            if self._syncing is None:
                self._syncing = asyncio.get_running_loop().create_task(self._fsync())
            await asyncio.shield(self._syncing)

    async def _fsync(self) -> None:
        upto = self._appended
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.journal.sync)
            self._synced = max(self._synced, upto)
        finally:
            self._syncing = None

    async def hold(self, msgs: list[tuple[Message, hj.Kind, int, str]]) -> list[HeldEntry]:
        """Hold messages: (message, kind, due ms, client message id) each. Returns their
        entries once their bodies are fsynced and their HOLDs written (fsynced under sync
        flush)."""
        now = now_ms()
        ids = [secrets.token_bytes(hj.ID_BYTES) for _ in msgs]
        futs = []
        for i in ids:
            fut = self._loop.create_future()
            self._waiting[i] = fut
            futs.append(fut)
        try:
            self.client.write_batch([(i, encode_held(m, now)) for i, (m, *_r) in zip(ids, msgs)])
        except BaseException:
            for i in ids:
                self._waiting.pop(i, None)
            raise
        try:
            await asyncio.gather(*futs)
        except BaseException:       # the send was cancelled (or the store failed) unanswered
            for i in ids:
                self._waiting.pop(i, None)
            self.client.remove(ids)     # no body without its HOLD stays behind
            raise
        entries = [HeldEntry(i, kind, due, 0, m.topic, mid)
                   for i, (m, kind, due, mid) in zip(ids, msgs)]
        for e in entries:        # before their HOLDs are queued: a compaction keeps them
            self.entries[e.id] = e
        try:
            await self._append(b"".join(hj.encode_hold(e.id, e.kind, e.due_ms, 0, e.topic,
                                                       e.message_id) for e in entries))
        except asyncio.CancelledError:
            raise                # the HOLDs are written all the same: held, unanswered
        except BaseException:    # not written (a full disk): nothing of it stays behind
            for e in entries:
                self.entries.pop(e.id, None)
            self.client.remove(ids)
            raise
        await self._sync_journal()
        return entries

    # ------------------------------------------------------------------ leave

    def read(self, e: HeldEntry) -> StoredMessage | None:
        """The held message (None: its body is gone). Any thread: a server calls it off its
        event loop (the held store's read may wait for a compaction of its file)."""
        data = self.client.read(e.id)
        return None if data is None else decode_held(data)

    async def move(self, entries: list[HeldEntry]) -> list[HeldEntry]:
        """Put held messages into their topics (one put, the flush mode's ack) and release
        them; returns the entries moved. An entry whose body cannot be read is dropped and
        logged. Raises what the put raises (the entries then stay held)."""
        for e in entries:
            e.busy = True
        self._moving += 1
        try:
            loop = asyncio.get_running_loop()      # (the reads below go off the loop)
            retried = {e.id: e.moved_from for e in entries if e.moved_from is not None}
            if retried:          # a put that failed may have stored some copies after all
                done = await loop.run_in_executor(None, self._stored_copies, retried)
                if done:
                    await self._append(self._released_as_moved(done))
                    self.client.remove(done)
                    entries = [e for e in entries if e.id not in set(done)]
            msgs, moved, bad = [], [], []
            datas = await loop.run_in_executor(None, self.client.read_many,
                                               [e.id for e in entries])
            for e, data in zip(entries, datas):
                try:
                    if data is None:
                        raise CorruptRecordError("its body is missing from the held store")
                    msgs.append(released_message(decode_held(data), e.id))
                    moved.append(e)
                except CorruptRecordError as exc:
                    log.error("held message %s (topic %s) cannot be read (%s); it is dropped",
                              e.id.hex(), e.topic, exc)
                    bad.append(e)
            if bad:
                await self._release(bad, hj.Reason.DROPPED)
            if not moved:
                return []
            offset = self.store.max_commitlog_offset()
            await self._append(hj.encode_moving(offset, [e.id for e in moved]))
            await self._sync_journal()
            try:
                await self.put(msgs)
            except BaseException:
                for e in moved:
                    if e.moved_from is None:
                        e.moved_from = offset
                raise
            # not waited for: the copies are stored, and a crash before the RELEASE is
            # written finds them through the MOVING record (one hop less per move)
            await self._release(moved, hj.Reason.MOVED, wait=False)
            return moved
        finally:
            self._moving -= 1
            for e in entries:
                e.busy = False
            self._maybe_compact()

    async def drop(self, entries: list[HeldEntry], reason: hj.Reason) -> None:
        """Release held messages without moving them (rolled back, or given up on)."""
        for e in entries:
            e.busy = True
        try:
            await self._release(entries, reason)
            await self._sync_journal()
        finally:
            for e in entries:
                e.busy = False

    async def _release(self, entries: list[HeldEntry], reason: hj.Reason, *,
                       wait: bool = True) -> None:
        """Release held messages: out of the entries now, their RELEASE queued on the writer
        (waited for unless ``wait`` is False), their bodies removed once it is written."""
        gone = [e for e in entries if e.id in self.entries]
        if not gone:
            return
        for e in gone:
            del self.entries[e.id]
        written = self._writer.submit(self._append_now,
                                      hj.encode_release(reason, [e.id for e in gone]))
        written.add_done_callback(lambda f: self._released(f, gone))
        if wait:
            await asyncio.shield(written)

    def _released(self, written: asyncio.Future, gone: list[HeldEntry]) -> None:
        """(On the loop.) Their RELEASE is written: the bodies go. The write failed (a full
        disk): they are held again, as the file says. The writer stopped first (the loop
        ends): the closing compaction writes the state, without them."""
        exc = written.exception()
        if isinstance(exc, OSError):
            log.error("held messages %s: their RELEASE was not written (%s); they stay held",
                      ", ".join(e.id.hex() for e in gone[:4]), exc)
            for e in gone:
                self.entries.setdefault(e.id, e)
            return
        self.client.remove([e.id for e in gone])
        if exc is None:
            self._maybe_compact()

    def _maybe_compact(self) -> None:
        """Queue a compaction on the writer once the journal is past its size (never while
        a MOVING record may be needed, an fsync runs, or one is queued already)."""
        if self.journal.size > COMPACT_BYTES and not self._moving and \
                self._syncing is None and not self._compacting:
            self._compacting = True
            done = self._writer.submit(self._rewrite, list(self.entries.values()))
            done.add_done_callback(self._compacted)

    def _compacted(self, fut: asyncio.Future) -> None:
        self._compacting = False
        if not fut.cancelled() and fut.exception() is not None:
            log.error("compacting %s failed (it stays as it is, open for appends): %s",
                      self.journal.path, fut.exception())

    async def checked(self, e: HeldEntry, checks: int, next_ms: int) -> None:
        """A half message was checked back: its count and next check time (journaled)."""
        e.checks, e.due_ms = checks, next_ms
        await self._append(hj.encode_checked(e.id, checks, next_ms))

    # ------------------------------------------------------------------ close

    async def stop(self) -> None:
        """Finish the journal writes asked so far and stop the writer thread."""
        await self._writer.close()

    def close(self) -> None:
        """Compact and close the journal, close the ref store (clean shutdown; off any
        event loop). A write still queued is not lost: the compaction writes the state in
        memory, which has every change already."""
        for fut in self._waiting.values():
            fut.cancel()
        self._writer.shutdown()
        self.compact()
        self.journal.close()
        self.client.terminate()
        self.refs.close()
