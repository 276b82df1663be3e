"""Writes (batch and streaming): tasks stage Arrow files under the store; a driver-side commit
appends them.

    <store>/spark-staging/<job>/part-<partition>-<attempt>-<uuid>.arrow

Tasks never open the store (one process owns it for writing). The commit — run once,
driver-side, after every task succeeded — opens the store for writing (taking its writer lock),
checks every staged row as ``put_batch`` would, then appends them one staged record batch at a
time (so the driver holds one batch of rows, not the whole job), flushes, and deletes the
staging files. ``abort`` deletes them, so a failed job leaves no data in any topic. The batch
writer lives here; the streaming writer (stream_write.py) uses the same staging
(``stage_batches``) and append (``append_messages``) code and adds its exactly-once ledger.
"""

from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, ShortType,
                               StringType, StructType)

from strata.errors import InvalidInputError, StrataError
from strata.files.io import file_ops
from strata.files.layout import is_store
from strata.spark.options import OptionError, WriteOptions

STAGING_DIR = "spark-staging"
LOCK_WAIT_S = 5.0  # a commit waits this long for another commit's writer lock
_TEXT = (BinaryType, StringType)
_INTS = (IntegerType, LongType, ShortType)


class SchemaError(InvalidInputError):
    """The DataFrame written does not have the columns the strata sink needs."""


def validate_write_schema(schema: StructType, topic_option: str | None) -> list[str]:
    """Check the DataFrame's columns; return the ones the sink uses. Other columns are ignored
    (so a DataFrame read from strata can be written back as is)."""
    types = {f.name: f.dataType for f in schema.fields}

    def need(col: str, ok: tuple, what: str) -> None:
        if col in types and not isinstance(types[col], ok):
            raise SchemaError(f"strata sink: column '{col}' must be {what}, "
                              f"got {types[col].simpleString()}")

    if "value" not in types:
        raise SchemaError("strata sink: the DataFrame needs a 'value' column (binary or string); "
                          f"it has {', '.join(types) or 'no columns'}")
    need("value", _TEXT, "binary or string")
    need("key", _TEXT, "binary or string")
    need("topic", (StringType,), "string")
    need("queue_id", _INTS, "int")
    need("tags", (StringType,), "string")
    if "headers" in types:
        h = types["headers"]
        ok = isinstance(h, ArrayType) and isinstance(h.elementType, StructType) and \
            [f.name for f in h.elementType.fields] == ["key", "value"] and \
            isinstance(h.elementType["key"].dataType, StringType) and \
            isinstance(h.elementType["value"].dataType, _TEXT)
        if not ok:
            raise SchemaError("strata sink: column 'headers' must be "
                              "array<struct<key: string, value: binary or string>>, got "
                              f"{h.simpleString()}")
    if topic_option is None and "topic" not in types:
        raise SchemaError("strata sink: no topic: give a 'topic' column or option 'topic'")
    used = [c for c in ("value", "key", "queue_id", "tags", "headers") if c in types]
    if topic_option is None:
        used.append("topic")
    return used


class StoreBusyError(StrataError, RuntimeError):
    def __init__(self, root: Path) -> None:
        super().__init__(f"strata sink: the store at {root} is open for writing in another "
                         "process (it holds the store's writer lock); close it there first — "
                         "Spark appends from its own driver-side process")


def prepare_store(root: Path, wait_s: float = 0.0) -> None:
    """Planning-time check shared by both writers: refuse a store another process is writing
    (after waiting up to ``wait_s`` for it to let go); create a missing store now (staging
    files go inside it)."""
    from strata.store.message_store import writer_alive
    deadline = time.monotonic() + wait_s
    while is_store(root) and writer_alive(root):
        if time.monotonic() >= deadline:
            raise StoreBusyError(root)
        time.sleep(0.05)
    if not is_store(root):
        import strata
        strata.open(root, strata.StoreConfig(prefault=False, preallocate=False)).close()


@dataclass
class StagedFile(WriterCommitMessage):
    path: str  # "" when the task had no rows
    rows: int


def stage_batches(iterator: Iterator, staging: Path, columns: list[str],
                  topic_option: str | None) -> StagedFile:
    """A task's rows -> one Arrow IPC file in ``staging`` (renamed into place when whole; a
    failing task removes its partial file)."""
    import pyarrow as pa
    from pyspark import TaskContext

    ctx = TaskContext.get()
    tag = f"{ctx.partitionId()}-{ctx.attemptNumber()}" if ctx is not None else "x"
    staging.mkdir(parents=True, exist_ok=True)
    final = staging / f"part-{tag}-{uuid.uuid4().hex[:8]}.arrow"
    tmp = final.with_suffix(".tmp")
    rows = 0
    writer = None
    try:
        for batch in iterator:
            batch = batch.select(columns)
            _check_batch(batch, topic_option)
            if writer is None:
                writer = pa.ipc.new_file(str(tmp), batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
    except BaseException:
        if writer is not None:
            writer.close()
        tmp.unlink(missing_ok=True)
        raise
    if writer is None:
        return StagedFile("", 0)
    file_ops().replace(tmp, final)
    return StagedFile(str(final), rows)


class StrataWriter(DataSourceArrowWriter):
    """``df.write.format("strata")``: all or nothing per job."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("mode", "the strata sink only appends: use .mode('append')")
        self.o = options
        self.columns = validate_write_schema(schema, options.topic)
        root = Path(options.path)
        prepare_store(root)
        self.job = uuid.uuid4().hex
        self.staging = str(root / STAGING_DIR / self.job)

    def write(self, iterator: Iterator) -> StagedFile:
        return stage_batches(iterator, Path(self.staging), self.columns, self.o.topic)

    def commit(self, messages) -> None:
        try:
            if any(m is None for m in messages):  # a task failed: never publish part of a job
                raise RuntimeError("strata sink: a write task failed; nothing was appended")
            files = [m.path for m in messages if m.path]
            if files:
                store = open_for_commit(self.o.path)
                try:
                    append_staged(store, files, self.o.topic, born_timestamp=_now_ms())
                finally:
                    store.close()
        finally:
            remove_staging(self.o.path, self.staging)

    def abort(self, messages) -> None:
        remove_staging(self.o.path, self.staging)


def remove_staging(path: str, staging: str) -> None:
    shutil.rmtree(staging, ignore_errors=True)
    try:
        (Path(path) / STAGING_DIR).rmdir()  # only if empty
    except OSError:
        pass


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _check_batch(batch, topic_option: str | None) -> None:
    names = batch.schema.names
    if batch.column(names.index("value")).null_count:
        raise SchemaError("strata sink: column 'value' has a null; every message needs a value")
    if topic_option is None and batch.column(names.index("topic")).null_count:
        raise SchemaError("strata sink: column 'topic' has a null and option 'topic' is not set")


def _text(v, col: str) -> str:
    if isinstance(v, bytes):
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            raise SchemaError(f"strata sink: column '{col}' holds bytes that are not UTF-8; "
                              "strata stores keys and header values as text") from None
    return v


def staged_chunks(files: list, topic_option: str | None, *,
                  born_timestamp: int | None = None) -> Iterator[list]:
    """The staged rows as lists of strata.Message, one list per staged Arrow record batch, in
    file order then row order. ``born_timestamp`` (ms) is the producer time every message
    carries: the commit's time."""
    import pyarrow as pa

    import strata

    for f in files:
        with pa.memory_map(str(f)) as src:
            reader = pa.ipc.open_file(src)
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                n = batch.num_rows
                cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
                del batch
                values = cols["value"]
                keys = cols.get("key", [None] * n)
                topics = [topic_option] * n if topic_option is not None else cols["topic"]
                qids = cols.get("queue_id", [None] * n)
                tags = cols.get("tags", [None] * n)
                headers = cols.get("headers", [None] * n)
                out = []
                for v, k, t, q, tg, h in zip(values, keys, topics, qids, tags, headers):
                    body = v.encode("utf-8") if isinstance(v, str) else v
                    props = {e["key"]: _text(e["value"], "headers") for e in h} if h else None
                    out.append(strata.Message(t, body, keys=(_text(k, "key"),) if k else (),
                                              tags=tg or None, properties=props, queue_id=q,
                                              born_timestamp=born_timestamp))
                yield out


def staged_messages(files: list, topic_option: str | None, *,
                    born_timestamp: int | None = None) -> list:
    """Every staged row as a strata.Message (all at once: a streaming micro-batch)."""
    return [m for chunk in staged_chunks(files, topic_option, born_timestamp=born_timestamp)
            for m in chunk]


def append_staged(store, files: list, topic_option: str | None, *,
                  born_timestamp: int) -> int:
    """A batch job's commit: the staged rows, one staged record batch at a time, so the driver
    holds one batch of rows rather than the whole job (see _append). Returns the rows
    appended."""
    return _append(store, lambda: staged_chunks(files, topic_option,
                                                born_timestamp=born_timestamp))


def _append(store, chunks) -> int:
    """Append the lists of messages ``chunks()`` yields (called twice): first every one is
    checked, so a refused row leaves nothing appended; then missing topics are created (the
    store's default queue count) and each list is appended with one put_batch; at the end
    everything is made durable and dispatched. The first list needs no check_batch: its own
    put_batch refuses it before anything is written (a single list, a streaming micro-batch,
    is encoded once)."""
    topics: set[str] = set()
    for i, msgs in enumerate(chunks()):
        check_messages(store, msgs)
        if i:
            store.check_batch(msgs)
        topics.update(m.topic for m in msgs)
    for t in sorted(topics):
        if store.queue_count(t) == 0:
            store.create_topic(t)
    rows = 0
    for msgs in chunks():
        results = store.put_batch(msgs)
        if not results.ok:
            raise RuntimeError(f"strata sink: {len(results)} appends reported "
                               f"{results.status.name}")
        rows += len(msgs)
    store.flush()
    store.wait_dispatched()
    return rows


def open_for_commit(path: str, wait_s: float = LOCK_WAIT_S):
    """Open the store for writing; another commit holding the lock is waited for briefly,
    anything longer is a StoreBusyError."""
    import strata
    from strata.errors import StoreLockedError
    from strata.spark.geometry import store_config

    deadline = time.monotonic() + wait_s
    while True:
        try:
            return strata.open(path, store_config(path, for_writing=True))
        except StoreLockedError:
            if time.monotonic() >= deadline:
                raise StoreBusyError(Path(path)) from None
            time.sleep(0.05)


def check_messages(store, msgs: list) -> None:
    """Refuse rows the store would refuse, before anything is appended or recorded."""
    counts: dict[str, int] = {}
    for m in msgs:
        n = counts.get(m.topic)
        if n is None:
            n = counts[m.topic] = store.queue_count(m.topic) or store.config.default_queues
        if m.queue_id is not None and m.queue_id >= n:
            raise SchemaError(f"strata sink: column 'queue_id' is {m.queue_id} but topic "
                              f"{m.topic!r} has {n} queues")


def append_messages(store, msgs: list) -> None:
    """Append ``msgs`` with one put_batch (all or nothing), make them durable and dispatched.
    Missing topics are created with the store's default queue count."""
    if msgs:
        _append(store, lambda: iter((msgs,)))
