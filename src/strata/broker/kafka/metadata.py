"""Metadata (key 3): this one broker leads every partition of every topic (leader epoch -1:
no OffsetForLeaderEpoch); unknown topics are created when the client allows it and the
broker auto-creates."""

from __future__ import annotations

from strata.broker.kafka import api
from strata.broker.kafka import errors as ke
from strata.broker.kafka.topics import partitions

MetadataResponse = api.response_class(3)
Broker = MetadataResponse.MetadataResponseBroker
Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition


def _topic(broker, name: str, create: bool) -> object:
    code, n = partitions(broker, name, create=create)
    node = broker.node_id
    parts = [Partition(error_code=ke.NONE, partition_index=p, leader_id=node, leader_epoch=-1,
                       replica_nodes=[node], isr_nodes=[node], offline_replicas=[])
             for p in range(n)]
    return Topic(error_code=code, name=name, is_internal=False, partitions=parts)


@api.handles(3, 0, 9, flexible_from=9)
async def metadata(ctx: api.RequestContext, request):
    broker = ctx.broker
    create = ctx.api_version >= 4 and bool(request.allow_auto_topic_creation) or \
        ctx.api_version < 4
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        names = broker.store.topics()
        create = False
    else:
        names = [t.name for t in request.topics]
    topics = [_topic(broker, n, create) for n in names]
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[Broker(node_id=broker.node_id, host=broker.host, port=broker.port, rack=None)],
        cluster_id=broker.cluster_id, controller_id=broker.node_id, topics=topics)
