"""Batch write: tasks stage Arrow files under the store; the driver-side commit appends them all.

    <store>/spark-staging/<job id>/part-<partition>-<attempt>-<uuid>.arrow

Tasks never open the store (one process owns it for writing). ``commit`` — run once, driver-side,
after every task succeeded — opens the store for writing (taking its writer lock), validates every
staged row, appends them in one ``put_batch`` (which checks the whole batch before writing a
byte), flushes, and deletes the staging directory. ``abort`` deletes the staging directory, so a
failed job leaves no data in any topic.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, ShortType,
                               StringType, StructType)

from strata.spark.options import OptionError, WriteOptions

STAGING_DIR = "spark-staging"
_TEXT = (BinaryType, StringType)
_INTS = (IntegerType, LongType, ShortType)


class SchemaError(ValueError):
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


@dataclass
class StagedFile(WriterCommitMessage):
    path: str
    rows: int


class StrataWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        from strata.store.message_store import writer_alive
        if overwrite:
            raise OptionError("mode", "the strata sink only appends: use .mode('append')")
        self.o = options
        self.columns = validate_write_schema(schema, options.topic)
        root = Path(options.path)
        if (root / "commitlog").is_dir() and writer_alive(root):
            raise StoreBusyError(root)
        if not (root / "commitlog").is_dir():  # create it now: staging files go inside it
            import strata
            strata.open(root, strata.StoreConfig(prefault=False, preallocate=False)).close()
        self.job = uuid.uuid4().hex
        self.staging = str(root / STAGING_DIR / self.job)

    def write(self, iterator: Iterator) -> StagedFile:
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        tag = f"{ctx.partitionId()}-{ctx.attemptNumber()}" if ctx is not None else "x"
        staging = Path(self.staging)
        staging.mkdir(parents=True, exist_ok=True)
        final = staging / f"part-{tag}-{uuid.uuid4().hex[:8]}.arrow"
        tmp = final.with_suffix(".tmp")
        rows = 0
        writer = None
        try:
            for batch in iterator:
                batch = batch.select(self.columns)
                _check_batch(batch, self.o.topic)
                if writer is None:
                    writer = pa.ipc.new_file(str(tmp), batch.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
        finally:
            if writer is not None:
                writer.close()
        if writer is None:
            return StagedFile("", 0)
        tmp.rename(final)
        return StagedFile(str(final), rows)

    def commit(self, messages) -> None:
        try:
            if any(m is None for m in messages):  # a task failed: never publish part of a job
                raise RuntimeError("strata sink: a write task failed; nothing was appended")
            files = [m.path for m in messages if m.path]
            append_staged(self.o.path, files, self.o.topic)
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)
            _remove_if_empty(Path(self.o.path) / STAGING_DIR)

    def abort(self, messages) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        _remove_if_empty(Path(self.o.path) / STAGING_DIR)


class StoreBusyError(RuntimeError):
    def __init__(self, root: Path) -> None:
        super().__init__(f"strata sink: the store at {root} is open for writing in another "
                         "process (it holds the store's writer lock); close it there first — "
                         "Spark appends from its own driver-side process")


def _remove_if_empty(p: Path) -> None:
    try:
        p.rmdir()
    except OSError:
        pass


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


def staged_messages(files: list[str], topic_option: str | None) -> list:
    """Every staged row as a strata.Message, in file order then row order."""
    import pyarrow as pa

    import strata

    out = []
    for f in files:
        with pa.memory_map(f) as src:
            table = pa.ipc.open_file(src).read_all()
        cols = {n: table.column(n).to_pylist() for n in table.column_names}
        n = table.num_rows
        values = cols["value"]
        keys = cols.get("key", [None] * n)
        topics = [topic_option] * n if topic_option is not None else cols["topic"]
        qids = cols.get("queue_id", [None] * n)
        tags = cols.get("tags", [None] * n)
        headers = cols.get("headers", [None] * n)
        for v, k, t, q, tg, h in zip(values, keys, topics, qids, tags, headers):
            body = v.encode("utf-8") if isinstance(v, str) else v
            props = {e["key"]: _text(e["value"], "headers") for e in h} if h else None
            out.append(strata.Message(t, body, keys=(_text(k, "key"),) if k else (),
                                      tags=tg or None, properties=props, queue_id=q))
    return out


def append_staged(path: str, files: list[str], topic_option: str | None) -> int:
    """Append the staged rows to the store under its writer lock, all or nothing."""
    import strata
    from strata.errors import StoreLockedError
    from strata.spark.geometry import store_config

    msgs = staged_messages(files, topic_option)
    if not msgs:
        return 0
    try:
        store = strata.open(path, store_config(path, for_writing=True))
    except StoreLockedError:
        raise StoreBusyError(Path(path)) from None
    try:
        for t in sorted({m.topic for m in msgs}):
            store.create_topic(t) if store.queue_count(t) == 0 else None
        for m in msgs:
            if m.queue_id is not None and m.queue_id >= store.queue_count(m.topic):
                raise SchemaError(f"strata sink: column 'queue_id' is {m.queue_id} but topic "
                                  f"{m.topic!r} has {store.queue_count(m.topic)} queues")
        results = store.put_batch(msgs)  # validates the whole batch before writing anything
        bad = [r for r in results if r.status.name != "OK"]
        if bad:
            raise RuntimeError(f"strata sink: {len(bad)} appends reported {bad[0].status.name}")
        store.flush()
        store.wait_dispatched()
    finally:
        store.close()
    return len(msgs)
