"""Does a consume-queue unit lead to its own record? The one check shared by ``get``, the
recovery of consume queues and ``verify``.

A unit ``(commit-log offset, size, tag hash)`` at queue offset ``q`` of queue ``(topic, id)`` is
right only if a whole message record starts at that commit-log offset and says it is message
``q`` of ``(topic, id)``, ``size`` bytes long. A unit written back partly after a power loss
(its offset zero, its size kept) or never written fails this, and so does a unit whose record
the log no longer holds. The check runs in the compiled record reader
(``CommitLog.check_offsets``), a batch of units at a time, without decoding a message.
"""

from __future__ import annotations

import numpy as np

from strata.format.record_table import GOOD, OTHER
from strata.log.commit_log import CommitLog


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
    n = len(phys)
    if n == 0:
        return np.zeros(0, bool), np.zeros(0, bool)
    status, found = clog.check_offsets(phys, limit, topic=topic.encode("utf-8"),
                                       queue_id=queue_id, queue_offsets=queue_offsets)
    starts = (status == GOOD) | (status == OTHER)
    leads = status == GOOD
    if sizes is not None:
        leads &= found == np.asarray(sizes, np.int64)
    return starts, leads
