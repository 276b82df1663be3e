"""The group worker (strata.broker.group_worker) without a server: calls run off the event
loop, one after another in the order asked, those asked while it is busy in one hop, and a
failure reaches its own caller only."""

import asyncio
import threading

import pytest

from strata.broker.group_worker import GroupWorker

pytestmark = pytest.mark.broker


def test_calls_run_in_order_on_one_thread_and_batch_while_busy():
    async def main():
        w = GroupWorker()
        loop_thread = threading.get_ident()
        gate = threading.Event()
        ran: list[tuple[int, int]] = []

        def job(i: int) -> int:
            if i == 0:
                gate.wait(30)         # the first call holds the thread: the rest queue up
            ran.append((i, threading.get_ident()))
            return i * 10

        first = w.submit(job, 0)
        await asyncio.sleep(0)        # (one turn: the first batch goes to the thread)
        rest = [w.submit(job, i) for i in range(1, 6)]
        gate.set()
        got = await asyncio.gather(first, *rest)
        await w.close()
        return got, ran, loop_thread, w.batches, w.calls

    got, ran, loop_thread, batches, calls = asyncio.run(main())
    assert got == [0, 10, 20, 30, 40, 50]
    assert [i for i, _t in ran] == [0, 1, 2, 3, 4, 5]
    assert len({t for _i, t in ran}) == 1 and ran[0][1] != loop_thread
    assert (batches, calls) == (2, 6)      # the five asked while busy went over together


def test_a_failing_call_fails_its_caller_only():
    async def main():
        w = GroupWorker()

        def bad() -> None:
            raise ValueError("no such delivery")
        futs = [w.submit(lambda: 1), w.submit(bad), w.submit(lambda: 3)]
        got = await asyncio.gather(*futs, return_exceptions=True)
        await w.close()
        return got

    one, err, three = asyncio.run(main())
    assert (one, three) == (1, 3)
    assert isinstance(err, ValueError) and str(err) == "no such delivery"


def test_a_light_call_runs_on_the_loop_when_idle_and_queues_behind_work_when_not():
    async def main():
        w = GroupWorker()
        loop_thread = threading.get_ident()
        order: list[str] = []
        idle_at = await w.run_light(lambda: threading.get_ident())
        gate = threading.Event()

        def slow() -> None:
            gate.wait(30)
            order.append("slow")
        busy = w.submit(slow)
        light = asyncio.ensure_future(w.run_light(lambda: order.append("light")))
        await asyncio.sleep(0)
        queued_while_busy = order == []
        gate.set()
        await asyncio.gather(busy, light)
        await w.close()
        return idle_at == loop_thread, queued_while_busy, order, w.inline

    on_loop, queued, order, inline = asyncio.run(main())
    assert on_loop and queued and inline == 1
    assert order == ["slow", "light"]       # asked after the slow one: run after it
