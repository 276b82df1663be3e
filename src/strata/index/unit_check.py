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


def byte_rows(buf, starts: np.ndarray, width: int, limit: int) -> np.ndarray:
    """``buf[s:s + width]`` for every start (each below ``limit - width``), as an (n, width)
    uint8 array: each window is gathered as one opaque item."""
    windows = np.ndarray(shape=(max(0, limit - width + 1),), dtype=(np.void, width),
                         buffer=buf, strides=(1,))
    return windows[starts].view(np.uint8).reshape(len(starts), width)


def units_lead_to_records(clog: CommitLog, topic: str, queue_id: int,
                          queue_offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray,
                          limit: int) -> tuple[np.ndarray, np.ndarray]:
    """For units ``(phys[i], sizes[i])`` at ``queue_offsets[i]`` of ``(topic, queue_id)``:
    ``(starts, leads)``, two bool arrays. ``starts[i]``: a whole message record carrying
    commit-log offset ``phys[i]`` starts there and ends at or below ``limit``; ``leads[i]``:
    it is the record of that queue offset, of ``sizes[i]`` bytes (the unit is right)."""
    phys = np.asarray(phys, np.int64)
    queue_offsets = np.asarray(queue_offsets, np.int64)
    sizes = np.asarray(sizes, np.int64)
    n = len(phys)
    starts = np.zeros(n, bool)
    leads = np.zeros(n, bool)
    want = np.frombuffer(topic.encode("utf-8"), np.uint8)
    tlen = len(want)
    for lo, hi, seg in segment_runs(list(clog.segments.segments), phys):
        if seg is None or seg.closed:
            continue
        end = HEADER_AREA + max(0, min(seg.data_size, limit - seg.base_offset))
        pos = phys[lo:hi] - seg.base_offset + HEADER_AREA
        try:   # numpy views of the mapping pin it while they live
            hdr, ok, total, hosts = check_headers(seg.mm, pos, phys[lo:hi], end)
            same = ok & (hdr["queue_id"] == queue_id) & (hdr["topic_len"] == tlen) & \
                (hdr["queue_offset"] == queue_offsets[lo:hi]) & (total == sizes[lo:hi])
            if same.any():
                tpos = np.where(same, pos + rec.HEADER_SIZE + hosts, HEADER_AREA)
                same &= (byte_rows(seg.mm, tpos, tlen, end) == want).all(axis=1)
        except (ValueError, TypeError):   # unmapped by retention just now: nothing there
            continue
        starts[lo:hi] = ok
        leads[lo:hi] = same
    return starts, leads
