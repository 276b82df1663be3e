"""Group commit across clients: the sends that arrive while the store is busy with a put go
into the next ``put_batch`` together, so under ``--flush sync`` one fsync covers them all.
Each send is answered only when its batch is stored as the flush mode counts it.

Puts start at most once per gather interval (``--gather-ms``, 2 ms by default): after a quiet
spell the first send is put at once; under load the sends that arrive meanwhile share the
next put. Every put wakes the store's dispatch thread, and handing the GIL to it and back
cost about as much as the rest of a one-message send (bench/README.md), so fewer, larger puts
are what keeps the broker's CPU per message down.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from strata.errors import InvalidInputError
from strata.store.message import Message, PutResult
from strata.store.message_store import MessageStore


GATHER_S = 0.002


class SendBatcher:
    """Runs on the server's event loop; puts run on one writer thread."""

    def __init__(self, store: MessageStore, gather_s: float = GATHER_S) -> None:
        self.store = store
        self.gather_s = gather_s
        self._last_put = float("-inf")     # loop time the last put started
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="strata-put")
        self._pending: list[tuple[list[Message], asyncio.Future]] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._busy = False
        self.batches = 0       # put_batch calls
        self.messages = 0      # messages stored through them
        # called after each put_batch with (messages, seconds it took): the metrics
        self.on_stored: Callable[[int, float], None] | None = None

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def submit(self, msgs: list[Message]) -> Sequence[PutResult]:
        """Store ``msgs``; their results once stored (raises what put_batch raises)."""
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((msgs, fut))
        self._wake.set()
        return await fut

    async def _put(self, msgs: list[Message]):
        began = time.perf_counter()
        if self.store.config.flush == "sync":     # waits for its fsync: off the event loop
            loop = asyncio.get_running_loop()
            results = await loop.run_in_executor(self._executor, self.store.put_batch, msgs)
        else:       # returns once in the page cache: a thread hand-off would cost more
            results = self.store.put_batch(msgs)
        self.batches += 1
        self.messages += len(msgs)
        if self.on_stored is not None:
            self.on_stored(len(msgs), time.perf_counter() - began)
        return results

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._busy = True
            loop = asyncio.get_running_loop()
            while self._pending:
                # let the sends already received (and those of the gather interval) join
                await asyncio.sleep(max(0.0, self._last_put + self.gather_s - loop.time()))
                self._last_put = loop.time()
                batch, self._pending = self._pending, []
                if len(batch) == 1:
                    await self._answer_alone(*batch[0])
                    continue
                try:
                    results = await self._put([m for msgs, _f in batch for m in msgs])
                except InvalidInputError:
                    # a bad message fails its own send only: each request is put alone
                    for msgs, fut in batch:
                        await self._answer_alone(msgs, fut)
                    continue
                except Exception as exc:  # noqa: BLE001 - handed to every waiting send
                    for _msgs, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                i = 0
                for msgs, fut in batch:
                    if not fut.done():
                        fut.set_result(results[i:i + len(msgs)])
                    i += len(msgs)
            self._busy = False

    async def _answer_alone(self, msgs: list[Message], fut: asyncio.Future) -> None:
        try:
            results = await self._put(msgs)
        except Exception as exc:  # noqa: BLE001
            if not fut.done():
                fut.set_exception(exc)
        else:
            if not fut.done():
                fut.set_result(results)

    async def close(self) -> None:
        """Finish every submitted send, then stop."""
        while self._pending or self._busy:
            await asyncio.sleep(0.005)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._executor.shutdown(wait=True)
