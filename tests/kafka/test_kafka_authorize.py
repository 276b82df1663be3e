"""The ACL guard of the Kafka data and admin APIs (strata.broker.kafka.authorize): the
handler sees only the topics the account may use, the refused ones come back with
TOPIC_AUTHORIZATION_FAILED, and nothing runs before SASL. The handlers here are stand-ins
that answer with the real response classes and record which topics reached them."""

from __future__ import annotations

import asyncio
import warnings
from types import SimpleNamespace

import pytest

warnings.simplefilter("ignore", DeprecationWarning)

from strata.broker.acl import AccessList, Account, Perm  # noqa: E402
from strata.broker.kafka import api  # noqa: E402
from strata.broker.kafka.authorize import NotAuthenticatedError, call  # noqa: E402

ACL = AccessList([Account("bob123", "bob-secret", topic_perms={"w": Perm.PUB, "r": Perm.SUB}),
                  Account("admin1", "admin-secret", admin=True)])


def ctx(key: int, version: int, principal: str | None, acl=ACL):
    conn = SimpleNamespace(principal=principal, state={}, closing=False)
    broker = SimpleNamespace(acl=acl, state={})
    return api.RequestContext(key, version, 1, "c", "127.0.0.1:1", principal, conn, broker)


def reg(key: int, handler):
    return api.Registration(key, 0, 20, handler, api.request_class(key),
                            api.response_class(key))


def run(c):
    return asyncio.run(c)


def test_produce_keeps_refused_topics_from_the_handler():
    Req = api.request_class(0)
    seen = []

    async def handler(_ctx, req):
        seen.extend(t.name for t in req.topic_data)
        R = api.response_class(0)
        T = R.TopicProduceResponse
        return R(version=9, throttle_time_ms=0, responses=[
            T(name=t.name, partition_responses=[T.PartitionProduceResponse(index=0)])
            for t in req.topic_data])
    D = Req.TopicProduceData
    req = Req(version=9, transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        D(name="w", partition_data=[D.PartitionProduceData(index=0, records=None)]),
        D(name="r", partition_data=[D.PartitionProduceData(index=1, records=None)])])
    resp = run(call(ctx(0, 9, "bob123"), reg(0, handler), req))
    assert seen == ["w"]
    got = {t.name: [(p.index, p.error_code) for p in t.partition_responses]
           for t in resp.responses}
    assert got == {"w": [(0, 0)], "r": [(1, 29)]}
    api.encode_response(resp, 9, 1)                 # it encodes


def test_fetch_of_only_refused_topics_answers_at_once():
    Req = api.request_class(1)
    T = Req.FetchTopic

    async def handler(_ctx, _req):
        raise AssertionError("the handler must not run (it would long-poll)")
    req = Req(version=11, replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
              isolation_level=0, session_id=0, session_epoch=-1, topics=[
                  T(topic="w", partitions=[T.FetchPartition(partition=0, fetch_offset=0)])],
              forgotten_topics_data=[], rack_id="")
    resp = run(call(ctx(1, 11, "bob123"), reg(1, handler), req))
    assert [(t.topic, [p.error_code for p in t.partitions]) for t in resp.responses] == \
        [("w", [29])]
    assert resp.responses[0].partitions[0].records is None
    api.encode_response(resp, 11, 1)


def test_metadata_hides_and_refuses():
    R = api.response_class(3)
    T = R.MetadataResponseTopic
    asked = []

    async def handler(_ctx, req):
        names = ["w", "r", "hidden"] if req.topics is None else [t.name for t in req.topics]
        asked.append(names)
        return R(version=9, throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=0,
                 topics=[T(error_code=0, name=n, is_internal=False, partitions=[])
                         for n in names])
    Req = api.request_class(3)
    every = run(call(ctx(3, 9, "bob123"), reg(3, handler),
                     Req(version=9, topics=None, allow_auto_topic_creation=True)))
    assert [t.name for t in every.topics] == ["w", "r"]
    named = run(call(ctx(3, 9, "bob123"), reg(3, handler), Req(
        version=9, topics=[Req.MetadataRequestTopic(name="hidden"),
                           Req.MetadataRequestTopic(name="r")],
        allow_auto_topic_creation=True)))
    assert asked[-1] == ["r"]                      # "hidden" never reaches auto-create
    assert [(t.name, t.error_code) for t in named.topics] == [("r", 0), ("hidden", 29)]


def test_topic_admin_needs_an_admin_account():
    Req = api.request_class(19)
    ran = []

    async def handler(_ctx, req):
        ran.append(True)
        R = api.response_class(19)
        return R(version=4, throttle_time_ms=0, topics=[])
    req = Req(version=4, topics=[Req.CreatableTopic(name="w", num_partitions=1,
                                                    replication_factor=1, assignments=[],
                                                    configs=[])],
              timeout_ms=1000, validate_only=False)
    resp = run(call(ctx(19, 4, "bob123"), reg(19, handler), req))
    assert not ran and [(t.name, t.error_code) for t in resp.topics] == [("w", 29)]
    run(call(ctx(19, 4, "admin1"), reg(19, handler), req))
    assert ran == [True]


def test_gate_before_sasl_and_no_acl_means_no_checks():
    async def handler(_ctx, _req):
        return "ran"
    Req = api.request_class(3)
    req = Req(version=9, topics=None, allow_auto_topic_creation=True)
    with pytest.raises(NotAuthenticatedError, match="before SASL"):
        run(call(ctx(3, 9, None), reg(3, handler), req))
    assert run(call(ctx(18, 3, None), reg(18, handler), object())) == "ran"   # ApiVersions
    assert run(call(ctx(3, 9, None, acl=None), reg(3, handler), req)) == "ran"
