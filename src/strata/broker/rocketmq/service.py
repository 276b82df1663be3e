"""The RocketMQ 5 ``MessagingService`` on a strata store (grpc.aio servicer).

Every reply carries a protocol status; bad input gets the protocol's code and a sentence
saying what was wrong, and changes nothing stored. What is not supported yet answers
``UNSUPPORTED`` / ``NOT_IMPLEMENTED`` (see docs/broker.md).

Here: the service's parts, routes and sessions (Telemetry), sends, recalls and transactions.
The consumer's RPCs are in ``strata.broker.rocketmq.consume``, the renewal of push consumers'
deliveries in ``strata.broker.rocketmq.renewal``, limits and ``BrokerOptions`` in
``strata.broker.rocketmq.options``, what the RPCs share in ``strata.broker.rocketmq.rpc``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Sequence

from strata.broker.arrivals import Arrivals
from strata.broker.errors import InvalidGroupError, InvalidMessageError
from strata.broker.group_state import ConsumerGroups
from strata.broker.group_worker import GroupWorker
from strata.broker.held import HeldMessages
from strata.broker.names import check_group, check_topic
from strata.broker.receipt import ReceiptSigner
from strata.broker.receive import Popper
from strata.broker.rocketmq.consume import Consuming
from strata.broker.rocketmq.convert import to_store
from strata.broker.rocketmq.message_types import check_fits, route_types, sent_type
# (BrokerOptions is imported from here too, by strata.broker.rocketmq.server)
from strata.broker.rocketmq.options import (CONSUMER_BACKOFF_S, DEFAULT_POLL_MS, MAX_BATCH,
                                            BrokerOptions)
from strata.broker.rocketmq.protocol import Code, pb, svc, svc_grpc
from strata.broker.rocketmq.renewal import Renewal
from strata.broker.rocketmq.rpc import Refused, _client_id, _input_error, _status, now_ms
from strata.broker.rocketmq.sessions import Sessions
from strata.broker.send import SendBatcher
from strata.broker.timer import Timer, delivery_due
from strata.broker.rocketmq.transactions import Transactions, is_transactional
from strata.errors import (DiskFullError, InvalidInputError, InvalidTopicError, StrataError,
                           TopicExistsError)
from strata.store.message import PutResult, PutStatus
from strata.store.message_store import MessageStore
from strata.store.topics import TopicType

log = logging.getLogger(__name__)


def _held_error_status(exc: Exception, what: str):
    """The status of a refused or failed RecallMessage / EndTransaction (call it in the
    ``except``: an unexpected store error is logged with its traceback)."""
    if isinstance(exc, (Refused, InvalidMessageError)):
        return _status(exc.code, str(exc))
    log.exception("%s failed", what)
    return _status(Code.INTERNAL_SERVER_ERROR, str(exc))



class MessagingService(Renewal, Consuming, svc_grpc.MessagingServiceServicer):
    """The RPCs. Runs on one event loop; store puts run on the batcher's writer thread, the
    consumer groups' operations (and the store reads of pops) on the group worker's."""

    def __init__(self, store: MessageStore, groups: ConsumerGroups, signer: ReceiptSigner,
                 endpoint: tuple[str, int], options: BrokerOptions,
                 held: HeldMessages, batcher: SendBatcher | None = None,
                 worker: GroupWorker | None = None) -> None:
        self.store = store
        self.groups = groups
        self.signer = signer
        self.endpoint = endpoint
        self.options = options
        # shared with the other listeners of the process (one group commit for all), or its own
        self.batcher = batcher if batcher is not None else SendBatcher(store, options.gather_s)
        self._own_batcher = batcher is None
        # shared with the process's admin API (an operator's reset), or its own
        self.worker = worker if worker is not None else GroupWorker()
        self._own_worker = worker is None
        self.popper = Popper(store, groups, signer, options.max_delivery_attempts)
        self.arrivals = Arrivals(store)     # set when dispatch made new messages visible
        self.clients: dict[str, int] = {}   # client id -> client type (live sessions)
        self.sessions = Sessions()
        groups.connected_until = self.connected_until    # push consumers' deliveries
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
        await self.held.stop()
        if self._own_batcher:
            await self.batcher.close()
        if self._own_worker:
            await self.worker.close()

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
                # (the topic table is rewritten and fsynced: off the loop)
                await asyncio.get_running_loop().run_in_executor(None, self._create_topic,
                                                                 topic, kind)
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

    # ------------------------------------------------------------------ recall, transactions

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


class Recall(str):
    """A held delay message's recall handle (a send's result)."""
