"""``rebuild-index``: rebuild a store's consume queues and key index from its commit log.

One Spark task per commit-log segment reads the segment's records with the dispatch pipeline's
own reader (``strata.index.segment_scan``: lengths at both ends, magic, physical offset and —
unless ``verify_crc=False`` — CRC32C) and writes their dispatch columns as an Arrow IPC file under ``<store>/rebuild.tmp/extract/`` (executors read the
segments from the store's filesystem, so they can write next to it; only file names travel back
to the driver): topic, queue id, queue offset, commit-log offset, size, tag hash, store time,
system flag, keys and unique key. The driver feeds them in log order to the dispatch
pipeline's own dispatchers writing into a new directory, then swaps the new files in
(``strata.store.rebuild``: writer lock held throughout, crash-safe rename dance). The result is
what the dispatch pipeline builds, byte for byte.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from strata.files.layout import CONSUMEQUEUE_DIR, INDEX_DIR
from strata.errors import CorruptStoreError
from strata.files.io import file_ops
from strata.spark.jobs.progress import NullProgress

BATCH_RECORDS = 65536


@dataclass
class RebuildSummary:
    store: str
    segments: int = 0
    records: int = 0
    bytes: int = 0
    end_offset: int = 0
    queues: int = 0
    index_files: int = 0
    seconds: float = 0.0
    extract_seconds: float = 0.0
    write_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def _arrow_schema():
    import pyarrow as pa
    return pa.schema([("phys", pa.int64()), ("size", pa.int32()), ("topic", pa.string()),
                      ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                      ("tag_hash", pa.int64()), ("store_ts", pa.int64()),
                      ("sys_flag", pa.int32()), ("keys", pa.list_(pa.string())),
                      ("uniq_key", pa.string())])


def _to_arrow(batch, schema):
    """A DispatchBatch as an Arrow record batch (keys and unique key only where present)."""
    import numpy as np
    import pyarrow as pa

    n = len(batch)
    topics = pa.DictionaryArray.from_arrays(pa.array(batch.topic_codes, pa.int32()),
                                            pa.array(batch.topics, pa.string()))
    keys: list = [None] * n
    uniq: list = [None] * n
    for row, k, u in batch.keyed:
        keys[row] = k
        uniq[row] = u
    return pa.RecordBatch.from_arrays([
        pa.array(batch.offsets, pa.int64()), pa.array(batch.sizes.astype(np.int32)),
        topics.cast(pa.string()), pa.array(batch.queue_ids.astype(np.int32)),
        pa.array(batch.queue_offsets, pa.int64()), pa.array(batch.tag_hashes, pa.int64()),
        pa.array(batch.store_timestamps, pa.int64()),
        pa.array(batch.sys_flags.astype(np.int32)),
        pa.array(keys, pa.list_(pa.string())), pa.array(uniq, pa.string())], schema=schema)


def _from_arrow(rb):
    """The DispatchBatch an Arrow record batch from ``_to_arrow`` holds."""
    import numpy as np
    import pyarrow.compute as pc

    from strata.index.dispatch_batch import DispatchBatch

    topics = pc.dictionary_encode(rb.column(2))
    keys, uniq = rb.column(8), rb.column(9)
    rows = np.flatnonzero(pc.or_(pc.is_valid(keys), pc.is_valid(uniq)).to_numpy(
        zero_copy_only=False))
    keyed = []
    if len(rows):
        k_list = keys.take(rows).to_pylist()
        u_list = uniq.take(rows).to_pylist()
        keyed = [(int(r), k or [], u) for r, k, u in zip(rows.tolist(), k_list, u_list)]
    col = lambda i: rb.column(i).to_numpy()  # noqa: E731
    return DispatchBatch(topics.dictionary.to_pylist(), topics.indices.to_numpy(), col(3),
                         col(4), col(0), col(1), col(5), col(6), col(7), keyed)


def extract_segment(span, out_path: str, verify_crc: bool = True) -> tuple[int, list]:
    """Write the dispatch columns of every record of one segment to ``out_path`` (an Arrow
    IPC file); returns (records, problems). A damaged record ends the scan and is a problem."""
    import pyarrow as pa

    from strata.files.segment import MappedSegment
    from strata.format.segment import KIND_COMMIT_LOG
    from strata.index.segment_scan import SegmentScan

    schema = _arrow_schema()
    seg = MappedSegment.open(Path(span.path), KIND_COMMIT_LOG, readonly=True)
    tmp = out_path + ".tmp"
    try:
        scan = SegmentScan(seg, span.limit, span.file, verify_crc=verify_crc)
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for batch in scan.batches(BATCH_RECORDS):
                writer.write_batch(_to_arrow(batch, schema))
    finally:
        seg.close()
    file_ops().replace(tmp, out_path)
    return scan.records, [(p.file, p.offset, p.kind, p.detail) for p in scan.problems]


def _extract_tasks(numbers, spans: list, work_dir: str, verify_crc: bool):
    for i in numbers:
        out = str(Path(work_dir) / f"{i:08d}.arrow")
        records, problems = extract_segment(spans[i], out, verify_crc)
        yield i, out, records, problems


def _batches(files: list[str]):
    """DispatchBatches in log order from the extracted files; each file is deleted once read."""
    import pyarrow as pa

    for f in files:
        with pa.memory_map(f) as src:
            reader = pa.ipc.open_file(src)
            for k in range(reader.num_record_batches):
                batch = _from_arrow(reader.get_batch(k))
                if len(batch):
                    yield batch
                del batch
            del reader
        Path(f).unlink()


def rebuild_index(spark, path: str | Path, *, verify_crc: bool = True, units_per_file=None,
                  index_slots=None, index_entries=None, progress=None) -> RebuildSummary:
    """Rebuild the consume queues and key index of the stopped store at ``path``.

    The files' geometry (units per consume-queue file, key-index slots and entries) is taken
    from the existing files, else StoreConfig's defaults; give it explicitly when the
    directories are gone and the store was configured otherwise (strata does not record its
    configuration, only the files do).

    Raises ``StoreNotFoundError`` (no store), ``StoreLockedError`` (a writer has it open) or
    ``CorruptStoreError`` (a damaged record: nothing is changed; run verify for the details).
    """

    from strata.format.key_index import parse_file_name
    from strata.spark.geometry import store_config
    from strata.store.rebuild import IndexRebuild

    progress = progress or NullProgress()
    t0 = time.perf_counter()
    summary = RebuildSummary(store=str(path))
    progress.phase("planning")
    cfg = store_config(path)
    for name, value in (("consume_queue_units", units_per_file), ("index_slots", index_slots),
                        ("index_entries", index_entries)):
        if value is not None:
            setattr(cfg, name, value)
    cfg.validate()
    with IndexRebuild(path, cfg) as rb:
        spans = rb.segments
        summary.segments = len(spans)
        summary.end_offset = rb.end_offset
        summary.bytes = sum(s.limit for s in spans)
        files: list[str] = []
        if spans:
            progress.phase(f"extracting {len(spans)} segment(s)")
            n = len(spans)
            work = rb.work_dir()
            results = sorted(spark.sparkContext.parallelize(range(n), n)
                             .mapPartitions(partial(_extract_tasks, spans=spans,
                                                    work_dir=str(work), verify_crc=verify_crc))
                             .collect())
            damaged = [p for r in results for p in r[3]]
            if damaged:
                lines = "; ".join(f"{f} offset {o}: {k} ({d})" for f, o, k, d in damaged[:5])
                raise CorruptStoreError(
                    f"the commit log has {len(damaged)} damaged segment(s), so nothing was "
                    f"rebuilt or changed: {lines}. Run 'strata spark verify' for the full report")
            files = [r[1] for r in results]
            total = sum(r[2] for r in results)
        else:
            total = 0
        t1 = time.perf_counter()
        summary.extract_seconds = round(t1 - t0, 3)
        progress.phase("writing consume queues and key index", total)
        summary.records = rb.build(_batches(files), on_batch=progress.advance)
        progress.phase("swapping the new files in")
        rb.swap()
        summary.write_seconds = round(time.perf_counter() - t1, 3)
    root = Path(path)
    summary.queues = sum(1 for t in (root / CONSUMEQUEUE_DIR).iterdir() if t.is_dir()
                         for q in t.iterdir() if q.is_dir()) \
        if (root / CONSUMEQUEUE_DIR).is_dir() else 0
    summary.index_files = sum(1 for p in (root / INDEX_DIR).iterdir()
                              if parse_file_name(p.name) is not None) \
        if (root / INDEX_DIR).is_dir() else 0
    summary.seconds = round(time.perf_counter() - t0, 3)
    return summary
