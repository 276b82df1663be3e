"""``verify``: check every byte of a store that can be checked, one Spark task per file group.

One task per commit-log segment (every record: lengths at both ends, magic, CRC32C, physical
offset; the footer of a sealed segment; each record's consume-queue unit and key-index entries),
one per consume queue (every unit points at a record of its topic, queue and offset, in log
order) and one per key-index file (chains, slot heads, counters). The checks are in
``strata.index.verify`` (``strata verify`` runs them too, in one process); this module plans
them on the driver and runs them.

The store is opened read-only and no lock is taken, so a stopped store and one that a writer
has open can both be verified. For a live store verify takes the writer's confirmed and
dispatched offsets once, at the start: records up to the confirmed offset are checked, and
queue units and index entries must exist for records below the dispatched offset (above it the
writer may not have dispatched them yet; what exists there is still checked).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from strata.errors import CorruptStoreError
from strata.files.layout import COMMITLOG_DIR
from strata.log.verify import Problem
from strata.index.verify import Limits, queue_dirs, run_task
from strata.spark.jobs.progress import NullProgress

REPORT_SCHEMA = "file string, offset long, kind string, detail string"


class SummaryVerdict:
    """``ok`` and ``to_dict`` of a job's summary dataclass (it counts ``problems``)."""

    @property
    def ok(self) -> bool:
        return self.problems == 0

    def to_dict(self) -> dict:
        return asdict(self)


class ResultVerdict:
    """``ok`` of a job's result: its summary's."""

    @property
    def ok(self) -> bool:
        return self.summary.ok


@dataclass
class VerifySummary(SummaryVerdict):
    """What verify looked at and what it found."""

    store: str
    live_writer: bool = False
    min_offset: int = 0
    confirmed_offset: int = 0
    dispatched_offset: int = 0
    segments: int = 0
    records: int = 0
    bytes: int = 0
    queues: int = 0
    units: int = 0
    index_files: int = 0
    index_entries: int = 0
    problems: int = 0
    problem_kinds: dict = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class VerifyResult(ResultVerdict):
    report: object           # DataFrame[file, offset, kind, detail], sorted by file and offset
    summary: VerifySummary
    problems: list[Problem]  # the same rows, on the driver


@dataclass(frozen=True)
class _Plan:
    limits: Limits
    tasks: list          # ("segment", path, file, limit) | ("queue", topic, id) | ("index", name)
    problems: list       # found on the driver (e.g. where recovery would cut the log)


def plan(path: str | Path, summary: VerifySummary) -> _Plan:
    """Open the store read-only and decide which tasks run with which limits."""
    import strata
    from strata.spark.geometry import store_config

    cfg = store_config(path)         # StoreNotFoundError when there is no store
    problems: list[Problem] = []
    store = strata.open(path, cfg, readonly=True)
    try:
        live = store.follows_writer
        if live:
            confirmed = store.confirmed_offset()
            dispatched = store.state.read()[2]
        else:
            report = store.recovery_report
            confirmed = report.end_offset if report is not None else store.confirmed_offset()
            cp = store.checkpoint.load()
            dispatched = cp.dispatched_offset if cp is not None else 0
            if report is not None and report.truncated_at is not None:
                seg = store.log.segments.find(report.truncated_at)
                what = f"; segment files {', '.join(report.dropped_segments)} would be dropped" \
                    if report.dropped_segments else ""
                problems.append(Problem(
                    f"{COMMITLOG_DIR}/{seg.path.name}" if seg is not None else COMMITLOG_DIR,
                    report.truncated_at, "log-end",
                    f"the log ends here ({report.problem}); the next writer's recovery discards "
                    f"what follows{what}"))
        dispatched = min(dispatched, confirmed)
        log_min = store.log.min_offset()
        tasks: list = []
        for s in store.log.segment_list():
            if s.base_offset >= confirmed:
                continue
            limit = max(0, min(s.committed, confirmed - s.base_offset))
            tasks.append(("segment", str(s.path), f"commitlog/{s.path.name}", limit))
        if live:
            store.topic_table.reload()
        tasks += [("queue", t, q) for t, q in queue_dirs(store.path)]
        tasks += [("index", f["name"]) for f in store.key_index.files()]
        limits = Limits(root=str(store.path), log_min=log_min, confirmed=confirmed,
                        dispatched=dispatched, topics=dict(store.topic_table.queues),
                        since=dict(store.topic_table.since), segment_size=cfg.segment_size,
                        units_per_file=cfg.consume_queue_units, index_slots=cfg.index_slots,
                        index_entries=cfg.index_entries)
    finally:
        store.close()
    summary.live_writer, summary.min_offset = live, log_min
    summary.confirmed_offset, summary.dispatched_offset = confirmed, dispatched
    return _Plan(limits, tasks, problems)


def _run_tasks(numbers, tasks: list, lim: Limits):
    """Partition body: run the tasks whose numbers arrive; yield problems and one stats row each."""
    for i in numbers:
        problems, st = run_task(tasks[i], lim)
        for p in problems:
            yield ("problem", p.file, p.offset, p.kind, p.detail)
        yield ("stats", tasks[i][0], st.records, st.bytes, st.units, st.entries)


def verify(spark, path: str | Path, *, progress=None) -> VerifyResult:
    """Verify the store at ``path`` with ``spark``; the report lists every problem found.

    Raises ``StoreNotFoundError`` if ``path`` holds no store. A store that cannot even be opened
    read-only (e.g. a segment with a damaged header) gives a report with that one problem.
    """
    progress = progress or NullProgress()
    t0 = time.perf_counter()
    summary = VerifySummary(store=str(path))
    progress.phase("planning")
    try:
        p = plan(path, summary)
    except CorruptStoreError as exc:
        problems = [Problem("", -1, "unopenable", str(exc))]
        return _result(spark, summary, problems, t0)
    problems = list(p.problems)
    if p.tasks:
        progress.phase(f"{len(p.tasks)} tasks")
        n = len(p.tasks)
        rows = (spark.sparkContext.parallelize(range(n), n)
                .mapPartitions(partial(_run_tasks, tasks=p.tasks, lim=p.limits))
                .collect())
        for r in rows:
            if r[0] == "problem":
                problems.append(Problem(*r[1:]))
                continue
            _row, kind, records, nbytes, units, entries = r
            if kind == "segment":
                summary.segments += 1
                summary.records += records
                summary.bytes += nbytes
            elif kind == "queue":
                summary.queues += 1
                summary.units += units
            else:
                summary.index_files += 1
                summary.index_entries += entries
    return _result(spark, summary, problems, t0)


def _result(spark, summary: VerifySummary, problems: list[Problem], t0: float) -> VerifyResult:
    problems.sort(key=lambda p: (p.file, p.offset, p.kind))
    summary.problems = len(problems)
    kinds: dict[str, int] = {}
    for p in problems:
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    summary.problem_kinds = kinds
    summary.seconds = round(time.perf_counter() - t0, 3)
    report = spark.createDataFrame([(p.file, p.offset, p.kind, p.detail) for p in problems],
                                   REPORT_SCHEMA)
    return VerifyResult(report, summary, problems)
