"""The consumer's RPCs of the RocketMQ service: ReceiveMessage (long polling), AckMessage,
ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue.

A part of ``MessagingService`` (``strata.broker.rocketmq.service``), which mixes it in: it
uses the service's store, groups, popper, signer, arrivals, batcher, sessions and worker,
and its ``_topic``/``_group`` checks.

Every operation on the groups' deliveries, and the store reads a pop or a forward to the DLQ
makes, runs on the group worker's thread (``strata.broker.group_worker``): a read that goes
to S3 or a journal append that waits for an fsync holds no other client's call.
"""

from __future__ import annotations

import asyncio
import time

from strata.broker.dead_letter import dead_letter
from strata.broker.errors import InvalidMessageError, InvalidReceiptHandleError
from strata.broker.group_state import Delivery
from strata.broker.receipt import Receipt
from strata.broker.receive import parse_tag_expression
from strata.broker.rocketmq.convert import to_protocol
from strata.broker.rocketmq.options import (CATCH_UP_S, DEFAULT_POLL_MS, MAX_BATCH,
                                            MAX_INVISIBLE_MS, MIN_INVISIBLE_MS, POLL_MARGIN_S,
                                            RECHECK_S)
from strata.broker.rocketmq.protocol import Code, pb, svc
from strata.broker.rocketmq.rpc import Refused, _client_id, _duration_ms, _status, now_ms
from strata.errors import StrataError
from strata.store.message import StoredMessage
from strata.store.topics import TopicType


class Consuming:
    """Receive, acknowledge, change invisible time, forward to the DLQ (mixed into the
    service)."""

    # ------------------------------------------------------------------ receive

    def _receive_args(self, request):
        group = self._group(request.group)
        topic = self._topic(request.message_queue.topic)
        fe = request.filter_expression
        if fe.type == pb.FilterType.SQL:
            raise Refused(Code.UNSUPPORTED, "SQL92 filter expressions are not supported yet; "
                          "use a tag expression")
        try:
            tags = parse_tag_expression(fe.expression)
        except InvalidMessageError as exc:
            raise Refused(exc.code, str(exc)) from None
        if request.auto_renew:     # push consumers: renewed while the client is connected
            invisible = self.options.renew_slice_ms
        elif request.HasField("invisible_duration"):
            invisible = _duration_ms(request.invisible_duration)
        else:
            raise Refused(Code.ILLEGAL_INVISIBLE_TIME, "a receive needs an invisible duration")
        if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
            raise Refused(Code.ILLEGAL_INVISIBLE_TIME,
                          f"invisible duration {invisible} ms is outside "
                          f"[{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}] ms")
        batch = request.batch_size or 1
        if not 1 <= batch <= MAX_BATCH:
            raise Refused(Code.BAD_REQUEST, f"batch size {batch} is outside [1, {MAX_BATCH}]")
        poll = _duration_ms(request.long_polling_timeout) \
            if request.HasField("long_polling_timeout") else DEFAULT_POLL_MS
        return group, topic, tags, batch, invisible, poll

    async def ReceiveMessage(self, request, context):
        try:
            group, topic, tags, batch, invisible, poll_ms = self._receive_args(request)
        except Refused as r:
            yield svc.ReceiveMessageResponse(status=_status(r.code, str(r)))
            return
        client = _client_id(context)
        self.sessions.seen(client, now_ms())
        renew_for = client if request.auto_renew and client else None
        began = time.monotonic()
        # every message acknowledged before this receive began must be found by it: a send
        # is acknowledged before its message reaches the consume queue (dispatch follows),
        # so the receive does not answer "none" while dispatch is short of this offset
        target = self.arrivals.acknowledged()
        remaining = context.time_remaining()
        poll_s = poll_ms / 1000
        answer_by = None            # (monotonic) the latest time to answer the client
        if remaining is not None:
            poll_s = min(poll_s, remaining - POLL_MARGIN_S)
            catch_up_s = max(poll_s, remaining - POLL_MARGIN_S)
            answer_by = began + (remaining - POLL_MARGIN_S if remaining > 2 * POLL_MARGIN_S
                                 else remaining / 2)
        else:
            catch_up_s = max(poll_s, CATCH_UP_S)
        end = began + max(poll_s, 0.0)
        while True:
            arrived = self.arrivals.take()      # before the pop: a dispatch after it wakes us
            try:
                got, nxt = await self._pop_by(answer_by, group, topic, tags, batch,
                                              invisible, renew_for)
            except BaseException:
                self.arrivals.release()
                raise
            if got is None:       # the pop did not finish in the client's time
                self.arrivals.release()
                yield svc.ReceiveMessageResponse(status=_status(
                    Code.MESSAGE_NOT_FOUND, "no message read in time (the store was slow to "
                    "answer; what it found is handed out again at once)"))
                return
            if got:
                self.arrivals.release()
                break
            now = time.monotonic()
            left = end - now
            if left <= 0 and not self.arrivals.caught_up(target):
                left = began + catch_up_s - now      # what was acknowledged is on its way
            if left <= 0 or self.stopping:
                self.arrivals.release()
                yield svc.ReceiveMessageResponse(status=_status(
                    Code.MESSAGE_NOT_FOUND, "no new message (long polling timed out)"))
                return
            wait = min(left, RECHECK_S)
            if nxt is not None:
                wait = min(wait, max(0.0, (nxt - now_ms()) / 1000) + 0.001)
            await self.arrivals.wait(arrived, wait)
        yield svc.ReceiveMessageResponse(status=_status())
        for d in got:
            yield svc.ReceiveMessageResponse(
                message=to_protocol(d.message, d.receipt_handle, d.attempt, invisible))
        resp = svc.ReceiveMessageResponse()
        t = now_ms()
        resp.delivery_timestamp.seconds, ms = divmod(t, 1000)
        resp.delivery_timestamp.nanos = ms * 1_000_000
        yield resp

    async def _pop_by(self, answer_by: float | None, *args) -> tuple[list | None, int | None]:
        """``_pop(*args)`` on the group worker, waited for until ``answer_by`` (monotonic;
        None: as long as it takes). A pop that finishes later — a slow store read, a queue
        of group work before it — or whose receive was cancelled gives its deliveries back
        (due again at once) instead of leaving them invisible for nobody: (None, None)."""
        fut = self.worker.submit(self._pop, *args)
        try:
            if answer_by is None:
                return await asyncio.shield(fut)
            return await asyncio.wait_for(asyncio.shield(fut),
                                          max(0.0, answer_by - time.monotonic()))
        except asyncio.TimeoutError:
            fut.add_done_callback(self._give_back)
            return None, None
        except asyncio.CancelledError:
            fut.add_done_callback(self._give_back)
            raise

    def _give_back(self, fut: asyncio.Future) -> None:
        """(A done callback, on the loop.) The deliveries of a pop nobody will send."""
        if fut.cancelled() or fut.exception() is not None:
            return
        got, _next = fut.result()
        if got:
            back = self.worker.submit(self.groups.give_back, [d.receipt for d in got],
                                      now_ms())
            back.add_done_callback(lambda _f: self._notify_arrival())

    def _pop(self, group: str, topic: str, tags, batch: int, invisible: int,
             renew_for: str | None) -> tuple[list, int | None]:
        """On the group worker: the deliveries, and if there are none, when the next one
        becomes due (ms; None: none in flight)."""
        t = now_ms()
        renew = None if renew_for is None else (renew_for, t + self.options.renew_max_ms)
        got = self.popper.pop(group, topic, tags, batch, invisible, t, renew)
        return got, (None if got else self.groups.next_deadline(t))

    # ------------------------------------------------------------------ ack, invisible time

    def _receipt(self, handle: str, group: str, topic: str) -> Receipt:
        r = self.signer.decode(handle)
        if r.group != group or r.topic != topic:
            raise InvalidReceiptHandleError(
                f"receipt handle belongs to group {r.group!r} and topic {r.topic!r}, not "
                f"{group!r} and {topic!r}")
        return r

    async def AckMessage(self, request, context):
        try:
            group = self._group(request.group)
            topic = self._topic(request.topic)
        except Refused as r:
            return svc.AckMessageResponse(status=_status(r.code, str(r)))
        if not request.entries:
            return svc.AckMessageResponse(status=_status(Code.BAD_REQUEST,
                                                         "an ack needs at least one entry"))
        receipts: list[Receipt | None] = []
        errors: list[str | None] = []
        for e in request.entries:
            try:
                receipts.append(self._receipt(e.receipt_handle, group, topic))
                errors.append(None)
            except InvalidReceiptHandleError as exc:
                receipts.append(None)
                errors.append(str(exc))
        outcome = iter(await self.worker.run_light(
            self.groups.ack, [r for r in receipts if r is not None], now_ms()))
        entries = []
        for e, r, err in zip(request.entries, receipts, errors):
            if r is not None:
                exc = next(outcome)
                err = None if exc is None else str(exc)
            st = _status() if err is None else _status(Code.INVALID_RECEIPT_HANDLE, err)
            entries.append(svc.AckMessageResultEntry(message_id=e.message_id,
                                                     receipt_handle=e.receipt_handle,
                                                     status=st))
        if self.store.topic_type(topic) is TopicType.FIFO:
            self._notify_arrival()     # an ack frees its message group's next message
        codes = {e.status.code for e in entries}
        if len(codes) == 1:
            top = entries[0].status
        else:
            top = _status(Code.MULTIPLE_RESULTS, "some acks failed; see the entries")
        return svc.AckMessageResponse(status=top, entries=entries)

    async def ChangeInvisibleDuration(self, request, context):
        try:
            group = self._group(request.group)
            topic = self._topic(request.topic)
            invisible = _duration_ms(request.invisible_duration)
            if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
                raise Refused(Code.ILLEGAL_INVISIBLE_TIME,
                              f"invisible duration {invisible} ms is outside "
                              f"[{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}] ms")
            r = self._receipt(request.receipt_handle, group, topic)
            t = now_ms()
            handle = await self.worker.run_light(self.groups.change_invisible, r,
                                                 t + invisible, t)
        except Refused as r:
            return svc.ChangeInvisibleDurationResponse(status=_status(r.code, str(r)))
        except InvalidReceiptHandleError as exc:
            return svc.ChangeInvisibleDurationResponse(
                status=_status(Code.INVALID_RECEIPT_HANDLE, str(exc)))
        new = self.signer.encode(Receipt(group, topic, r.queue_id, r.queue_offset, handle,
                                         t + invisible))
        return svc.ChangeInvisibleDurationResponse(status=_status(), receipt_handle=new)

    # ------------------------------------------------------------------ dead-letter queue

    async def ForwardMessageToDeadLetterQueue(self, request, context):
        Resp = svc.ForwardMessageToDeadLetterQueueResponse
        try:
            group = self._group(request.group)
            topic = self._topic(request.topic)
            r = self._receipt(request.receipt_handle, group, topic)
            d, m = await self.worker.call(self._dead_letter_read, r)
            if m is not None:
                await self.batcher.submit([dead_letter(m, group, d.attempt)])
            await self.worker.run_light(self.groups.forget, group, topic, r.queue_id,
                                        [r.queue_offset])
            self._notify_arrival()     # a FIFO message group moves on
        except Refused as exc:
            return Resp(status=_status(exc.code, str(exc)))
        except InvalidReceiptHandleError as exc:
            return Resp(status=_status(Code.INVALID_RECEIPT_HANDLE, str(exc)))
        except StrataError as exc:
            return Resp(status=_status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        return Resp(status=_status())

    def _dead_letter_read(self, r: Receipt) -> tuple[Delivery, StoredMessage | None]:
        """On the group worker: the live delivery of ``r`` (else its error) and its message
        (None: removed by retention)."""
        d = self.groups.check(r, now_ms())
        got = self.store.get(r.topic, r.queue_id, r.queue_offset, 1)
        found = got.found and got.messages[0].queue_offset == r.queue_offset
        return d, (got.messages[0] if found else None)
