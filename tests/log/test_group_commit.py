"""GroupCommitService: producers released by one fsync are gathered into the next one."""

from __future__ import annotations

import threading
import time

from strata.files.flush import GroupCommitService


class FakeLog:
    """A log whose "fsync" takes ``fsync_s`` and records how many puts each one covered. With
    ``first_takes``, the first fsync waits until that many puts are in, then sets
    ``first_fsync``."""

    def __init__(self, fsync_s: float, first_takes: int = 0) -> None:
        self.fsync_s, self.first_takes = fsync_s, first_takes
        self.lock = threading.Lock()
        self.end = 0
        self.flushed_to = 0
        self.groups: list[int] = []
        self.first_fsync = threading.Event()

    def fsync(self, _least_pages: int) -> int:
        while not self.first_fsync.is_set() and self.end < self.first_takes:
            time.sleep(0.0005)
        with self.lock:
            target = self.end
        self.groups.append(target - self.flushed_to)  # records made durable by this "fsync"
        self.first_fsync.set()
        time.sleep(self.fsync_s)
        self.flushed_to = target
        return target

    def put(self, gc: GroupCommitService) -> None:
        with self.lock:
            self.end += 1
            mine = self.end
        assert gc.wait_for(mine)


def run_producers(log: FakeLog, producers: int, rounds: int, work_s: float,
                  before=lambda k: None) -> GroupCommitService:
    """``producers`` threads each put ``rounds`` times, ``work_s`` apart, after ``before(k)``."""
    gc = GroupCommitService(log.fsync, timeout_ms=5000)
    gc.MAX_GATHER_S = 1.0  # generous, so a loaded machine's slow thread wake-ups still gather
    gc.start(0)

    def producer(k: int) -> None:
        before(k)
        for _ in range(rounds):
            time.sleep(work_s)  # the work of building the next put
            log.put(gc)

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(producers)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.stop()
    return gc


def test_released_producers_share_the_next_fsync():
    log = FakeLog(fsync_s=0.001)
    producers, rounds = 8, 30
    start = threading.Barrier(producers)
    gc = run_producers(log, producers, rounds, 0.0002, before=lambda k: start.wait())
    groups = log.groups
    assert sum(groups) == producers * rounds
    # without gathering, the first producer back starts the next fsync alone and the rest
    # follow in another (groups alternate 1 and 7: 4 on average); gathered, they come as 8
    assert producers * rounds / gc.fsyncs >= 7, groups
    assert gc.gathers > 0


def test_a_group_split_by_a_slow_start_comes_back_together():
    """Half the producers start while the first fsync runs: the next fsyncs take them with
    the others (counting only the producers an fsync released kept 4 + 4 apart for good)."""
    # the first "fsync" takes the early half, all four of them; the late half arrives while
    # it runs; each producer's work outlasts the flush thread's start of the next fsync
    log = FakeLog(fsync_s=0.003, first_takes=4)
    rounds = 30
    run_producers(log, 8, rounds, 0.001,
                  before=lambda k: log.first_fsync.wait() if k >= 4 else None)
    groups = log.groups
    assert sum(groups) == 8 * rounds
    settled = groups[4:-4]  # after the start, before the first producers finish
    assert sum(settled) / len(settled) >= 7, groups


def test_a_lone_producer_does_not_wait_for_company():
    calls = []

    def fake_fsync(_least_pages: int) -> int:
        calls.append(time.perf_counter())
        return len(calls)

    gc = GroupCommitService(fake_fsync)
    gc.start(0)
    try:
        for i in range(1, 51):
            assert gc.wait_for(i)
    finally:
        gc.stop()
    assert len(calls) == 50 and gc.fsyncs == 50
    assert gc.gathers == 0  # one producer released at a time: nobody to wait for
