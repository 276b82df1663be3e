"""Idempotent producers: InitProducerId (key 22) hands out producer ids and epochs, and
Produce checks each batch's (producer id, epoch, base sequence) against the last five
batches of that producer on that partition, as Kafka does: a batch seen before is answered
with its first offset and DUPLICATE_SEQUENCE_NUMBER's meaning (success, nothing stored
again); a gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is INVALID_PRODUCER_EPOCH.

Durable, like the data: ids are handed out from blocks whose end is written (fsync, atomic
rename) to ``broker/kafka_producers.json`` before an id of the block is used, so a restart
never repeats one. The first message of every idempotent batch carries
``KAFKA_PRODUCER`` = ``pid:epoch:base_sequence:count`` in the same record as the data, and the
sequence table is rebuilt at start from a snapshot (written at a clean stop and every
SNAPSHOT_S) plus a scan of the log after the snapshot's offset: a batch whose data survived
a crash is known as a duplicate after it, and one that did not survive is not.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from strata.broker.kafka import api
from strata.broker.kafka import errors as ke
from strata.files.io import FileOps
from strata.store.message_store import MessageStore

log = logging.getLogger(__name__)

FILE = "kafka_producers.json"
PROP = "KAFKA_PRODUCER"
ID_BLOCK = 1000
KEEP = 5                    # batches remembered per producer and partition, as Kafka
SNAPSHOT_S = 30.0
MAX_SEQ = 2**31 - 1

InitProducerIdResponse = api.response_class(22)


class Sequences:
    """Producer ids, epochs and the last batches per (producer, topic, partition)."""

    def __init__(self, broker_dir: Path, store: MessageStore) -> None:
        self.path = Path(broker_dir) / FILE
        self.store = store
        self.ops = FileOps()
        self.next_id = 0
        self.id_limit = 0
        self.epochs: dict[int, int] = {}
        # (pid, topic, partition) -> deque of [epoch, first seq, last seq, first offset]
        self.batches: dict[tuple[int, str, int], deque] = {}
        self.transactional: dict[str, int] = {}
        self._last_snapshot = time.monotonic()
        self._writer: ThreadPoolExecutor | None = None     # persist()'s, made on first use
        self._block: asyncio.Future | None = None     # the write of the id block in use
        self._load()

    # ------------------------------------------------------------------ persistence

    def _load(self) -> None:
        if not self.path.exists():
            self._write(self.store.max_commitlog_offset())
            return
        try:
            state = json.loads(self.path.read_text("utf-8"))
            self.next_id = self.id_limit = int(state["id_limit"])
            self.epochs = {int(k): int(v) for k, v in state["epochs"].items()}
            self.transactional = {k: int(v) for k, v in state.get("transactional", {}).items()}
            for row in state["batches"]:
                pid, topic, part, entries = row
                self.batches[(pid, topic, part)] = deque((list(e) for e in entries), KEEP)
            since = int(state["offset"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            from strata.errors import CorruptStoreError
            raise CorruptStoreError(f"{self.path}: cannot be read ({exc}); the Kafka "
                                    "producer state is damaged") from None
        replayed = self._replay(since)
        if replayed:
            log.info("kafka producer state: %d idempotent batches replayed from the log",
                     replayed)
        self._write(self.store.max_commitlog_offset())

    def _replay(self, since: int) -> int:
        n = 0
        for m in self.store.scan(max(since, self.store.first_commitlog_offset())):
            props = m.properties
            mark = props.get(PROP) if props else None
            if mark is None:
                continue
            try:
                pid, epoch, seq, count = (int(x) for x in mark.split(":"))
            except ValueError:
                continue
            self._remember(pid, epoch, m.topic, m.queue_id, seq, count, m.queue_offset)
            self.id_limit = max(self.id_limit, pid + 1)
            self.next_id = max(self.next_id, self.id_limit)
            n += 1
        return n

    def _state(self, offset: int) -> bytes:
        """The table as written (taken on the event loop, where it changes)."""
        self._last_snapshot = time.monotonic()
        state = {"id_limit": self.id_limit, "offset": offset,
                 "epochs": {str(k): v for k, v in self.epochs.items()},
                 "transactional": self.transactional,
                 "batches": [[pid, topic, part, [list(e) for e in q]]
                             for (pid, topic, part), q in self.batches.items()]}
        return json.dumps(state).encode("utf-8")

    def _write(self, offset: int) -> None:
        self.ops.write_atomic(self.path, self._state(offset))

    def snapshot(self) -> None:
        """Write the table (and where in the log it is complete up to), on this thread: at
        start and at a clean stop, when nothing else is served."""
        self._write(self.store.max_commitlog_offset())

    async def persist(self) -> None:
        """``snapshot`` while serving: the table taken here, its write and fsync on the one
        writer thread (in order), never on the event loop."""
        data = self._state(self.store.max_commitlog_offset())
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="kafka-producers")
        await asyncio.get_running_loop().run_in_executor(self._writer, self.ops.write_atomic,
                                                         self.path, data)

    async def maybe_persist(self) -> None:
        """``persist`` if the last snapshot is older than SNAPSHOT_S."""
        if time.monotonic() - self._last_snapshot > SNAPSHOT_S:
            await self.persist()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.shutdown(wait=True)

    # ------------------------------------------------------------------ ids

    async def new_producer(self, transactional_id: str | None, pid: int = -1,
                           epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch) for InitProducerId."""
        if pid >= 0 and self.epochs.get(pid) == epoch:      # KIP-360: bump the epoch
            self.epochs[pid] = epoch + 1
            return pid, epoch + 1
        if transactional_id is not None and transactional_id in self.transactional:
            pid = self.transactional[transactional_id]
            self.epochs[pid] = self.epochs.get(pid, 0) + 1
            return pid, self.epochs[pid]
        if self.next_id >= self.id_limit:
            self.id_limit = self.next_id + ID_BLOCK
            self._block = asyncio.ensure_future(self.persist())
        pid = self.next_id
        self.next_id += 1
        if self._block is not None:    # the block's end is durable before an id of it is used
            try:                       # (also by a request that comes while it is written)
                await asyncio.shield(self._block)
            except Exception:
                self.id_limit = self.next_id     # the next id writes its block again
                self._block = None
                raise
        self.epochs[pid] = 0
        if transactional_id is not None:
            self.transactional[transactional_id] = pid
        return pid, 0

    # ------------------------------------------------------------------ sequences

    def check(self, pid: int, epoch: int, topic: str, part: int, seq: int,
              count: int) -> tuple[int, int, list | None]:
        """(error code, first offset of a duplicate or -1, entry) for a new batch. An
        accepted batch is remembered at once (pipelined requests of one producer are checked
        before the previous one is stored); ``stored``/``failed`` settle its entry."""
        known = self.epochs.get(pid)
        if known is None:
            if pid >= self.id_limit:
                return ke.UNKNOWN_PRODUCER_ID, -1, None
            self.epochs[pid] = known = epoch
        if epoch < known:
            return ke.INVALID_PRODUCER_EPOCH, -1, None
        key = (pid, topic, part)
        q = self.batches.get(key)
        last = (seq + count - 1) % (MAX_SEQ + 1)
        if q and epoch == q[-1][0]:
            for e in q:
                if e[0] == epoch and e[1] == seq and e[2] == last:
                    return ke.DUPLICATE_SEQUENCE_NUMBER, e[3], None
            if seq != (q[-1][2] + 1) % (MAX_SEQ + 1):
                return ke.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, None
        # else: a producer's first batch here (or after an epoch bump, or one whose batches a
        # restart did not keep): accepted from any sequence
        entry = self._remember(pid, epoch, topic, part, seq, count, -1)
        return ke.NONE, -1, entry

    def _remember(self, pid: int, epoch: int, topic: str, part: int, seq: int, count: int,
                  offset: int) -> list:
        q = self.batches.get((pid, topic, part))
        if q is None or (q and epoch > q[-1][0]):
            q = self.batches[(pid, topic, part)] = deque(maxlen=KEEP)
        entry = [epoch, seq, (seq + count - 1) % (MAX_SEQ + 1), offset]
        q.append(entry)
        if self.epochs.get(pid, -1) < epoch:
            self.epochs[pid] = epoch
        return entry

    @staticmethod
    def stored(entry: list, offset: int) -> None:
        """The batch of ``entry`` was stored with its first record at queue offset
        ``offset``."""
        entry[3] = offset

    def failed(self, pid: int, topic: str, part: int, entry: list) -> None:
        """The batch of ``entry`` was not stored: forget it (a retry is not a duplicate)."""
        q = self.batches.get((pid, topic, part))
        if q is not None:
            try:
                q.remove(entry)
            except ValueError:
                pass


def sequences(broker) -> Sequences:
    """The broker's Sequences, made on first use."""
    seqs = broker.state.get("sequences")
    if seqs is None:
        seqs = broker.state["sequences"] = Sequences(broker.store.path / "broker", broker.store)
    return seqs


@api.handles(22, 0, 4, flexible_from=2)
async def init_producer_id(ctx: api.RequestContext, request):
    seqs = sequences(ctx.broker)
    pid = getattr(request, "producer_id", -1) if ctx.api_version >= 3 else -1
    epoch = getattr(request, "producer_epoch", -1) if ctx.api_version >= 3 else -1
    if request.transactional_id is not None:
        return InitProducerIdResponse(throttle_time_ms=0,
                                      error_code=ke.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                      producer_id=-1, producer_epoch=-1)
    pid, epoch = await seqs.new_producer(None, pid, epoch)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=ke.NONE, producer_id=pid,
                                  producer_epoch=epoch)
