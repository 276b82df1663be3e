"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37): topics are strata topics and
partitions their queues. One broker, so the replication factor is 1 (or -1: the default);
partition counts only grow (as in Kafka)."""

from __future__ import annotations

from strata.broker.kafka import api
from strata.broker.kafka import errors as ke
from strata.broker.names import check_topic
from strata.errors import StrataError

CreateTopicsResponse = api.response_class(19)
CreateResult = CreateTopicsResponse.CreatableTopicResult
DeleteTopicsResponse = api.response_class(20)
DeleteResult = DeleteTopicsResponse.DeletableTopicResult
CreatePartitionsResponse = api.response_class(37)
PartitionsResult = CreatePartitionsResponse.CreatePartitionsTopicResult


def _create(store, t, validate_only: bool) -> tuple[int, str | None, int]:
    try:
        check_topic(t.name)
    except StrataError as exc:
        return ke.INVALID_TOPIC_EXCEPTION, str(exc), -1
    if t.replication_factor not in (-1, 1):
        return (ke.INVALID_REPLICATION_FACTOR, f"replication factor {t.replication_factor}: "
                "this broker keeps one copy (1, or -1 for the default)", -1)
    if t.assignments:
        return ke.INVALID_REQUEST, "manual replica assignments are not supported", -1
    n = store.config.default_queues if t.num_partitions == -1 else t.num_partitions
    if n < 1:
        return ke.INVALID_PARTITIONS, f"{t.num_partitions} partitions (at least 1)", -1
    if store.queue_count(t.name):
        return ke.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} already exists", -1
    if validate_only:
        return ke.NONE, None, n
    try:
        store.create_topic(t.name, n)
    except StrataError as exc:
        return ke.code_for(exc), str(exc), -1
    return ke.NONE, None, n


@api.handles(19, 2, 5, flexible_from=5)
async def create_topics(ctx: api.RequestContext, request):
    store = ctx.broker.store
    results = []
    for t in request.topics:
        code, msg, n = _create(store, t, bool(request.validate_only))
        results.append(CreateResult(name=t.name, error_code=code, error_message=msg,
                                    num_partitions=n, replication_factor=1 if n > 0 else -1,
                                    configs=[] if code == ke.NONE else None))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


@api.handles(20, 1, 5, flexible_from=4)
async def delete_topics(ctx: api.RequestContext, request):
    store = ctx.broker.store
    results = []
    for name in request.topic_names:
        code, msg = ke.NONE, None
        try:
            check_topic(name)
            if not store.delete_topic(name):
                code, msg = ke.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}"
        except StrataError as exc:
            code, msg = ke.code_for(exc), str(exc)
        results.append(DeleteResult(name=name, error_code=code, error_message=msg))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


@api.handles(37, 0, 2, flexible_from=2)
async def create_partitions(ctx: api.RequestContext, request):
    store = ctx.broker.store
    results = []
    for t in request.topics:
        code, msg = ke.NONE, None
        have = store.queue_count(t.name)
        if have == 0:
            code, msg = ke.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {t.name!r}"
        elif t.count <= have:
            code, msg = ke.INVALID_PARTITIONS, (f"topic {t.name!r} has {have} partitions; "
                                                f"the count can only grow, got {t.count}")
        elif t.assignments:
            code, msg = ke.INVALID_REQUEST, "manual replica assignments are not supported"
        elif not request.validate_only:
            try:
                store.set_queue_count(t.name, t.count)
            except StrataError as exc:
                code, msg = ke.code_for(exc), str(exc)
        results.append(PartitionsResult(name=t.name, error_code=code, error_message=msg))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
