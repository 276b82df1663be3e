"""With ``--acl``: who may send a Kafka request at all, and which topics of a data or admin
request it may touch. The listener calls ``call(ctx, registration, request)`` instead of the
handler; without ``--acl`` that is the handler itself.

- Before the connection authenticated (``strata.broker.kafka.sasl``) only ApiVersions and
  the SASL requests run; anything else raises ``NotAuthenticatedError`` (a bad request: the
  listener logs it, naming the client, and closes the connection).
- Topic rights, from the account's topicPerms: Produce needs PUB; Fetch and ListOffsets SUB;
  Metadata PUB or SUB (a topic asked for by name without it is answered
  TOPIC_AUTHORIZATION_FAILED, and is not auto-created; a listing of all topics leaves it
  out); CreateTopics, DeleteTopics and CreatePartitions an admin account. The handler sees
  only the topics allowed; the refused ones are added to its response with
  TOPIC_AUTHORIZATION_FAILED and no data. The group APIs check their own rights
  (``strata.broker.kafka.group_handlers``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from strata.broker.acl import Kind, Perm
from strata.broker.kafka.api import BadRequestError, Registration, RequestContext
from strata.broker.kafka.errors import TOPIC_AUTHORIZATION_FAILED
from strata.broker.kafka.sasl import account, acl_of, allowed, gate, principal

log = logging.getLogger(__name__)

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
DENIED = TOPIC_AUTHORIZATION_FAILED


class NotAuthenticatedError(BadRequestError):
    """A request other than ApiVersions or SASL on a connection not authenticated yet."""


async def call(ctx: RequestContext, reg: Registration, request: Any) -> Any:
    """Run the request's handler as the connection's rights allow."""
    if acl_of(ctx) is None:
        return await reg.handler(ctx, request)
    if not gate(ctx):
        raise NotAuthenticatedError(
            f"api {ctx.api_key} v{ctx.api_version} before SASL authentication (with --acl "
            "only ApiVersions, SaslHandshake and SaslAuthenticate are answered before)")
    guard = GUARDS.get(ctx.api_key)
    if guard is None:
        return await reg.handler(ctx, request)
    return await guard(ctx, reg, request)


def _split(ctx: RequestContext, items: list, name: Callable[[Any], str],
           perm: Perm) -> tuple[list, list]:
    ok, refused = [], []
    for it in items:
        (ok if allowed(ctx, Kind.TOPIC, name(it), perm) else refused).append(it)
    if refused:
        log.info("kafka client %s (%s, account %r): api %d refused on topics %s", ctx.peer,
                 ctx.client_id, principal(ctx), ctx.api_key,
                 ", ".join(repr(name(t)) for t in refused[:5]))
    return ok, refused


def _is_admin(ctx: RequestContext) -> bool:
    a = account(ctx)
    return a is not None and a.admin


async def _produce(ctx, reg, req):
    ok, refused = _split(ctx, list(req.topic_data), lambda t: t.name, Perm.PUB)
    if not refused:
        return await reg.handler(ctx, req)
    req.topic_data = ok
    resp = await reg.handler(ctx, req) if ok else None
    if req.acks == 0:
        return resp
    if resp is None:
        resp = reg.response(version=ctx.api_version, responses=[], throttle_time_ms=0)
    T = reg.response.TopicProduceResponse
    P = T.PartitionProduceResponse
    resp.responses = list(resp.responses) + [
        T(name=t.name, partition_responses=[P(index=p.index, error_code=DENIED, base_offset=-1)
                                            for p in t.partition_data]) for t in refused]
    return resp


async def _fetch(ctx, reg, req):
    ok, refused = _split(ctx, list(req.topics), lambda t: t.topic, Perm.SUB)
    if not refused:
        return await reg.handler(ctx, req)
    if ok:      # the handler answers the refused topics too (its answer is encoded off the
        req.topics = ok                                  # loop, before it comes back here)
        ctx.refused_topics = refused
        return await reg.handler(ctx, req)
    # nothing to wait for: answer at once
    resp = reg.response(version=ctx.api_version, throttle_time_ms=0, error_code=0,
                        session_id=0, responses=[])
    T = reg.response.FetchableTopicResponse
    P = T.PartitionData
    resp.responses = [
        T(topic=t.topic, partitions=[P(partition_index=p.partition, error_code=DENIED,
                                       high_watermark=-1, records=None)
                                     for p in t.partitions]) for t in refused]
    return resp


async def _list_offsets(ctx, reg, req):
    ok, refused = _split(ctx, list(req.topics), lambda t: t.name, Perm.SUB)
    if not refused:
        return await reg.handler(ctx, req)
    req.topics = ok
    resp = (await reg.handler(ctx, req) if ok else
            reg.response(version=ctx.api_version, throttle_time_ms=0, topics=[]))
    T = reg.response.ListOffsetsTopicResponse
    P = T.ListOffsetsPartitionResponse
    resp.topics = list(resp.topics) + [
        T(name=t.name, partitions=[P(partition_index=p.partition_index, error_code=DENIED,
                                     timestamp=-1, offset=-1) for p in t.partitions])
        for t in refused]
    return resp


async def _metadata(ctx, reg, req):
    if req.topics is None:          # all topics: show only those the account may use
        resp = await reg.handler(ctx, req)
        resp.topics = [t for t in resp.topics
                       if allowed(ctx, Kind.TOPIC, t.name, Perm.ANY)]
        return resp
    ok, refused = _split(ctx, list(req.topics), lambda t: t.name, Perm.ANY)
    req.topics = ok
    resp = await reg.handler(ctx, req)
    if refused:
        T = reg.response.MetadataResponseTopic
        resp.topics = list(resp.topics) + [
            T(error_code=DENIED, name=t.name, is_internal=False, partitions=[])
            for t in refused]
    return resp


def _admin_only(names: Callable[[Any], list[str]], build: Callable[[Any, int, list[str]], Any]):
    async def guard(ctx, reg, req):
        if _is_admin(ctx):
            return await reg.handler(ctx, req)
        refused = names(req)
        log.info("kafka client %s (%s, account %r): api %d refused (admin accounts only) on "
                 "topics %s", ctx.peer, ctx.client_id, principal(ctx), ctx.api_key,
                 ", ".join(repr(n) for n in refused[:5]))
        return build(reg.response, ctx.api_version, refused)
    return guard


_WHY = "creating and deleting topics needs an admin account"


def _created(R, v, names):
    T = R.CreatableTopicResult
    return R(version=v, throttle_time_ms=0, topics=[
        T(name=n, error_code=DENIED, error_message=_WHY, num_partitions=-1,
          replication_factor=-1) for n in names])


def _deleted(R, v, names):
    T = R.DeletableTopicResult
    return R(version=v, throttle_time_ms=0, responses=[
        T(name=n, error_code=DENIED, error_message=_WHY) for n in names])


def _partitions(R, v, names):
    T = R.CreatePartitionsTopicResult
    return R(version=v, throttle_time_ms=0, results=[
        T(name=n, error_code=DENIED, error_message=_WHY) for n in names])


GUARDS = {
    PRODUCE: _produce,
    FETCH: _fetch,
    LIST_OFFSETS: _list_offsets,
    METADATA: _metadata,
    CREATE_TOPICS: _admin_only(lambda r: [t.name for t in r.topics], _created),
    DELETE_TOPICS: _admin_only(
        lambda r: list(getattr(r, "topic_names", None) or ())
        or [t.name for t in getattr(r, "topics", None) or ()],
        _deleted),
    CREATE_PARTITIONS: _admin_only(lambda r: [t.name for t in r.topics], _partitions),
}
