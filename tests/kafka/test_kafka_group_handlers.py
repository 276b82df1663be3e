"""The group handlers at the wire level, in every version they register: requests built and
encoded with kafka-python's client-side protocol classes, decoded as the listener decodes
them, handled on a real store and group journal, and the responses encoded as the listener
encodes them and decoded by the client classes again."""

from __future__ import annotations

import asyncio
import warnings
from types import SimpleNamespace

import pytest

warnings.simplefilter("ignore", DeprecationWarning)

from kafka.protocol.admin.groups import DescribeGroupsRequest, ListGroupsRequest  # noqa: E402
from kafka.protocol.consumer.group import (HeartbeatRequest, JoinGroupRequest,  # noqa: E402
                                           LeaveGroupRequest, OffsetCommitRequest,
                                           OffsetFetchRequest, SyncGroupRequest)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest  # noqa: E402
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest  # noqa: E402

from strata.broker.acl import AccessList, Account, Perm  # noqa: E402
from strata.broker.group_state import ConsumerGroups  # noqa: E402
from strata.broker.kafka import api  # noqa: E402
from strata.broker.kafka import group_handlers as gh  # noqa: E402
from strata.broker.kafka import sasl  # noqa: E402,F401 (registers its handlers)
from strata.broker.kafka.groups import Coordinator  # noqa: E402
from strata.store.message_store import MessageStore  # noqa: E402

pytestmark = pytest.mark.broker


def conn():
    """A connection's state as the listener keeps it (strata.broker.kafka.server)."""
    return SimpleNamespace(principal=None, state={}, closing=False)


class Harness:
    def __init__(self, tmp_path, acl=None):
        self.store = MessageStore(tmp_path / "s")
        self.store.create_topic("t", 3)
        self.groups = ConsumerGroups(tmp_path / "b")
        self.svc = gh.GroupService(self.store, self.groups, flush_sync=False,
                                   coordinator=Coordinator(min_session_timeout_ms=1,
                                                           initial_rebalance_delay_ms=0))
        self.broker = SimpleNamespace(store=self.store, groups=self.groups, acl=acl,
                                      host="127.0.0.1", port=9092, node_id=0,
                                      flush_sync=False, state={"groups": self.svc})
        self.conn = conn()

    async def call(self, req, version: int, conn=None):
        """Encode as a client, decode and handle as the listener, decode the response as
        a client."""
        req.API_VERSION = version
        data = req.encode()
        reg = api.HANDLERS[req.API_KEY]
        assert reg.min_version <= version <= reg.max_version
        decoded = reg.request.decode(data, version=version)
        conn = conn or self.conn
        ctx = api.RequestContext(req.API_KEY, version, 7, "test-client", "127.0.0.1:5555",
                                 conn.principal, conn, self.broker)
        resp = await reg.handler(ctx, decoded)
        frame = api.encode_response(resp, version, 7)
        return reg.response.decode(bytes(frame[4:]), version=version, header=True)

    def close(self):
        self.groups.close()
        self.store.close()


def run(coro):
    return asyncio.run(coro)


def _join_req(v, member=""):
    return JoinGroupRequest(version=v, group_id="G", session_timeout_ms=10_000,
                            rebalance_timeout_ms=20_000, member_id=member,
                            group_instance_id=None, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                                name="range", metadata=b"meta")], reason=None)


@pytest.mark.parametrize("jv", range(0, 8))
def test_join_sync_heartbeat_commit_fetch_leave_in_each_join_version(tmp_path, jv):
    h = Harness(tmp_path)

    async def main():
        r = await h.call(_join_req(jv), jv)
        if jv >= 4:
            assert r.error_code == 79 and r.member_id          # MEMBER_ID_REQUIRED
            r = await h.call(_join_req(jv, r.member_id), jv)
        assert r.error_code == 0 and r.generation_id == 1 and r.leader == r.member_id
        assert [(m.member_id, m.metadata) for m in r.members] == [(r.member_id, b"meta")]
        me, gen = r.member_id, r.generation_id
        for sv in range(0, 6):
            s = await h.call(SyncGroupRequest(
                group_id="G", generation_id=gen, member_id=me, group_instance_id=None,
                protocol_type="consumer", protocol_name="range",
                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=me, assignment=b"mine")]), sv)
            assert s.error_code == 0 and s.assignment == b"mine"
        for hv in range(0, 5):
            b = await h.call(HeartbeatRequest(group_id="G", generation_id=gen, member_id=me,
                                              group_instance_id=None), hv)
            assert b.error_code == 0
        for cv in range(2, 9):
            P = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
            c = await h.call(OffsetCommitRequest(
                group_id="G", generation_id_or_member_epoch=gen, member_id=me,
                group_instance_id=None, retention_time_ms=-1,
                topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
                    P(partition_index=0, committed_offset=10 + cv, committed_leader_epoch=-1,
                      commit_timestamp=-1, committed_metadata="md"),
                    P(partition_index=7, committed_offset=1, committed_leader_epoch=-1,
                      commit_timestamp=-1, committed_metadata=None)])]), cv)
            assert [(p.partition_index, p.error_code) for p in c.topics[0].partitions] == \
                [(0, 0), (7, 3)]                               # 7: no such partition
        for fv in range(1, 8):
            T = OffsetFetchRequest.OffsetFetchRequestTopic
            f = await h.call(OffsetFetchRequest(group_id="G", topics=[
                T(name="t", partition_indexes=[0, 1])], require_stable=False), fv)
            got = [(p.partition_index, p.committed_offset, p.metadata)
                   for p in f.topics[0].partitions]
            assert got == [(0, 18, "md"), (1, -1, "")]
            if fv >= 2:
                f = await h.call(OffsetFetchRequest(group_id="G", topics=None,
                                                    require_stable=False), fv)
                assert [(t.name, [p.partition_index for p in t.partitions])
                        for t in f.topics] == [("t", [0])]
        for dv in range(0, 6):
            d = await h.call(DescribeGroupsRequest(groups=["G", "nope"],
                                                   include_authorized_operations=False), dv)
            assert [(x.group_id, x.group_state) for x in d.groups] == [("G", "Stable"),
                                                                       ("nope", "Dead")]
            assert d.groups[0].members[0].member_assignment == b"mine"
            assert d.groups[0].protocol_data == "range"
        for lv in range(0, 5):
            lst = await h.call(ListGroupsRequest(states_filter=[], types_filter=[]), lv)
            assert [(x.group_id, x.protocol_type) for x in lst.groups] == [("G", "consumer")]
        if jv >= 3:
            lv_ = LeaveGroupRequest(group_id="G", members=[LeaveGroupRequest.MemberIdentity(
                member_id=me, group_instance_id=None, reason=None)])
            left = await h.call(lv_, 3)
            assert [m.error_code for m in left.members] == [0]
        else:
            left = await h.call(LeaveGroupRequest(group_id="G", member_id=me), 1)
            assert left.error_code == 0
        d = await h.call(DescribeGroupsRequest(groups=["G"]), 0)
        assert d.groups[0].group_state == "Empty"
        await h.svc.close()
    try:
        run(main())
    finally:
        h.close()
    # the commits are in the journal
    again = ConsumerGroups(tmp_path / "b")
    assert again.committed_offsets("G")[("t", 0)].offset == 18
    again.close()


def test_two_members_follower_waits_in_sync(tmp_path):
    h = Harness(tmp_path)

    async def main():
        a = await h.call(_join_req(3), 3)
        await h.call(SyncGroupRequest(group_id="G", generation_id=1, member_id=a.member_id,
                                      assignments=[]), 3)
        b_task = asyncio.create_task(h.call(_join_req(3), 3))
        await asyncio.sleep(0)
        beat = await h.call(HeartbeatRequest(group_id="G", generation_id=1,
                                             member_id=a.member_id), 1)
        assert beat.error_code == 27                      # REBALANCE_IN_PROGRESS
        a2 = await h.call(_join_req(3, a.member_id), 3)
        b = await b_task
        assert a2.generation_id == b.generation_id == 2 and len(a2.members) == 2
        follower = asyncio.create_task(h.call(SyncGroupRequest(
            group_id="G", generation_id=2, member_id=b.member_id, assignments=[]), 3))
        await asyncio.sleep(0.01)
        assert not follower.done()
        A = SyncGroupRequest.SyncGroupRequestAssignment
        await h.call(SyncGroupRequest(group_id="G", generation_id=2, member_id=a.member_id,
                                      assignments=[A(member_id=a.member_id, assignment=b"x"),
                                                   A(member_id=b.member_id, assignment=b"y")]),
                     3)
        assert (await follower).assignment == b"y"
        await h.svc.close()
    try:
        run(main())
    finally:
        h.close()


def test_session_timeout_fires_without_requests(tmp_path):
    """The coordinator's timer (not a poll) removes a silent member."""
    h = Harness(tmp_path)

    async def main():
        req = _join_req(3)
        req.session_timeout_ms = 50
        a = await h.call(req, 3)
        svc = h.svc
        assert svc.coord.describe("G").members
        gone = asyncio.get_running_loop().create_future()
        old = svc.coord.tick

        def tick(now):
            old(now)
            if not svc.coord.describe("G").members and not gone.done():
                gone.set_result(now)
        svc.coord.tick = tick
        await asyncio.wait_for(gone, 10)
        assert svc.coord.describe("G").state.value == "Empty"
        beat = await h.call(HeartbeatRequest(group_id="G", generation_id=1,
                                             member_id=a.member_id), 1)
        assert beat.error_code == 25
        await svc.close()
    try:
        run(main())
    finally:
        h.close()


def test_standalone_commit_and_acl(tmp_path):
    acl = AccessList([Account("alice1", "secret-a", topic_perms={"t": Perm.SUB},
                              group_perms={"G": Perm.SUB})])
    h = Harness(tmp_path, acl)
    P = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition

    def commit(group):
        return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1,
                                   member_id="", topics=[
                                       OffsetCommitRequest.OffsetCommitRequestTopic(
                                           name="t", partitions=[P(partition_index=1,
                                                                   committed_offset=4,
                                                                   committed_metadata="")])])

    async def main():
        # not authenticated: no rights at all
        r = await h.call(commit("G"), 3)
        assert r.topics[0].partitions[0].error_code == 30
        hs = await h.call(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert hs.error_code == 0 and "SCRAM-SHA-256" in hs.mechanisms
        au = await h.call(SaslAuthenticateRequest(auth_bytes=b"\0alice1\0secret-a"), 2)
        assert au.error_code == 0
        r = await h.call(commit("G"), 3)
        assert r.topics[0].partitions[0].error_code == 0
        r = await h.call(commit("other"), 3)
        assert r.topics[0].partitions[0].error_code == 30          # GROUP_AUTHORIZATION
        f = await h.call(OffsetFetchRequest(group_id="G", topics=None), 3)
        assert f.topics[0].partitions[0].committed_offset == 4
        lst = await h.call(ListGroupsRequest(), 2)
        assert [x.group_id for x in lst.groups] == ["G"]
        fc = await h.call(FindCoordinatorRequest(key="other", key_type=0), 1)
        assert fc.error_code == 30
        fc = await h.call(FindCoordinatorRequest(key="G", key_type=0), 1)
        assert (fc.error_code, fc.host, fc.port) == (0, "127.0.0.1", 9092)
        fc = await h.call(FindCoordinatorRequest(coordinator_keys=["G", "other"],
                                                 key_type=0), 4)
        assert [(c.key, c.error_code) for c in fc.coordinators] == [("G", 0), ("other", 30)]
        await h.svc.close()

    try:
        run(main())
    finally:
        h.close()


def test_wrong_password_closes(tmp_path):
    h = Harness(tmp_path, AccessList([Account("alice1", "secret-a")]))
    c = conn()

    async def main():
        await h.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, c)
        au = await h.call(SaslAuthenticateRequest(auth_bytes=b"\0alice1\0nope"), 1, c)
        assert au.error_code == 58 and "wrong password" in au.error_message
        hs = await h.call(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert hs.error_code == 33 and hs.mechanisms == ["PLAIN", "SCRAM-SHA-256"]
        await h.svc.close()
    try:
        run(main())
    finally:
        h.close()
    assert c.closing and c.principal is None


def _static_join(v, instance, member=""):
    req = _join_req(v, member)
    req.group_instance_id = instance
    return req


def test_static_membership_on_the_wire_and_the_stored_image(tmp_path):
    """JoinGroup v5+ with an instance id, its replacement without a rebalance (answered once
    the image is stored), FENCED_INSTANCE_ID in Heartbeat v3 / SyncGroup v3 / OffsetCommit v7
    for the old member id, LeaveGroup v3 by instance id; a new service (a restart) loads the
    group Stable from the journal."""
    h = Harness(tmp_path)
    P = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition

    def commit(gen, member, instance):
        return OffsetCommitRequest(
            group_id="G", generation_id_or_member_epoch=gen, member_id=member,
            group_instance_id=instance, retention_time_ms=-1,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
                P(partition_index=0, committed_offset=3, committed_leader_epoch=-1,
                  commit_timestamp=-1, committed_metadata="")])])

    async def main():
        r = await h.call(_static_join(5, "inst"), 5)
        assert r.error_code == 0 and r.member_id.startswith("inst-")   # no MEMBER_ID_REQUIRED
        first = r.member_id
        A = SyncGroupRequest.SyncGroupRequestAssignment
        s = await h.call(SyncGroupRequest(group_id="G", generation_id=1, member_id=first,
                                          group_instance_id="inst",
                                          assignments=[A(member_id=first, assignment=b"a")]), 3)
        assert s.error_code == 0 and h.groups.memberships["G"]          # stored
        r2 = await h.call(_static_join(7, "inst"), 7)                   # the instance restarts
        second = r2.member_id
        assert r2.error_code == 0 and second != first and r2.generation_id == 1
        assert r2.leader == first and r2.members == []                  # told not to assign
        assert second.encode() in h.groups.memberships["G"]             # stored before answer
        beat = await h.call(HeartbeatRequest(group_id="G", generation_id=1, member_id=first,
                                             group_instance_id="inst"), 3)
        assert beat.error_code == 82                                    # FENCED_INSTANCE_ID
        old_sync = await h.call(SyncGroupRequest(group_id="G", generation_id=1,
                                                 member_id=first, group_instance_id="inst",
                                                 assignments=[]), 3)
        assert old_sync.error_code == 82
        c = await h.call(commit(1, first, "inst"), 7)
        assert c.topics[0].partitions[0].error_code == 82
        c = await h.call(commit(1, second, "inst"), 7)
        assert c.topics[0].partitions[0].error_code == 0
        s2 = await h.call(SyncGroupRequest(group_id="G", generation_id=1, member_id=second,
                                           group_instance_id="inst", assignments=[]), 3)
        assert s2.assignment == b"a"                                    # the old one's
        await h.svc.close()

        # a restart: a new service over the same journal state loads the group
        svc2 = gh.GroupService(h.store, ConsumerGroups(tmp_path / "b"), flush_sync=False,
                               coordinator=Coordinator(min_session_timeout_ms=1,
                                                       initial_rebalance_delay_ms=0))
        h.broker.state["groups"] = svc2
        h.groups = svc2.groups
        assert svc2.loaded == 1
        d = await h.call(DescribeGroupsRequest(groups=["G"]), 0)
        assert d.groups[0].group_state == "Stable"
        assert [(m.member_id, m.member_assignment) for m in d.groups[0].members] == \
            [(second, b"a")]
        beat = await h.call(HeartbeatRequest(group_id="G", generation_id=1, member_id=second,
                                             group_instance_id="inst"), 3)
        assert beat.error_code == 0
        L = LeaveGroupRequest.MemberIdentity
        left = await h.call(LeaveGroupRequest(group_id="G", members=[
            L(member_id="", group_instance_id="other", reason=None),
            L(member_id=first, group_instance_id="inst", reason=None),
            L(member_id="", group_instance_id="inst", reason=None)]), 3)
        assert [m.error_code for m in left.members] == [25, 82, 0]
        d = await h.call(DescribeGroupsRequest(groups=["G"]), 0)
        assert d.groups[0].group_state == "Empty"
        await svc2.close()
        assert ConsumerGroups(tmp_path / "b").memberships["G"]          # the Empty image
    try:
        run(main())
    finally:
        h.close()


def test_a_refused_image_store_fails_the_sync_and_rebalances(tmp_path):
    h = Harness(tmp_path)
    fail = {"on": True}
    original = h.groups.journal.append

    def append(data):
        if fail["on"]:
            raise OSError(28, "No space left on device")
        original(data)
    h.groups.journal.append = append

    async def main():
        r = await h.call(_join_req(3), 3)
        me = r.member_id
        A = SyncGroupRequest.SyncGroupRequestAssignment
        s = await h.call(SyncGroupRequest(group_id="G", generation_id=1, member_id=me,
                                          assignments=[A(member_id=me, assignment=b"x")]), 3)
        assert s.error_code == 15                   # COORDINATOR_NOT_AVAILABLE
        assert h.groups.memberships == {}           # nothing half stored
        assert h.svc.coord.describe("G").state.value == "PreparingRebalance"
        fail["on"] = False                          # room again: the member rejoins
        r = await h.call(_join_req(3, me), 3)
        assert r.error_code == 0 and r.generation_id == 2
        s = await h.call(SyncGroupRequest(group_id="G", generation_id=2, member_id=me,
                                          assignments=[A(member_id=me, assignment=b"y")]), 3)
        assert s.error_code == 0 and h.groups.memberships["G"]
        await h.svc.close()
    try:
        run(main())
    finally:
        h.close()
