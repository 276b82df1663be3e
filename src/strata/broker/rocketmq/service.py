"""The RocketMQ 5 ``MessagingService`` on a strata store (grpc.aio servicer).

Every reply carries a protocol status; bad input gets the protocol's code and a sentence
saying what was wrong, and changes nothing stored. What is not supported yet answers
``UNSUPPORTED`` / ``NOT_IMPLEMENTED`` (see docs/broker.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Sequence

from strata.broker.arrivals import Arrivals
from strata.broker.rocketmq.convert import to_protocol, to_store
from strata.broker.dead_letter import dead_letter
from strata.broker.errors import (InvalidGroupError, InvalidMessageError,
                                  InvalidReceiptHandleError)
from strata.broker.group_state import ConsumerGroups
from strata.broker.held import HeldMessages
from strata.broker.rocketmq.message_types import check_fits, route_types, sent_type
from strata.broker.names import check_group, check_topic
from strata.broker.rocketmq.protocol import Code, pb, svc, svc_grpc
from strata.broker.receipt import Receipt, ReceiptSigner
from strata.broker.receive import Popper, parse_tag_expression
from strata.broker.send import GATHER_S, SendBatcher
from strata.broker.status import status_for
from strata.broker.rocketmq.sessions import Sessions
from strata.broker.timer import Timer, delivery_due
from strata.broker.rocketmq.transactions import Transactions, is_transactional
from strata.errors import (DiskFullError, InvalidInputError, InvalidTopicError, StrataError,
                           TopicExistsError)
from strata.store.message import PutResult, PutStatus
from strata.store.message_store import MessageStore
from strata.store.topics import TopicType

log = logging.getLogger(__name__)

MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_BATCH = 32
# a push consumer's receive (auto_renew): invisible this long, renewed by as much while its
# client is connected (RocketMQ's proxy: renewSliceTimeMillis), for at most RENEW_MAX_MS
# (renewMaxTimeMillis); a renewal is made when the invisible time has this much left
RENEW_SLICE_MS = 60_000
RENEW_MAX_MS = 3 * 3600 * 1000
RENEW_AHEAD_MS = 10_000            # or a third of the slice, if less
RENEW_PERIOD_MS = 5_000            # how often renewals are looked for (or a sixth of the slice)
RELEASE_MS = 1_000                 # a gone client's renewed messages come back this soon
SESSION_TIMEOUT_MS = 30_000        # a client without a Telemetry stream: gone after this
                                   # long without a call (the clients heartbeat every 10 s)
STREAM_TIMEOUT_MS = 120_000        # ... with one open (a hung process): RocketMQ's channel
                                   # expiry
MAX_DELIVERY_ATTEMPTS = 16
# invisible time after a consumer's n-th failed attempt (RocketMQ's retry levels from 1 s)
CONSUMER_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200,
                      1800, 3600, 7200)
DEFAULT_POLL_MS = 20_000
POLL_MARGIN_S = 1.0     # answer a long poll this long before the client's deadline
# A receive past its long-polling time still waits (up to the client's deadline, or this long
# without one) for dispatch to cover what was acknowledged before it began.
CATCH_UP_S = 30.0
# Waits are woken by events (dispatch, acks, invisible times ending); this bounds one wait so
# that a change no event announces (an operator's offset reset) is seen soon all the same.
RECHECK_S = 0.5


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Refused(Exception):
    """A request refused with a protocol status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _status(code: int = Code.OK, message: str = "OK"):
    return pb.Status(code=code, message=message)


def _held_error_status(exc: Exception, what: str):
    """The status of a refused or failed RecallMessage / EndTransaction (call it in the
    ``except``: an unexpected store error is logged with its traceback)."""
    if isinstance(exc, (Refused, InvalidMessageError)):
        return _status(exc.code, str(exc))
    log.exception("%s failed", what)
    return _status(Code.INTERNAL_SERVER_ERROR, str(exc))


def _duration_ms(d) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


@dataclass
class BrokerOptions:
    auto_create: bool = True
    broker_name: str = "strata"
    max_delivery_attempts: int = MAX_DELIVERY_ATTEMPTS
    transaction_check_interval_ms: int = 60_000
    transaction_max_checks: int = 15
    gather_s: float = GATHER_S      # puts start at most once per this interval (send.py)
    renew_slice_ms: int = RENEW_SLICE_MS    # auto_renew: invisible time per renewal
    renew_max_ms: int = RENEW_MAX_MS        # auto_renew: renewed for at most this long


def _input_error(exc: InvalidInputError) -> Refused:
    """A refused input's answer: its status by type (``strata.broker.status``)."""
    return Refused(status_for(exc), str(exc))


class MessagingService(svc_grpc.MessagingServiceServicer):
    """The RPCs. Runs on one event loop; store puts run on the batcher's writer thread."""

    def __init__(self, store: MessageStore, groups: ConsumerGroups, signer: ReceiptSigner,
                 endpoint: tuple[str, int], options: BrokerOptions,
                 held: HeldMessages, batcher: SendBatcher | None = None) -> None:
        self.store = store
        self.groups = groups
        self.signer = signer
        self.endpoint = endpoint
        self.options = options
        # shared with the other listeners of the process (one group commit for all), or its own
        self.batcher = batcher if batcher is not None else SendBatcher(store, options.gather_s)
        self._own_batcher = batcher is None
        self.popper = Popper(store, groups, signer, options.max_delivery_attempts)
        self.arrivals = Arrivals(store)     # set when dispatch made new messages visible
        self.clients: dict[str, int] = {}   # client id -> client type (live sessions)
        self.sessions = Sessions()
        self.held = held
        held.put = self.batcher.submit
        self.timer = Timer(held, self._notify_arrival)
        self.transactions = Transactions(
            held, self.sessions, self._notify_arrival,
            check_interval_ms=options.transaction_check_interval_ms,
            max_checks=options.transaction_max_checks)
        self.stopping = False
        self.renewed = 0             # renewals made, deliveries released (stop line, tests)
        self.released = 0
        self._renewer: asyncio.Task | None = None
        self._renewed_at = 0.0       # time.monotonic() of the last renew_due

    def start(self) -> None:
        if self._own_batcher:
            self.batcher.start()
        self.arrivals.start()
        self.held.start()
        self.timer.start()
        self.transactions.start()
        t = now_ms()
        for client in self.groups.renewing_clients():   # from before a restart: they get
            self.sessions.seen(client, t)                # a session timeout to come back
        self.renew_due(t)          # before the first receive: a slice may have ended meanwhile
        self._renewer = asyncio.get_running_loop().create_task(self._renew_loop())

    async def close(self) -> None:
        self.arrivals.close()
        if self._renewer is not None:
            self._renewer.cancel()
        self.sessions.close_all()
        await self.timer.close()
        await self.transactions.close()
        if self._own_batcher:
            await self.batcher.close()

    # ------------------------------------------------------------------ helpers

    def _topic(self, resource) -> str:
        """A checked topic that exists, or may be created by a first send (an unknown topic
        is then an empty one)."""
        try:
            topic = check_topic(resource.name)
        except InvalidTopicError as exc:
            raise Refused(Code.ILLEGAL_TOPIC, str(exc)) from None
        if self.store.queue_count(topic) == 0 and not self.options.auto_create:
            raise Refused(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist (this broker "
                          "runs with --no-auto-create)")
        return topic

    @staticmethod
    def _group(resource) -> str:
        try:
            return check_group(resource.name)
        except InvalidGroupError as exc:
            raise Refused(Code.ILLEGAL_CONSUMER_GROUP, str(exc)) from None

    def _queue_count(self, topic: str) -> int:
        return self.store.queue_count(topic) or self.store.config.default_queues

    def _endpoints(self, requested) -> pb.Endpoints:
        if requested is not None and len(requested.addresses):
            e = pb.Endpoints()
            e.CopyFrom(requested)
            return e
        host, port = self.endpoint
        return pb.Endpoints(scheme=pb.AddressScheme.IPv4,
                            addresses=[pb.Address(host=host, port=port)])

    def _queue(self, topic_resource, qid: int, endpoints,
               kind: TopicType | None) -> pb.MessageQueue:
        return pb.MessageQueue(
            topic=pb.Resource(name=topic_resource.name,
                              resource_namespace=topic_resource.resource_namespace),
            id=qid, permission=pb.Permission.READ_WRITE,
            broker=pb.Broker(name=self.options.broker_name, id=0, endpoints=endpoints),
            accept_message_types=route_types(kind))

    def wake_polls(self) -> None:
        """Wake every long poll (a send arrived, or the server is stopping)."""
        self._notify_arrival()
        if self.stopping:
            self.sessions.close_all()

    # ------------------------------------------------------------------ renewal (auto_renew)

    def _renew_period_s(self) -> float:
        return max(0.05, min(RENEW_PERIOD_MS, self.options.renew_slice_ms / 6) / 1000)

    async def _renew_loop(self) -> None:
        period = self._renew_period_s()
        while True:
            await asyncio.sleep(period)
            try:
                self.renew_due(now_ms())
            except Exception:       # noqa: BLE001 - keep renewing; say what went wrong
                log.exception("renewing invisible times failed")

    def renew_due(self, now: int) -> None:
        """Renew the push consumers' deliveries that are close to their deadline, for the
        clients still connected; release those of clients that are not."""
        self._renewed_at = time.monotonic()
        slice_ms = self.options.renew_slice_ms
        ahead = min(RENEW_AHEAD_MS, slice_ms // 3)
        # the index's clients as they stand: renew and release walk each client's deliveries
        # once and drop what is stale (renewing_clients would walk them all a first time)
        for client in list(self.groups.renewing):
            if self.sessions.connected(client, now, SESSION_TIMEOUT_MS, STREAM_TIMEOUT_MS):
                self.renewed += self.groups.renew(client, now, ahead, slice_ms)[0]
            else:
                self._release(client, now)

    def renew_if_late(self) -> None:
        """Before a pop: renew now if the renew loop is late (a loaded machine can hold the
        event loop or the process back past a renewal's margin). Renewing every ``late`` s
        renews each delivery whose invisible time ends within ``ahead`` > ``late`` of now, so
        a pop never finds due, and hands to another consumer, a delivery that a connected
        push consumer still holds."""
        ahead_s = min(RENEW_AHEAD_MS, self.options.renew_slice_ms // 3) / 1000
        late = min(self._renew_period_s(), ahead_s / 2)
        if time.monotonic() - self._renewed_at > late:
            try:
                self.renew_due(now_ms())
            except Exception:       # noqa: BLE001 - the receive goes on; the loop retries
                log.exception("renewing invisible times failed")

    def _release(self, client: str, now: int) -> None:
        n = self.groups.release(client, now + RELEASE_MS)
        if n:
            self.released += n
            log.info("client %s is gone: its %d messages in flight come back in %d ms",
                     client, n, RELEASE_MS)

    def _client_gone(self, client: str) -> None:
        """The client ended its session (NotifyClientTermination, or its Telemetry stream
        closed): what is renewed for it comes back soon."""
        self.sessions.forget(client)
        if client:
            self._release(client, now_ms())

    def _notify_arrival(self) -> None:
        self.arrivals.notify()

    # ------------------------------------------------------------------ routes and sessions

    async def QueryRoute(self, request, context):
        try:
            topic = self._topic(request.topic)
        except Refused as r:
            return svc.QueryRouteResponse(status=_status(r.code, str(r)))
        endpoints = self._endpoints(request.endpoints)
        kind = self.store.topic_type(topic)
        queues = [self._queue(request.topic, q, endpoints, kind)
                  for q in range(self._queue_count(topic))]
        return svc.QueryRouteResponse(status=_status(), message_queues=queues)

    async def Heartbeat(self, request, context):
        if request.HasField("group") and request.group.name:
            try:
                self._group(request.group)
            except Refused as r:
                return svc.HeartbeatResponse(status=_status(r.code, str(r)))
        client = _client_id(context)
        self.clients[client] = request.client_type
        self.sessions.seen(client, now_ms())
        return svc.HeartbeatResponse(status=_status())

    async def NotifyClientTermination(self, request, context):
        client = _client_id(context)
        self.clients.pop(client, None)
        self._client_gone(client)
        return svc.NotifyClientTerminationResponse(status=_status())

    async def QueryAssignment(self, request, context):
        try:
            topic = self._topic(request.topic)
            self._group(request.group)
        except Refused as r:
            return svc.QueryAssignmentResponse(status=_status(r.code, str(r)))
        # receives pop across all of the topic's queues, so one assignment covers them
        q = self._queue(request.topic, 0, self._endpoints(request.endpoints),
                        self.store.topic_type(topic))
        return svc.QueryAssignmentResponse(status=_status(),
                                           assignments=[pb.Assignment(message_queue=q)])

    def settings_for(self, client: pb.Settings) -> pb.Settings:
        """The server's settings built on the client's."""
        s = pb.Settings()
        s.CopyFrom(client)
        if not client.HasField("subscription"):   # publishing and subscription are a oneof
            s.publishing.max_body_size = self.store.config.max_body_size
            s.publishing.validate_message_type = True
        backoff = s.backoff_policy
        if client.client_type == pb.ClientType.PRODUCER:   # resends of a failed send
            backoff.max_attempts = 3
            backoff.exponential_backoff.initial.nanos = 10_000_000
            backoff.exponential_backoff.max.seconds = 1
            backoff.exponential_backoff.multiplier = 2.0
        else:                      # how long a message a consumer failed stays invisible
            backoff.max_attempts = self.options.max_delivery_attempts
            backoff.customized_backoff.ClearField("next")
            for sec in CONSUMER_BACKOFF_S:
                backoff.customized_backoff.next.add(seconds=sec)
        if client.HasField("subscription"):
            sub = s.subscription
            # FIFO topics are consumed in message-group order (strata.broker.fifo)
            sub.fifo = any(self._is_fifo(e.topic.name) for e in sub.subscriptions)
            sub.receive_batch_size = MAX_BATCH
            if not sub.HasField("long_polling_timeout"):
                sub.long_polling_timeout.seconds = DEFAULT_POLL_MS // 1000
        return s

    def _is_fifo(self, topic: str) -> bool:
        try:
            return self.store.topic_type(check_topic(topic)) is TopicType.FIFO
        except InvalidTopicError:
            return False

    async def Telemetry(self, request_iterator, context):
        """Answers each settings command; pushes orphaned-transaction checks to producers."""
        session = self.sessions.open(_client_id(context))
        self.sessions.seen(session.client_id, now_ms())

        async def read() -> None:
            try:
                async for cmd in request_iterator:
                    if cmd.HasField("settings"):
                        st = cmd.settings
                        self.clients[session.client_id] = st.client_type
                        session.client_type = st.client_type
                        session.topics = frozenset(t.name for t in st.publishing.topics)
                        session.push(svc.TelemetryCommand(status=_status(),
                                                          settings=self.settings_for(st)))
            finally:
                session.close()

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while True:
                cmd = await session.outbox.get()
                if cmd is None:
                    return
                yield cmd
        finally:
            reader.cancel()
            if self.sessions.closed(session) and not self.stopping:
                self._client_gone(session.client_id)     # no other stream of it is open

    # ------------------------------------------------------------------ send

    async def SendMessage(self, request, context):
        if not request.messages:
            return svc.SendMessageResponse(status=_status(Code.BAD_REQUEST,
                                                          "a send needs at least one message"))
        try:
            msgs = []
            new_topics: dict[str, TopicType] = {}
            for m in request.messages:
                topic = self._topic(m.topic)
                msgs.append(to_store(m, topic, self.store.config.max_body_size))
                sent = sent_type(m)
                kind = self.store.topic_type(topic) or new_topics.setdefault(topic, sent)
                check_fits(topic, kind, sent)
            if new_topics:     # a send the store would refuse creates no topic (issue 22.6)
                self.store.check_batch(msgs)
            for topic, kind in new_topics.items():     # a first send gives a topic its type
                self._create_topic(topic, kind)
            results = await self._store_or_hold(request.messages, msgs, _client_id(context))
        except Refused as r:
            return svc.SendMessageResponse(status=_status(r.code, str(r)))
        except InvalidInputError as exc:
            r = _input_error(exc)
            return svc.SendMessageResponse(status=_status(r.code, str(r)))
        except DiskFullError as exc:
            return svc.SendMessageResponse(status=_status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        except StrataError as exc:
            log.exception("send failed")
            return svc.SendMessageResponse(status=_status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        # (the receives waiting are woken by the store's dispatch, once the messages are
        # in their queues: see strata.broker.arrivals)
        if any(isinstance(r, PutResult) and r.status is PutStatus.FLUSH_DISK_TIMEOUT
               for r in results):
            st = _status(Code.MASTER_PERSISTENCE_TIMEOUT,
                         "the store did not flush the message to disk in time")
        else:
            st = _status()
        entries = [svc.SendResultEntry(status=st, message_id=m.system_properties.message_id
                                       or r.msg_id, offset=r.queue_offset)
                   if isinstance(r, PutResult) else
                   svc.SendResultEntry(status=st, message_id=m.system_properties.message_id,
                                       recall_handle=r)
                   if isinstance(r, Recall) else
                   svc.SendResultEntry(status=st, message_id=m.system_properties.message_id,
                                       transaction_id=r)
                   for m, r in zip(request.messages, results)]
        return svc.SendMessageResponse(status=st, entries=entries)

    def _create_topic(self, topic: str, kind: TopicType) -> None:
        try:
            self.store.create_topic(topic, message_type=kind)
        except TopicExistsError:      # made meanwhile (a put of a dead letter): check again
            check_fits(topic, self.store.topic_type(topic), kind)

    async def _store_or_hold(self, protos, msgs: list, client_id: str) -> Sequence:
        """Store ``msgs`` (a PutResult each), or hold the delay messages not due yet (a Recall
        handle each) and the half messages of transactions (their transaction id each)."""
        now = now_ms()
        delays: list[tuple[int, int]] = []        # (index, due ms)
        halves: list[int] = []
        plain: list[int] = []
        for i, m in enumerate(msgs):
            if is_transactional(m):
                halves.append(i)
                continue
            due = delivery_due(m, now)
            (plain.append(i) if due is None else delays.append((i, due)))
        if not delays and not halves:
            return await self.batcher.submit(msgs)
        out: list = [None] * len(msgs)
        if plain:
            for i, r in zip(plain, await self.batcher.submit([msgs[i] for i in plain])):
                out[i] = r
        if delays:
            held = await self.timer.hold([(msgs[i], due, protos[i].system_properties.message_id)
                                          for i, due in delays])
            for (i, _due), e in zip(delays, held):
                out[i] = Recall(self.timer.recall_handle(e))
        if halves:
            held = await self.transactions.hold(
                [(msgs[i], protos[i].system_properties.message_id) for i in halves], client_id)
            for i, e in zip(halves, held):
                out[i] = self.transactions.transaction_id(e)
        return out

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
        if remaining is not None:
            poll_s = min(poll_s, remaining - POLL_MARGIN_S)
            catch_up_s = max(poll_s, remaining - POLL_MARGIN_S)
        else:
            catch_up_s = max(poll_s, CATCH_UP_S)
        end = began + max(poll_s, 0.0)
        while True:
            arrived = self.arrivals.take()      # before the pop: a dispatch after it wakes us
            try:
                self.renew_if_late()
                got = self._pop(group, topic, tags, batch, invisible, renew_for)
            except BaseException:
                self.arrivals.release()
                raise
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
            nxt = self.groups.next_deadline()
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

    def _pop(self, group: str, topic: str, tags, batch: int, invisible: int,
             renew_for: str | None):
        t = now_ms()
        renew = None if renew_for is None else (renew_for, t + self.options.renew_max_ms)
        return self.popper.pop(group, topic, tags, batch, invisible, t, renew)

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
        outcome = iter(self.groups.ack([r for r in receipts if r is not None], now_ms()))
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
            handle = self.groups.change_invisible(r, t + invisible, t)
        except Refused as r:
            return svc.ChangeInvisibleDurationResponse(status=_status(r.code, str(r)))
        except InvalidReceiptHandleError as exc:
            return svc.ChangeInvisibleDurationResponse(
                status=_status(Code.INVALID_RECEIPT_HANDLE, str(exc)))
        new = self.signer.encode(Receipt(group, topic, r.queue_id, r.queue_offset, handle,
                                         t + invisible))
        return svc.ChangeInvisibleDurationResponse(status=_status(), receipt_handle=new)

    # ------------------------------------------------------------------ transactions, DLQ

    async def RecallMessage(self, request, context):
        Resp = svc.RecallMessageResponse
        try:
            topic = self._topic(request.topic)
            mid = await self.timer.recall(request.recall_handle, topic)
        except (Refused, InvalidMessageError, StrataError) as exc:
            return Resp(status=_held_error_status(exc, "recall"))
        return Resp(status=_status(), message_id=mid)

    async def EndTransaction(self, request, context):
        Resp = svc.EndTransactionResponse
        try:
            topic = self._topic(request.topic)
            if request.resolution not in (pb.TransactionResolution.COMMIT,
                                          pb.TransactionResolution.ROLLBACK,
                                          pb.TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED):
                raise Refused(Code.BAD_REQUEST, f"unknown transaction resolution "
                              f"{request.resolution}")
            e = self.transactions.lookup(request.transaction_id, topic, request.message_id)
            await self.transactions.end(e, request.resolution)
        except (Refused, InvalidMessageError, StrataError) as exc:
            return Resp(status=_held_error_status(exc, "end of transaction"))
        return Resp(status=_status())

    async def ForwardMessageToDeadLetterQueue(self, request, context):
        Resp = svc.ForwardMessageToDeadLetterQueueResponse
        try:
            group = self._group(request.group)
            topic = self._topic(request.topic)
            r = self._receipt(request.receipt_handle, group, topic)
            d = self.groups.check(r, now_ms())
            got = self.store.get(topic, r.queue_id, r.queue_offset, 1)
            if got.found and got.messages[0].queue_offset == r.queue_offset:
                await self.batcher.submit([dead_letter(got.messages[0], group, d.attempt)])
            self.groups.forget(group, topic, r.queue_id, [r.queue_offset])
            self._notify_arrival()     # a FIFO message group moves on
        except Refused as exc:
            return Resp(status=_status(exc.code, str(exc)))
        except InvalidReceiptHandleError as exc:
            return Resp(status=_status(Code.INVALID_RECEIPT_HANDLE, str(exc)))
        except StrataError as exc:
            return Resp(status=_status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        return Resp(status=_status())


class Recall(str):
    """A held delay message's recall handle (a send's result)."""


def _client_id(context) -> str:
    for k, v in context.invocation_metadata() or ():
        if k == "x-mq-client-id":
            return v
    return ""
