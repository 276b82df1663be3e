"""``tier_verify``: check every chunk a tier's metadata counts, one Spark task per chunk.

The driver reads the metadata (a store's ``tiered/`` file, or the tier's own copy for a tier
alone) and checks what needs no object: each queue's chunks follow each other, ``next_offset``
ends the last one, every counted object is listed on the tier. Each task fetches one chunk's
objects and checks them against the metadata (tiered.chunk_check.chunk_problems: sizes, the
``.cq`` and ``.keys`` CRCs, every record's checks and CRC32C, topic, queue, consecutive
offsets, store times and commit-log offsets). Nothing is written anywhere.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from strata.log.verify import Problem
from strata.spark.jobs.progress import NullProgress
from strata.spark.jobs.verify import ResultVerdict, SummaryVerdict


@dataclass
class TierVerifySummary(SummaryVerdict):
    """What tier-verify looked at and what it found."""

    tier: str
    metadata: str                 # where the metadata came from
    generation: int = 0
    queues: int = 0
    chunks: int = 0
    messages: int = 0
    bytes: int = 0
    uncounted_objects: int = 0    # chunk objects no metadata counts (crash leftovers)
    problems: int = 0
    problem_kinds: dict = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class TierVerifyResult(ResultVerdict):
    summary: TierVerifySummary
    problems: list[Problem]


def load_metadata(store: str | Path | None, tier_url: str | None, endpoint: str | None):
    """(metadata, tier url, endpoint, where it came from): a store's own metadata file, or the
    copy on the tier at ``tier_url``. TierError / InvalidConfigError naming the problem."""
    from strata.spark.tier_read import open_tier
    from strata.store.tier_url import check_endpoint_url, parse_tier_url
    from strata.tiered.errors import TierError
    from strata.tiered.metadata import read_local, read_tier

    if store is not None:
        meta = read_local(store)
        if meta is None:
            raise TierError(f"store {store} has no tier metadata (tiered/): it has never "
                            "uploaded to a tier")
        return meta, meta.tier_url, meta.endpoint_url, f"{store}/tiered"
    loc = parse_tier_url(tier_url, "--tier-url")
    check_endpoint_url(endpoint, "--endpoint-url")
    backend = open_tier(loc.url, endpoint)
    try:
        meta, _ = read_tier(backend)
    finally:
        backend.close()
    if meta is None:
        raise TierError(f"{loc.url} holds no strata tier (no meta/tier.json)")
    return meta, loc.url, endpoint, f"{loc.url}/meta/tier.json"


def _check_chunks(items, url: str, endpoint: str | None):
    """Partition body: check the chunks that arrive; yield problems, then one stats row each."""
    from strata.tiered.chunk_check import chunk_problems
    from strata.tiered.connect import open_backend
    from strata.tiered.metadata import ChunkMeta

    backend = open_backend(url, endpoint)
    try:
        for topic, qid, fields in items:
            c = ChunkMeta(*fields)
            found = chunk_problems(backend, topic, qid, c)
            for p in found:
                yield ("problem", *p)
            yield ("stats", c.count if not found else 0, c.log_bytes if not found else 0)
    finally:
        backend.close()


def tier_verify(spark, store: str | Path | None = None, *, tier_url: str | None = None,
                endpoint: str | None = None, progress=None) -> TierVerifyResult:
    """Verify the tier of ``store`` (its local metadata) or the tier at ``tier_url`` alone
    (its own metadata copy) with ``spark``; the result lists every problem found."""
    from strata.tiered.connect import open_backend
    from strata.tiered.layout import chunk_path, parse_chunk_path

    progress = progress or NullProgress()
    t0 = time.perf_counter()
    progress.phase("planning")
    meta, url, endpoint, where = load_metadata(store, tier_url, endpoint)
    summary = TierVerifySummary(tier=url, metadata=where, generation=meta.generation)
    problems: list[Problem] = []
    items = []
    counted = set()
    for q in sorted(meta.queues.values(), key=lambda q: (q.topic, q.queue_id)):
        summary.queues += 1
        expect = q.chunks[0].first if q.chunks else q.next_offset
        for c in q.chunks:
            path = chunk_path(q.topic, q.queue_id, c.first, "log")
            if c.first < expect or c.count <= 0:
                problems.append(Problem(path, c.first, "order",
                                        f"chunk [{c.first}, {c.end}) overlaps the one before "
                                        f"(ends {expect}) or is empty"))
            elif c.first > expect and q.skipped == 0:
                problems.append(Problem(path, c.first, "gap",
                                        f"offsets {expect}..{c.first - 1} of {q.topic}/"
                                        f"{q.queue_id} are on no chunk and not counted as "
                                        "skipped"))
            expect = c.end
            counted.update(chunk_path(q.topic, q.queue_id, c.first, k)
                           for k in ("log", "cq", "keys"))
            items.append((q.topic, q.queue_id, tuple(asdict(c).values())))
        if q.chunks and q.next_offset != expect:
            problems.append(Problem(f"{q.topic}/{q.queue_id}", q.next_offset, "next-offset",
                                    f"next_offset {q.next_offset}, the last chunk ends at "
                                    f"{expect}"))
    backend = open_backend(url, endpoint)
    try:
        listed = {p for p in backend.list("queues/") if parse_chunk_path(p) is not None}
    finally:
        backend.close()
    summary.uncounted_objects = len(listed - counted)
    summary.chunks = len(items)
    if items:
        progress.phase(f"{len(items)} chunks")
        n = len(items)
        rows = (spark.sparkContext.parallelize(items, min(n, 4096))
                .mapPartitions(partial(_check_chunks, url=url, endpoint=endpoint))
                .collect())
        for r in rows:
            if r[0] == "problem":
                problems.append(Problem(*r[1:]))
            else:
                summary.messages += r[1]
                summary.bytes += r[2]
    problems.sort(key=lambda p: (p.file, p.offset, p.kind))
    summary.problems = len(problems)
    for p in problems:
        summary.problem_kinds[p.kind] = summary.problem_kinds.get(p.kind, 0) + 1
    summary.seconds = round(time.perf_counter() - t0, 3)
    return TierVerifyResult(summary, problems)
