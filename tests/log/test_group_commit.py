"""GroupCommitService: producers released by one fsync are gathered into the next one."""

from __future__ import annotations

import threading
import time

from strata.files.flush import GroupCommitService


def test_released_producers_share_the_next_fsync():
    lock = threading.Lock()
    end = [0]
    groups: list[int] = []
    flushed_to = [0]

    def fake_fsync(_least_pages: int) -> int:
        with lock:
            target = end[0]
        groups.append(target - flushed_to[0])  # records made durable by this "fsync"
        time.sleep(0.001)
        flushed_to[0] = target
        return target

    gc = GroupCommitService(fake_fsync, timeout_ms=5000)
    gc.MAX_GATHER_S = 1.0  # generous, so a loaded machine's slow thread wake-ups still gather
    gc.start(0)
    producers, rounds = 8, 30
    start = threading.Barrier(producers)

    def producer() -> None:
        start.wait()
        for _ in range(rounds):
            time.sleep(0.0002)  # the work of building the next put
            with lock:
                end[0] += 1
                mine = end[0]
            assert gc.wait_for(mine)

    threads = [threading.Thread(target=producer) for _ in range(producers)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.stop()
    assert sum(groups) == producers * rounds
    # without gathering, the first producer back starts the next fsync alone and the rest
    # follow in another (groups alternate 1 and 7: 4 on average); gathered, they come as 8
    assert producers * rounds / gc.fsyncs >= 7, groups
    assert gc.gathers > 0


def test_a_group_split_by_a_slow_start_comes_back_together():
    """Half the producers start while the first fsync runs: the next fsyncs take them with
    the others (counting only the producers an fsync released kept 4 + 4 apart for good)."""
    lock = threading.Lock()
    end = [0]
    groups: list[int] = []
    flushed_to = [0]
    first_fsync = threading.Event()

    def fake_fsync(_least_pages: int) -> int:
        while not first_fsync.is_set() and end[0] < 4:
            time.sleep(0.0005)  # the first "fsync" takes the early half, all four of them
        with lock:
            target = end[0]
        groups.append(target - flushed_to[0])
        first_fsync.set()
        time.sleep(0.003)  # the late half arrives while this "fsync" runs
        flushed_to[0] = target
        return target

    gc = GroupCommitService(fake_fsync, timeout_ms=5000)
    gc.MAX_GATHER_S = 1.0
    gc.start(0)
    rounds = 30

    def producer(late: bool) -> None:
        if late:
            first_fsync.wait()
        for _ in range(rounds):
            time.sleep(0.001)  # longer than the flush thread takes to start the next fsync
            with lock:
                end[0] += 1
                mine = end[0]
            assert gc.wait_for(mine)

    threads = [threading.Thread(target=producer, args=(k >= 4,)) for k in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.stop()
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
