"""The floor of bench/broker.py: ``strata serve`` with the store work taken out.

    python bench/broker_floor.py serve DIR --listen 127.0.0.1:0 [strata serve's options]

The same process as ``strata serve`` (its CLI, ``grpc.aio`` server and options, uvloop, the
RPC layers, QueryRoute / Heartbeat / Telemetry settings / NotifyClientTermination from strata's
own ``MessagingService``), with three RPCs replaced by answers that do no storage work:

* SendMessage answers OK for each message with the client's own message id and a counter as
  its offset; nothing is converted, put or stored.
* ReceiveMessage hands out messages pre-built in memory at start (100-byte bodies by default,
  ``BENCH_FLOOR_SIZE``; the fields strata's ``to_protocol`` fills, a receipt handle from
  strata's signer), at most as many as were sent, up to the request's batch size; status
  first, then the messages, then the delivery timestamp, as strata answers.
* AckMessage answers OK for every entry without looking at it.

So the bench's official-client producers and consumer run unchanged against it, and what the
server spends per message is the gRPC and client-protocol cost a broker cannot go below here.
A bench-only script: the replacement is a subclass patched into ``strata.broker.rocketmq.server`` in
this process; src/strata/broker is not changed. The stop line reports the floor's counts.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import zlib

import strata.broker.rocketmq.server as server
from strata.broker.rocketmq.protocol import Code, MessageType, pb, svc
from strata.broker.receipt import Receipt
from strata.broker.rocketmq.service import MessagingService, _status

POOL = 1024


class FloorService(MessagingService):
    """strata's servicer minus the store: see the module's docstring."""

    def start(self) -> None:
        super().start()
        self.floor_sent = 0         # messages answered by SendMessage
        self.floor_served = 0       # messages handed out by ReceiveMessage
        self.floor_acked = 0
        size = int(os.environ.get("BENCH_FLOOR_SIZE", "100"))
        body = b"x" * size
        digest = format(zlib.crc32(body) & 0xFFFFFFFF, "08X")
        host, port = self.endpoint
        now = time.time_ns() // 1_000_000
        pool = []
        for i in range(POOL):
            m = pb.Message()
            m.topic.name = "bench"
            m.body = body
            sp = m.system_properties
            sp.message_id = f"01FLOOR{os.getpid():08X}{i:012X}"
            sp.body_digest.type = pb.DigestType.CRC32
            sp.body_digest.checksum = digest
            sp.body_encoding = pb.Encoding.IDENTITY
            sp.message_type = MessageType.NORMAL
            sp.born_timestamp.seconds, sp.born_timestamp.nanos = now // 1000, 0
            sp.born_host = "127.0.0.1"
            sp.store_timestamp.seconds, sp.store_timestamp.nanos = now // 1000, 0
            sp.store_host = f"{host}:{port}"
            sp.receipt_handle = self.signer.encode(
                Receipt("bench-g", "bench", i % 8, i, i + 1, now + 60_000))
            sp.queue_id = i % 8
            sp.queue_offset = i
            sp.invisible_duration.seconds = 60
            sp.delivery_attempt = 1
            pool.append(svc.ReceiveMessageResponse(message=m))
        self.floor_pool = pool

    async def SendMessage(self, request, context):
        entries = []
        for m in request.messages:
            self.floor_sent += 1
            entries.append(svc.SendResultEntry(status=_status(),
                                               message_id=m.system_properties.message_id,
                                               offset=self.floor_sent))
        return svc.SendMessageResponse(status=_status(), entries=entries)

    async def ReceiveMessage(self, request, context):
        take = min(request.batch_size or 1, self.floor_sent - self.floor_served)
        if take <= 0:       # nothing sent that was not handed out: a short poll, then none
            await asyncio.sleep(0.5)
            yield svc.ReceiveMessageResponse(status=_status(Code.MESSAGE_NOT_FOUND,
                                                            "no new message (floor)"))
            return
        first = self.floor_served
        self.floor_served += take
        yield svc.ReceiveMessageResponse(status=_status())
        pool = self.floor_pool
        for i in range(first, first + take):
            yield pool[i % POOL]
        resp = svc.ReceiveMessageResponse()
        t = time.time_ns() // 1_000_000
        resp.delivery_timestamp.seconds, ms = divmod(t, 1000)
        resp.delivery_timestamp.nanos = ms * 1_000_000
        yield resp

    async def AckMessage(self, request, context):
        self.floor_acked += len(request.entries)
        return svc.AckMessageResponse(status=_status(), entries=[
            svc.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle,
                                      status=_status())
            for e in request.entries])

    async def close(self) -> None:
        print(f"strata serve: floor: {self.floor_sent} sends answered, {self.floor_served} "
              f"messages served, {self.floor_acked} acks answered", file=sys.stderr,
              flush=True)
        await super().close()


server.MessagingService = FloorService

if __name__ == "__main__":
    from strata.cli.main import cli
    cli(sys.argv[1:], prog_name="broker_floor")
