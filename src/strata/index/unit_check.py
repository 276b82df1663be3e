"""Does a consume-queue unit lead to its own record? The one check shared by ``get``, the
recovery of consume queues and ``verify``.

A unit ``(commit-log offset, size, tag hash)`` at queue offset ``q`` of queue ``(topic, id)`` is
right only if a whole message record starts at that commit-log offset and says it is message
``q`` of ``(topic, id)``, ``size`` bytes long. A unit written back partly after a power loss
(its offset zero, its size kept) or never written fails this, and so does a unit whose record
the log no longer holds. The check reads the records' fixed headers with numpy, a batch of
units at a time, without decoding a message.
"""

from __future__ import annotations

import numpy as np

from strata.files.segment_queue import segment_runs
from strata.format import record as rec
from strata.format.record_batch import check_headers
from strata.format.segment import HEADER_AREA
from strata.log.commit_log import CommitLog


_V6 = rec.SYSFLAG_BORN_HOST_V6 | rec.SYSFLAG_STORE_HOST_V6


def _same_message(buf, pos: np.ndarray, limit: int, ok: np.ndarray, hdr: np.ndarray,
                  queue_id: int, queue_offsets: np.ndarray, sizes: np.ndarray | None,
                  topic: bytes) -> np.ndarray:
    """Which of the fixed headers ``hdr`` of whole records (where ``ok``) at ``pos`` of
    ``buf[:limit]`` name ``topic``/``queue_id``, their queue offset and (unless ``sizes`` is
    None) their size."""
    same = ok & (hdr["queue_offset"] == queue_offsets) & \
        (hdr["queue_id"] == queue_id) & (hdr["topic_len"] == len(topic))
    if sizes is not None:
        same &= hdr["total"] == sizes
    if not same.any():
        return same
    flags = hdr["sys_flag"]
    tpos = pos + rec.HEADER_SIZE + 12   # IPv4 born and store hosts, 6 bytes each
    if (flags & _V6).any():
        tpos = tpos + np.where(flags & rec.SYSFLAG_BORN_HOST_V6, 12, 0) + \
            np.where(flags & rec.SYSFLAG_STORE_HOST_V6, 12, 0)
    names = np.ndarray(shape=(max(0, limit - len(topic) + 1),), dtype=(np.void, len(topic)),
                       buffer=buf, strides=(1,))
    same &= names[tpos if same.all() else np.where(same, tpos, HEADER_AREA)] == np.void(topic)
    return same


def units_lead_to_records(clog: CommitLog, topic: str, queue_id: int,
                          queue_offsets: np.ndarray, phys: np.ndarray,
                          sizes: np.ndarray | None, limit: int
                          ) -> tuple[np.ndarray, np.ndarray]:
    """For units ``(phys[i], sizes[i])`` at ``queue_offsets[i]`` of ``(topic, queue_id)``:
    ``(starts, leads)``, two bool arrays. ``starts[i]``: a whole message record carrying
    commit-log offset ``phys[i]`` starts there and ends at or below ``limit``; ``leads[i]``:
    it is the record of that queue offset, of ``sizes[i]`` bytes (the unit is right; with
    ``sizes`` None the size is not compared). ``get`` checks the records it has decoded by
    their fields instead."""
    phys = np.asarray(phys, np.int64)
    queue_offsets = np.asarray(queue_offsets, np.int64)
    sizes = None if sizes is None else np.asarray(sizes, np.int64)
    n = len(phys)
    starts = np.zeros(n, bool)
    leads = np.zeros(n, bool)
    if n == 0:
        return starts, leads
    name = topic.encode("utf-8")
    segs = clog.segments.segments
    last = segs[-1] if segs else None
    if last is not None and last.base_offset <= int(phys.min()) and \
            int(phys.max()) < last.end_offset:
        runs = [(0, n, last)]          # the usual case: one run in the newest segment
    else:
        runs = segment_runs(list(segs), phys)
    for lo, hi, seg in runs:
        if seg is None or seg.closed:
            starts[lo:hi] = False
            continue
        end = HEADER_AREA + max(0, min(seg.data_size, limit - seg.base_offset))
        pos = phys[lo:hi] - seg.base_offset + HEADER_AREA
        try:   # numpy views of the mapping pin it while they live
            hdr, ok, _total, _hosts = check_headers(seg.mm, pos, phys[lo:hi], end)
            starts[lo:hi] = ok
            leads[lo:hi] = _same_message(seg.mm, pos, end, ok, hdr, queue_id,
                                         queue_offsets[lo:hi],
                                         None if sizes is None else sizes[lo:hi], name)
        except (ValueError, TypeError, IndexError):   # unmapped by retention just now
            starts[lo:hi] = False
    return starts, leads
