"""The Kafka listener's read lanes (``strata.broker.kafka.read_lanes``): a connection's reads
run in order, one at a time; a read that waits holds its own lane only; one busy lane keeps
to one thread; the threads are bounded; a call cancelled before it starts never runs. Waits
are events (a threading.Event the test sets), never sleeps."""

import asyncio
import threading

import pytest

from strata.broker.kafka.read_lanes import ReadLanes


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_a_held_read_holds_its_own_lane_only_and_each_lane_keeps_its_order():
    async def main():
        lanes = ReadLanes(2)
        gate = threading.Event()
        ran: list[tuple[str, str]] = []

        def read(tag, hold=False):
            if hold:
                assert gate.wait(20)
            ran.append((tag, threading.current_thread().name))
            return tag

        try:
            a1, a2 = lanes.run("a", read, "a1", True), lanes.run("a", read, "a2")
            assert await lanes.run("b", read, "b1") == "b1"   # not behind a's held read
            assert await lanes.run("c", read, "c1") == "c1"
            assert not a1.done() and not a2.done()            # a2 waits for a1: in order
            gate.set()
            assert [await a1, await a2] == ["a1", "a2"]
            tags = [t for t, _n in ran]
            assert tags.index("a1") < tags.index("a2")
            names = dict(ran)
            assert names["a1"] == names["a2"]                 # one lane, one thread at a time
            assert names["b1"] != names["a1"]
            assert lanes.busy() == 0
        finally:
            lanes.shutdown()

    _run(main())


def test_one_lane_keeps_to_one_thread_and_threads_are_bounded():
    async def main():
        lanes = ReadLanes(2)
        try:
            names = {await lanes.run("only", lambda: threading.current_thread().name)
                     for _ in range(20)}
            assert len(names) == 1                   # a lone consumer: one thread, as before
            gate = threading.Event()
            held = [lanes.run(f"l{i}", gate.wait, 20) for i in range(4)]
            assert len(lanes._workers) == 2          # never more than asked for
            gate.set()
            assert await asyncio.gather(*held) == [True] * 4
        finally:
            lanes.shutdown()

    _run(main())


def test_a_call_cancelled_before_it_starts_never_runs_and_errors_reach_the_caller():
    async def main():
        lanes = ReadLanes(1)
        gate = threading.Event()
        ran = []
        try:
            first = lanes.run("a", gate.wait, 20)
            dropped = lanes.run("a", ran.append, "dropped")
            after = lanes.run("a", ran.append, "after")
            dropped.cancel()
            gate.set()
            await first
            await after
            assert ran == ["after"]

            def bad():
                raise ValueError("a bad read")
            with pytest.raises(ValueError, match="a bad read"):
                await lanes.run("a", bad)
        finally:
            lanes.shutdown()
        with pytest.raises(RuntimeError):
            await lanes.run("a", ran.append, "late")

    _run(main())


def test_no_threads_is_refused():
    with pytest.raises(ValueError):
        ReadLanes(0)
