"""Streaming write, ``df.writeStream.format("strata")``: each micro-batch is appended exactly once.

Tasks stage rows exactly as the batch writer does (write.py). The driver-side commit of
micro-batch ``b`` of sink ``s`` (``s`` is derived from the query's checkpoint location and query
id) runs under the store's writer lock:

1. The ledger (sink_ledger.py) has no entry for ``b``: move the staged files into the sink's
   write-ahead directory ``batch-<b>/`` and fsync them; flush the log and take its end ``S``;
   append and fsync the entry ``(b, S, first row 0, n rows, born time B)``; append the n
   messages (each born at ``B``) with one ``put_batch``; flush; delete ``batch-<b>/``.
2. The ledger has an entry for ``b`` and ``batch-<b>/`` is gone: the batch was appended and
   made durable before (Spark is replaying it after a crash): append nothing.
3. The ledger has an entry and ``batch-<b>/`` still exists: the previous attempt stopped
   somewhere after its entry was durable. Recovery keeps a prefix of the log, and the writer lock
   kept the attempt's records contiguous from ``S``, so walking the log from ``S`` and matching
   records against the saved rows (topic, queue, body, keys, tags, headers, born time ``B``)
   counts exactly the k rows that made it. Append the rest (a new entry first), then delete
   ``batch-<b>/``.

So the set of a batch's rows in the log is always "none", "a prefix that the next attempt
completes" or "all", and what is appended on a replay is read from the log, never guessed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from pathlib import Path
from typing import Iterator, Mapping

from pyspark.sql.datasource import DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from strata.errors import StrataError
from strata.files.io import file_ops, fsync_dir
from strata.spark.options import OptionError, parse_write_options
from strata.spark.sink_ledger import SINKS_DIR, LedgerEntry, SinkLedger
from strata.spark.write import (LOCK_WAIT_S, STAGING_DIR, StagedFile, _now_ms, append_messages,
                                check_messages, open_for_commit, prepare_store, remove_staging,
                                stage_batches, staged_messages, validate_write_schema)

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's local property on micro-batch tasks


def _query_id(checkpoint_location: str) -> str:
    """Spark's query id from ``<checkpoint>/metadata`` when the checkpoint is a local path
    ("" otherwise). A deleted and recreated checkpoint gets a new id, hence a new sink."""
    from urllib.parse import urlparse

    parsed = urlparse(checkpoint_location)
    if parsed.scheme == "file":
        path = Path(parsed.path)
    elif parsed.scheme == "" or len(parsed.scheme) == 1:  # plain path (or a drive letter)
        path = Path(checkpoint_location)
    else:
        return ""
    try:
        first = (path / "metadata").read_text().splitlines()[0]
        return str(json.loads(first).get("id", ""))
    except (OSError, ValueError, IndexError, AttributeError):
        return ""


def sink_id(checkpoint_location: str) -> tuple[str, str]:
    """(sink id, query id): 32 hex digits of SHA-256 over the location and the query id."""
    qid = _query_id(checkpoint_location)
    digest = hashlib.sha256(f"{checkpoint_location}\n{qid}".encode()).hexdigest()
    return digest[:32], qid


class StrataStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("strata")``: staged tasks, exactly-once commit per batch id."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("outputMode", "the strata sink only appends: use outputMode "
                                            "'append'")
        self.o = parse_write_options(options)
        self.columns = validate_write_schema(schema, self.o.topic)
        ckpt = {str(k).lower(): v for k, v in options.items()}.get("checkpointlocation")
        if not ckpt:
            raise OptionError("checkpointLocation",
                              "is required: the strata sink records which micro-batches it "
                              "appended per checkpoint (exactly once)")
        self.checkpoint = str(ckpt)
        self.sink, self.query_id = sink_id(self.checkpoint)
        prepare_store(Path(self.o.path), wait_s=LOCK_WAIT_S)
        self.job = uuid.uuid4().hex

    def _staging(self, batch) -> Path:
        return Path(self.o.path) / STAGING_DIR / f"{self.sink}-{batch}"

    def write(self, iterator: Iterator) -> StagedFile:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        return stage_batches(iterator, self._staging(batch if batch is not None else self.job),
                             self.columns, self.o.topic)

    def commit(self, messages, batchId: int) -> None:
        try:
            if any(m is None for m in messages):
                raise RuntimeError(f"strata sink: a write task of micro-batch {batchId} failed; "
                                   "nothing was appended")
            files = [m.path for m in messages if m.path]
            commit_batch(self.o.path, self.sink, batchId, files, self.o.topic,
                         about={"checkpointLocation": self.checkpoint, "queryId": self.query_id})
        finally:
            self._cleanup(messages, batchId)

    def abort(self, messages, batchId: int) -> None:
        self._cleanup(messages, batchId)

    def _cleanup(self, messages, batch_id: int) -> None:
        dirs = {str(self._staging(batch_id))}
        dirs.update(str(Path(m.path).parent) for m in messages if m is not None and m.path)
        for d in sorted(dirs):
            remove_staging(self.o.path, d)


def _wal_files(wal: Path) -> list[Path]:
    return sorted(p for p in wal.iterdir() if p.suffix == ".arrow")


def _write_wal(wal: Path, files: list[str], topic_option: str | None) -> None:
    """Move the staged files into the batch's write-ahead directory and make them durable."""
    shutil.rmtree(wal, ignore_errors=True)  # an attempt that died before its ledger entry
    wal.mkdir(parents=True)
    ops = file_ops()
    for i, f in enumerate(files):
        ops.fsync_path(Path(f))
        ops.replace(f, wal / f"{i:06d}.arrow")
    meta = wal / "meta.json"
    with open(meta, "w") as fh:
        json.dump({"topic": topic_option}, fh)
        fh.flush()
        ops.fsync(meta, fh.fileno())
    for d in (wal, wal.parent, wal.parent.parent, wal.parent.parent.parent):  # up to the store
        fsync_dir(d)


def _records_from(store, start: int):
    """Decoded messages of the log from ``start`` on (a record start or a segment's end)."""
    log = store.log
    limit = store.confirmed_offset()
    off = max(start, log.min_offset())
    while off < limit:
        seg = log.segments.find(off)
        if seg is None:
            return
        for s, pos, _size in log.iter_records(off, min(limit, seg.end_offset)):
            yield log.decode_at(s.base_offset + pos)
        off = seg.end_offset


def _same(stored, m, born_ts: int) -> bool:
    return (stored.topic == m.topic and bytes(stored.body) == m.body
            and stored.born_timestamp == born_ts
            and (m.queue_id is None or stored.queue_id == m.queue_id)
            and tuple(stored.keys) == tuple(m.keys) and stored.tags == m.tags
            and dict(stored.properties) == dict(m.properties or {}))


def rows_in_log(store, entry: LedgerEntry, msgs: list) -> int:
    """How many of the rows ``entry`` set out to append are in the log: its records are
    contiguous from ``entry.start_offset``, and a crash keeps only a prefix of them."""
    j = entry.first_row
    for stored in _records_from(store, entry.start_offset):
        if j >= len(msgs) or not _same(stored, msgs[j], entry.born_ts):
            break
        j += 1
    return j - entry.first_row


class ReusedCheckpointError(StrataError, RuntimeError):
    """A micro-batch was appended before and later ones too: a new query reuses a
    checkpoint location strata cannot tell apart from the old one's."""


def commit_batch(path: str, sink: str, batch_id: int, files: list[str],
                 topic_option: str | None, about: dict | None = None,
                 lock_wait_s: float = LOCK_WAIT_S) -> int:
    """Append micro-batch ``batch_id`` of ``sink`` unless the log already has it (see the
    module docstring); returns the number of rows appended now."""
    ledger = SinkLedger(Path(path) / SINKS_DIR / sink)
    entry, newest = ledger.find(batch_id)
    wal = ledger.wal_dir(batch_id)
    if entry is not None and newest is not None and newest > batch_id:
        raise ReusedCheckpointError(
            f"strata sink: micro-batch {batch_id} was appended before and later batches (up to "
            f"{newest}) too, but Spark only ever replays its latest batch: this looks like a new "
            f"query reusing the checkpoint location {about and about.get('checkpointLocation')!r}"
            f" whose query id strata could not read; remove {ledger.directory} to start this "
            "sink afresh")
    if entry is None and not files:
        shutil.rmtree(wal, ignore_errors=True)  # left by an attempt that died before its entry
        return 0  # an empty micro-batch: nothing to append or remember
    if entry is not None and not wal.exists():
        return 0  # appended and made durable by an earlier attempt
    store = open_for_commit(path, lock_wait_s)
    try:
        if entry is None:
            _write_wal(wal, files, topic_option)
            born = _now_ms()
            try:
                msgs = staged_messages(_wal_files(wal), topic_option, born_timestamp=born)
                check_messages(store, msgs)
            except Exception:
                shutil.rmtree(wal, ignore_errors=True)  # no entry yet: forget the batch
                raise
            if about is not None and not (ledger.directory / "sink.json").exists():
                (ledger.directory / "sink.json").write_text(json.dumps(about) + "\n")
            store.flush()
            ledger.append(LedgerEntry(batch_id, store.max_commitlog_offset(), 0, len(msgs),
                                      born))
            append_messages(store, msgs)
            appended = len(msgs)
        else:
            topic = json.loads((wal / "meta.json").read_text())["topic"]
            msgs = staged_messages(_wal_files(wal), topic, born_timestamp=entry.born_ts)
            done = entry.first_row + rows_in_log(store, entry, msgs)
            appended = len(msgs) - done
            if appended:
                store.flush()
                ledger.append(LedgerEntry(batch_id, store.max_commitlog_offset(), done,
                                          len(msgs), entry.born_ts))
                append_messages(store, msgs[done:])
        shutil.rmtree(wal)
        return appended
    finally:
        store.close()
