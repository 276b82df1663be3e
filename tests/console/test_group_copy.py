"""The console's reading of a live broker's groups while the group worker changes them:
every row it sees is one queue's state at one moment (a copy taken in turn with the
worker's changes), never half of one change and half of the next."""

from __future__ import annotations

import asyncio
import sys
import threading

from strata.broker.group_state import ConsumerGroups
from strata.broker.group_worker import GroupWorker
from strata.console.groups_view import GroupSource

DEADLINE_MS = 1 << 50


def _churn(groups: ConsumerGroups, start: int, n: int) -> None:
    """On the worker: ``n`` deliveries handed out and acknowledged one after another, so
    the queue's in-flight set keeps turning from empty to one and back."""
    for o in range(start, start + n):
        groups.pop("g", "t", 0, 0, [(o, 0)], o + 1, DEADLINE_MS)
        groups.forget("g", "t", 0, [o])


def _check(rows) -> None:
    """One queue's row is consistent: nothing in flight means the first offset not acked
    is the pop offset; one in flight, that one (below the pop offset)."""
    for key, (commit, pop, flying, _retry) in rows.items():
        if flying == 0:
            assert commit == pop, (key, commit, pop, flying)
        else:
            assert flying == 1 and commit == pop - 1, (key, commit, pop, flying)


def test_rows_are_a_consistent_copy_while_the_worker_changes_groups(tmp_path):
    groups = ConsumerGroups(tmp_path)
    source = GroupSource(tmp_path, live=groups)
    problems: list[BaseException] = []
    seen = [0]
    stop = threading.Event()

    def reader() -> None:          # the console's thread, reading as a page or sample does
        while not stop.is_set():
            try:
                rows = source.rows()
                _check(rows)
                seen[0] += bool(rows)
            except BaseException as exc:    # noqa: BLE001 - reported below
                problems.append(exc)
                return

    async def main() -> None:
        worker = GroupWorker()
        source.worker = worker
        t = threading.Thread(target=reader)
        t.start()
        try:
            for i in range(2000):
                await worker.call(_churn, groups, i * 20, 20)
                await source.refresh()
        finally:
            stop.set()
            t.join()
            await worker.close()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)     # hand the GIL over as often as it goes: a race shows
    try:
        asyncio.run(main())
    finally:
        sys.setswitchinterval(old)
        groups.close()
    assert not problems, problems[0]
    assert seen[0] > 0                # the reader saw the queue's rows
    assert source.rows()[("g", "t", 0)] == (40000, 40000, 0, 0)
