"""The classic group coordinator's state machine (strata.broker.kafka.groups), driven with
explicit times: joins, syncs, heartbeats, leaves, session and rebalance timeouts."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.broker.kafka import groups as g
from strata.broker.kafka.groups import Coordinator, State

SESSION = 10_000
REBALANCE = 30_000
PROTOS = [("range", b"sub-a"), ("roundrobin", b"sub-b")]


def coord(initial_delay: int = 0) -> Coordinator:
    """A coordinator with predictable member ids; without the initial rebalance delay unless
    asked (the rules other than the delay are tested without it)."""
    ids = itertools.count(1)
    return Coordinator(new_member_id=lambda client: f"{client}-{next(ids)}",
                       initial_rebalance_delay_ms=initial_delay)


def join(c: Coordinator, member: str = "", now: int = 0, *, client: str = "c",
         protos=PROTOS, group: str = "G", known: bool = False, session: int = SESSION,
         rebalance: int = REBALANCE):
    return c.join(group, member, client_id=client, client_host="/127.0.0.1",
                  session_timeout_ms=session, rebalance_timeout_ms=rebalance,
                  protocol_type="consumer", protocols=protos, now_ms=now,
                  require_known_member_id=known)


def stable_pair(c: Coordinator):
    """Two members through join and sync; returns (leader id, follower id)."""
    a = join(c, client="a")
    assert a.done and a.result.error == g.NONE      # alone: the join completes at once
    ida = a.result.member_id
    assert c.sync("G", 1, ida, {ida: b"all"}, 1).result.error == g.NONE
    b = join(c, client="b", now=2)                  # a newcomer starts a rebalance
    assert not b.done
    assert c.heartbeat("G", 1, ida, 3) == g.REBALANCE_IN_PROGRESS
    a2 = join(c, ida, now=4)
    assert a2.done and b.done
    idb = b.result.member_id
    assert a2.result.generation_id == b.result.generation_id == 2
    assert a2.result.leader == b.result.leader == ida
    assert [m[0] for m in a2.result.members] == [ida, idb] and b.result.members == ()
    sb = c.sync("G", 2, idb, {}, 5)
    assert not sb.done                              # the follower waits for the leader
    sa = c.sync("G", 2, ida, {ida: b"p0", idb: b"p1"}, 6)
    assert sa.result.assignment == b"p0" and sb.result.assignment == b"p1"
    assert c.describe("G").state is State.STABLE
    return ida, idb


def test_first_member_becomes_leader_and_gets_its_metadata():
    c = coord()
    p = join(c, client="a")
    r = p.result
    assert r.error == g.NONE and r.generation_id == 1 and r.leader == r.member_id
    assert r.protocol_name == "range" and r.members == ((r.member_id, None, b"sub-a"),)
    assert c.describe("G").state is State.COMPLETING_REBALANCE


def test_rebalance_with_two_members_and_follower_waits_for_leader():
    c = coord()
    ida, idb = stable_pair(c)
    view = c.describe("G")
    assert [(m.member_id, m.assignment) for m in view.members] == [(ida, b"p0"), (idb, b"p1")]
    assert c.heartbeat("G", 2, idb, 10) == g.NONE
    # a Stable member's repeated join gets the same generation back
    again = join(c, idb, now=11)
    assert again.result.generation_id == 2 and again.result.members == ()


def test_member_id_required_then_join_with_it():
    c = coord()
    first = join(c, known=True)
    assert first.result.error == g.MEMBER_ID_REQUIRED and first.result.member_id
    second = join(c, first.result.member_id, now=1, known=True)
    assert second.result.error == g.NONE
    assert second.result.member_id == first.result.member_id
    assert second.result.generation_id == 1


def test_pending_member_holds_the_join_until_it_joins_or_expires():
    c = coord()
    ida, idb = stable_pair(c)
    newcomer = join(c, known=True, now=20).result.member_id    # pending, not yet a member
    a = join(c, ida, now=21)
    b = join(c, idb, now=21)
    assert not a.done and not b.done                # held for the pending member
    c.tick(20 + SESSION)                            # it never came: it expires
    assert a.done and b.done and a.result.generation_id == 3
    assert join(c, newcomer, now=20 + SESSION + 1).result.error == g.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_drops_members_that_did_not_rejoin():
    c = coord()
    ida, idb = stable_pair(c)
    b = join(c, idb, now=100, protos=[("range", b"new-sub")])   # changed metadata: rebalance
    assert not b.done
    for t in range(200, 100 + REBALANCE, 9_000):    # a keeps beating but does not rejoin
        assert c.heartbeat("G", 2, ida, t) == g.REBALANCE_IN_PROGRESS
        c.tick(t)
    assert c.next_deadline() == 100 + REBALANCE
    c.tick(100 + REBALANCE - 1)
    assert not b.done
    c.tick(100 + REBALANCE)
    r = b.result
    assert r.error == g.NONE and r.generation_id == 3 and r.leader == idb
    assert r.members == ((idb, None, b"new-sub"),)
    assert c.heartbeat("G", 3, ida, 100 + REBALANCE) == g.UNKNOWN_MEMBER_ID


def test_session_timeout_expires_a_silent_member_and_rebalances():
    c = coord()
    ida, idb = stable_pair(c)
    c.tick(5 + SESSION - 1)                          # b synced last at 5
    assert c.describe("G").state is State.STABLE
    assert c.heartbeat("G", 2, ida, 5 + SESSION - 1) == g.NONE   # a keeps beating
    c.tick(5 + SESSION)                                         # b's session is over
    view = c.describe("G")
    assert view.state is State.PREPARING_REBALANCE
    assert [m.member_id for m in view.members] == [ida]
    assert c.heartbeat("G", 2, ida, 6 + SESSION) == g.REBALANCE_IN_PROGRESS
    a = join(c, ida, now=6 + SESSION + 1)
    assert a.result.generation_id == 3 and a.result.members == ((ida, None, b"sub-a"),)


def test_illegal_generation_and_unknown_member():
    c = coord()
    ida, idb = stable_pair(c)
    assert c.heartbeat("G", 1, ida, 10) == g.ILLEGAL_GENERATION
    assert c.heartbeat("G", 2, "nobody", 10) == g.UNKNOWN_MEMBER_ID
    assert c.heartbeat("other", 2, ida, 10) == g.UNKNOWN_MEMBER_ID
    assert c.sync("G", 1, ida, {}, 10).result.error == g.ILLEGAL_GENERATION
    assert c.sync("G", 2, "nobody", {}, 10).result.error == g.UNKNOWN_MEMBER_ID
    assert join(c, "nobody", now=10).result.error == g.UNKNOWN_MEMBER_ID


def test_leave_rebalances_the_rest_and_last_leave_empties_the_group():
    c = coord()
    ida, idb = stable_pair(c)
    assert c.leave("G", ida, 10) == g.NONE
    assert c.describe("G").state is State.PREPARING_REBALANCE
    b = join(c, idb, now=11)
    assert b.result.leader == idb and b.result.generation_id == 3   # a new leader
    assert c.leave("G", idb, 12) == g.NONE
    view = c.describe("G")
    assert view.state is State.EMPTY and view.members == () and view.generation_id == 4
    assert c.leave("G", idb, 13) == g.UNKNOWN_MEMBER_ID
    assert c.describe("nope").state is State.DEAD


def test_leave_during_sync_fails_waiting_followers_with_rebalance():
    c = coord()
    ida, idb = stable_pair(c)
    a = join(c, ida, now=20, protos=[("range", b"x")])
    b = join(c, idb, now=21)
    assert a.done and b.done and b.result.generation_id == 3
    sb = c.sync("G", 3, idb, {}, 22)
    assert not sb.done
    assert c.leave("G", ida, 23) == g.NONE          # the leader leaves before assigning
    assert sb.result.error == g.REBALANCE_IN_PROGRESS


def test_leader_that_never_syncs_is_removed_after_the_rebalance_timeout():
    c = coord()
    ida, idb = stable_pair(c)
    a = join(c, ida, now=20, protos=[("range", b"x")])
    b = join(c, idb, now=21)
    sb = c.sync("G", 3, idb, {}, 22)
    for t in range(1_000, 21 + REBALANCE, 9_000):    # the leader beats but never syncs
        assert c.heartbeat("G", 3, ida, t) == g.NONE
        c.tick(t)
    assert not sb.done
    assert c.next_deadline() == 21 + REBALANCE
    c.tick(21 + REBALANCE)
    assert sb.result.error == g.REBALANCE_IN_PROGRESS
    assert [m.member_id for m in c.describe("G").members] == [idb]
    assert a.done and b.done


def test_inconsistent_protocols_and_bad_session_timeout():
    c = coord()
    stable_pair(c)
    assert join(c, now=10, protos=[("sticky", b"")]).result.error == g.INCONSISTENT_GROUP_PROTOCOL
    r = c.join("G", "", client_id="x", client_host="h", session_timeout_ms=SESSION,
               rebalance_timeout_ms=REBALANCE, protocol_type="connect", protocols=PROTOS,
               now_ms=10)
    assert r.result.error == g.INCONSISTENT_GROUP_PROTOCOL
    assert join(c, now=10, session=10).result.error == g.INVALID_SESSION_TIMEOUT
    assert join(c, now=10, group="").result.error == g.INVALID_GROUP_ID


def test_protocol_vote_picks_the_one_most_members_prefer():
    c = coord()
    a = join(c, client="a", protos=[("range", b"1"), ("roundrobin", b"2")])
    ida = a.result.member_id
    c.sync("G", 1, ida, {}, 0)
    b = join(c, client="b", protos=[("roundrobin", b"3"), ("range", b"4")], now=1)
    d = join(c, client="d", protos=[("roundrobin", b"5")], now=1)
    join(c, ida, now=2, protos=[("range", b"1"), ("roundrobin", b"2")])
    assert b.result.protocol_name == d.result.protocol_name == "roundrobin"


def test_check_commit_rules():
    c = coord()
    assert c.check_commit("solo", -1, "", 0) == g.NONE          # assign() consumer
    assert c.check_commit("solo", 3, "m", 0) == g.ILLEGAL_GENERATION
    ida, idb = stable_pair(c)
    assert c.check_commit("G", -1, "", 10) == g.UNKNOWN_MEMBER_ID   # group in use
    assert c.check_commit("G", 2, ida, 10) == g.NONE
    assert c.check_commit("G", 1, ida, 10) == g.ILLEGAL_GENERATION
    assert c.check_commit("G", 2, "x", 10) == g.UNKNOWN_MEMBER_ID
    join(c, ida, now=11, protos=[("range", b"z")])
    assert c.check_commit("G", 2, idb, 12) == g.NONE           # commit while rebalancing
    join(c, idb, now=12)
    assert c.check_commit("G", 3, idb, 13) == g.REBALANCE_IN_PROGRESS


def test_listing():
    c = coord()
    stable_pair(c)
    join(c, group="H")
    assert sorted(c.listing()) == [("G", "consumer", State.STABLE),
                                   ("H", "consumer", State.COMPLETING_REBALANCE)]


# ---------------------------------------------------------------------- random runs

OPS = st.lists(st.tuples(st.sampled_from(["join", "rejoin", "sync", "beat", "leave", "tick",
                                                 "static"]),
                         st.integers(0, 3), st.integers(1, 40_000)), max_size=60)


@pytest.mark.parametrize("delay", [0, 3_000], ids=["no-initial-delay", "initial-delay"])
@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_random_runs_keep_the_invariants(delay, ops):
    """Whatever the order of requests and time steps: each waiter is resolved once, at
    most one generation is live, a Stable group's members all hold the leader's assignment,
    the leader is a member, and ``next_deadline`` never lies in the past after a tick."""
    c = coord(delay)
    now = 0
    members: list[str] = []
    waiting: list[g.Pending] = []
    last_gen = -1
    for op, who, dt in ops:
        mid = members[who % len(members)] if members else ""
        if op == "join" or (op == "rejoin" and not mid):
            p = join(c, now=now, client=f"c{who}", known=bool(who % 2))
            if p.done and p.result.error == g.MEMBER_ID_REQUIRED:
                p = join(c, p.result.member_id, now=now)
            waiting.append(p)
            if p.done and p.result.error == g.NONE:
                members.append(p.result.member_id)
            else:
                p.add_done_callback(lambda r: r.error == g.NONE and members.append(r.member_id))
        elif op == "static":           # an instance (re)starting: empty member id
            p = sjoin(c, f"i{who % 2}", now=now)
            waiting.append(p)
            if p.done and p.result.error == g.NONE:
                members.append(p.result.member_id)
            else:
                p.add_done_callback(lambda r: r.error == g.NONE and members.append(r.member_id))
        elif op == "rejoin":
            waiting.append(join(c, mid, now=now))
        elif op == "sync" and mid:
            view = c.describe("G")
            waiting.append(c.sync("G", view.generation_id, mid,
                                  {m.member_id: m.member_id.encode() for m in view.members},
                                  now))
        elif op == "beat" and mid:
            c.heartbeat("G", c.describe("G").generation_id, mid, now)
        elif op == "leave" and mid:
            c.leave("G", mid, now)
            members.remove(mid)
        elif op == "tick":
            now += dt
            c.tick(now)
            nd = c.next_deadline()
            assert nd is None or nd > now
        view = c.describe("G")
        assert view.generation_id >= last_gen
        last_gen = view.generation_id
        grp = c.groups.get("G")
        if grp is not None and grp.members:
            assert grp.leader_id in grp.members
        if grp is not None:
            assert all(grp.members[mid].group_instance_id == iid
                       for iid, mid in grp.static.items())
        if view.state is State.STABLE:
            # (a static member replaced without a rebalance holds its instance's assignment)
            assert all(m.assignment == m.member_id.encode() or (
                m.group_instance_id and m.assignment.decode().startswith(
                    m.group_instance_id + "-")) for m in view.members)
            assert all(m.join is None and m.sync is None for m in grp.members.values())
        if view.state is State.EMPTY:
            assert not view.members
        members[:] = [m for m in members if grp is not None and m in grp.members]
    # a finished join or sync always carries a definite answer
    for p in waiting:
        if p.done:
            assert p.result.error in (g.NONE, g.REBALANCE_IN_PROGRESS, g.UNKNOWN_MEMBER_ID,
                                      g.ILLEGAL_GENERATION, g.FENCED_INSTANCE_ID)


# ---------------------------------------------------------------------- static membership


def sjoin(c: Coordinator, instance: str, member: str = "", now: int = 0, *, protos=PROTOS,
          client: str = "c"):
    return c.join("G", member, client_id=client, client_host="/127.0.0.1",
                  session_timeout_ms=SESSION, rebalance_timeout_ms=REBALANCE,
                  protocol_type="consumer", protocols=protos, now_ms=now,
                  require_known_member_id=True, group_instance_id=instance)


def static_pair(c: Coordinator):
    """Two static members (instances i1, i2), Stable at generation 2."""
    a = sjoin(c, "i1")
    assert a.result.error == g.NONE          # no MEMBER_ID_REQUIRED for a static member
    ida = a.result.member_id
    c.sync("G", 1, ida, {ida: b"all"}, 1)
    b = sjoin(c, "i2", now=2)
    a2 = sjoin(c, "i1", ida, now=3)
    idb = b.result.member_id
    assert a2.result.generation_id == b.result.generation_id == 2
    sb = c.sync("G", 2, idb, {}, 4)
    c.sync("G", 2, ida, {ida: b"p0", idb: b"p1"}, 5)
    assert sb.result.assignment == b"p1"
    c.take_dirty()
    return ida, idb


def test_static_member_rejoining_with_unchanged_metadata_replaces_without_rebalance():
    c = coord()
    ida, idb = static_pair(c)
    before = c.rebalances
    r = sjoin(c, "i2", now=100).result              # i2 restarted: a new incarnation
    assert r.error == g.NONE and r.member_id not in (ida, idb) and r.replaced
    assert r.generation_id == 2 and r.leader == ida and r.members == ()
    assert c.rebalances == before and c.describe("G").state is State.STABLE
    assert c.take_dirty() == ["G"]                  # its new member id is to be stored
    # the new incarnation syncs and gets the old one's assignment; the old one is fenced
    assert c.sync("G", 2, r.member_id, {}, 101, group_instance_id="i2").result.assignment \
        == b"p1"
    assert c.heartbeat("G", 2, idb, 102, group_instance_id="i2") == g.FENCED_INSTANCE_ID
    assert c.heartbeat("G", 2, r.member_id, 102, group_instance_id="i2") == g.NONE
    assert c.check_commit("G", 2, idb, 103, group_instance_id="i2") == g.FENCED_INSTANCE_ID
    assert sjoin(c, "i2", idb, now=104).result.error == g.FENCED_INSTANCE_ID
    assert c.heartbeat("G", 2, ida, 105) == g.NONE  # the others go on


def test_static_leader_replaced_is_not_told_to_assign():
    c = coord()
    ida, idb = static_pair(c)
    r = sjoin(c, "i1", now=100).result
    assert r.error == g.NONE and r.leader == ida != r.member_id     # the old leader's id
    assert c.groups["G"].leader_id == r.member_id                   # but it leads from now
    assert c.describe("G").state is State.STABLE


def test_a_replaced_leader_told_it_follows_rejoins_as_a_follower():
    """The sequence that failed the static restart test with kafka-python (issue 23): the
    leader's instance restarts, is answered as a follower (no rebalance), syncs, and then
    sends its JoinGroup again (kafka-python dropped its first answer). That member was never
    told it leads this generation: a follower's repeated join, no rebalance. A member told it
    leads (after the next rebalance) still makes the group rebalance by rejoining."""
    c = coord()
    ida, idb = static_pair(c)
    before = c.rebalances
    r = sjoin(c, "i1", now=100).result
    assert r.leader == ida != r.member_id
    assert c.sync("G", 2, r.member_id, {}, 101, group_instance_id="i1").result.assignment \
        == b"p0"
    again = sjoin(c, "i1", r.member_id, now=102)
    assert again.done and again.result.error == g.NONE
    assert again.result.generation_id == 2 and again.result.leader == ida
    assert again.result.members == ()                       # not told to assign
    assert c.rebalances == before and c.describe("G").state is State.STABLE
    assert c.heartbeat("G", 2, idb, 103) == g.NONE          # the other member never noticed
    # restarted again: still not the leader it was told of
    r2 = sjoin(c, "i1", now=104).result
    assert r2.leader == ida and c.describe("G").state is State.STABLE
    # a rebalance (i2's metadata changes) makes i1's incarnation the leader it is told it is
    p = sjoin(c, "i2", idb, now=105, protos=[("range", b"other-topics")])
    lead = sjoin(c, "i1", r2.member_id, now=106)
    assert lead.result.generation_id == p.result.generation_id == 3
    assert lead.result.leader == r2.member_id and len(lead.result.members) == 2
    c.sync("G", 3, idb, {}, 107)
    c.sync("G", 3, r2.member_id, {r2.member_id: b"x", idb: b"y"}, 108)
    assert c.describe("G").state is State.STABLE
    assert not sjoin(c, "i1", r2.member_id, now=109).done   # the leader's join: rebalance
    assert c.describe("G").state is State.PREPARING_REBALANCE


def test_static_member_with_changed_metadata_triggers_a_rebalance():
    c = coord()
    ida, idb = static_pair(c)
    p = sjoin(c, "i2", now=100, protos=[("range", b"other-topics")])
    assert not p.done and c.describe("G").state is State.PREPARING_REBALANCE
    assert c.heartbeat("G", 2, ida, 101) == g.REBALANCE_IN_PROGRESS
    a = sjoin(c, "i1", ida, now=102)
    assert a.done and p.done and p.result.generation_id == 3


def test_static_leave_by_instance_id_and_fencing():
    c = coord()
    ida, idb = static_pair(c)
    assert c.leave("G", "", 10, group_instance_id="nobody") == g.UNKNOWN_MEMBER_ID
    assert c.leave("G", ida, 10, group_instance_id="i2") == g.FENCED_INSTANCE_ID
    assert c.leave("G", "", 11, group_instance_id="i2") == g.NONE
    assert "i2" not in c.groups["G"].static and idb not in c.groups["G"].members
    assert c.describe("G").state is State.PREPARING_REBALANCE


def test_static_member_that_does_not_rejoin_stays_until_its_session_ends():
    c = coord()
    ida, idb = static_pair(c)
    p = join(c, client="d", now=100)                # a dynamic newcomer: rebalance
    a = sjoin(c, "i1", ida, now=101)
    assert not a.done                               # i2 has not rejoined yet
    for t in (9_000, 18_000, 27_000):               # ... but its session is alive
        assert c.heartbeat("G", 2, idb, t) == g.REBALANCE_IN_PROGRESS
    c.tick(100 + REBALANCE)                         # the rebalance timeout: i2 kept
    assert a.done and p.done and a.result.generation_id == 3
    assert idb in c.groups["G"].members and idb in {m[0] for m in a.result.members}
    # i2's session (it neither heartbeats nor waits) ends it, and the group rebalances
    c.sync("G", 3, ida, {}, 100 + REBALANCE)
    c.tick(100 + REBALANCE + SESSION)
    assert idb not in c.groups["G"].members and "i2" not in c.groups["G"].static


def test_image_round_trip_and_load_resumes_stable_without_rebalance():
    from strata.broker.kafka import group_image as gi
    c = coord()
    ida, idb = static_pair(c)
    img = c.image("G")
    data = gi.encode(img)
    assert gi.decode(data) == img
    c2 = coord()
    c2.load("G", gi.decode(data), now_ms=1_000_000)
    v = c2.describe("G")
    assert v.state is State.STABLE and v.generation_id == 2 and v.protocol_name == "range"
    assert [(m.member_id, m.group_instance_id, m.assignment) for m in v.members] == \
        [(ida, "i1", b"p0"), (idb, "i2", b"p1")]
    assert c2.heartbeat("G", 2, ida, 1_000_001) == g.NONE
    assert c2.sync("G", 2, idb, {}, 1_000_002).result.assignment == b"p1"
    assert c2.check_commit("G", 2, ida, 1_000_003) == g.NONE
    # sessions restart at load: nobody expires before load time + session timeout
    assert c2.next_deadline() >= 1_000_000 + SESSION - 1
    c2.tick(1_000_001 + SESSION)                    # ida beat at +1: ...
    assert idb in c2.groups["G"].members            # idb synced at +2
    # a restarted static member (empty member id) replaces its loaded self, no rebalance
    r = sjoin(c2, "i2", now=1_000_004).result
    assert r.error == g.NONE and r.replaced and c2.rebalances == 0


def test_image_of_an_empty_group_and_a_bad_image():
    import pytest
    from strata.broker.kafka import group_image as gi
    from strata.errors import StrataError
    c = coord()
    ida = join(c, client="a").result.member_id
    c.leave("G", ida, 1)
    assert c.describe("G").state is State.EMPTY and c.take_dirty() == ["G"]
    img = c.image("G")
    assert img.members == () and img.generation_id == 2
    c2 = coord()
    c2.load("G", gi.decode(gi.encode(img)), 0)
    assert c2.describe("G").state is State.EMPTY and c2.describe("G").generation_id == 2
    with pytest.raises(StrataError, match="group 'G'"):
        gi.decode(gi.encode(img) + b"x", "G")


def test_a_replaced_leader_told_it_follows_still_follows_after_a_broker_restart():
    """The "told it does not lead" state is stored with the group's image: a broker restart
    between the replaced static leader's answer and its repeated JoinGroup (kafka-python's
    dropped answer, issue 23) still answers that join as a follower's, with no rebalance;
    the next real rebalance makes it the leader it is then told it is."""
    from strata.broker.kafka import group_image as gi
    c = coord()
    ida, idb = static_pair(c)
    r = sjoin(c, "i1", now=100).result              # the leader's instance restarts
    assert r.replaced and r.leader == ida != r.member_id and c.take_dirty() == ["G"]
    data = gi.encode(c.image("G"))                  # what the replacement stored
    assert data[0] == gi.TOLD_LEADER_VERSION
    c2 = coord()                                    # the broker restarts
    c2.load("G", gi.decode(data, "G"), now_ms=1_000)
    again = sjoin(c2, "i1", r.member_id, now=1_001)
    assert again.done and again.result.error == g.NONE
    assert again.result.generation_id == 2 and again.result.leader == ida
    assert again.result.members == ()               # not told to assign
    assert c2.rebalances == 0 and c2.describe("G").state is State.STABLE
    synced = c2.sync("G", 2, r.member_id, {}, 1_002, group_instance_id="i1")
    assert synced.result.assignment == b"p0"
    assert c2.heartbeat("G", 2, idb, 1_003) == g.NONE      # the other member never noticed
    # a rebalance tells everyone who leads: the image no longer carries a told leader
    p = sjoin(c2, "i2", idb, now=1_004, protos=[("range", b"other-topics")])
    lead = sjoin(c2, "i1", r.member_id, now=1_005)
    assert lead.result.leader == r.member_id and p.result.generation_id == 3
    c2.sync("G", 3, idb, {}, 1_006)
    c2.sync("G", 3, r.member_id, {r.member_id: b"x", idb: b"y"}, 1_007)
    assert c2.image("G").told_leader is None and gi.encode(c2.image("G"))[0] == 1


def test_image_versions_1_and_2():
    """Version 1 (no told leader) is written byte for byte as before and loads with none;
    version 2 carries the told leader; another version is refused naming the group."""
    import struct

    import pytest
    from strata.broker.kafka import group_image as gi
    from strata.errors import StrataError
    m = gi.MemberImage("m-2", "i1", "c", "/h", 10_000, 30_000, b"meta", b"asg")
    plain = gi.GroupImage(4, "consumer", "range", "m-2", (m,))
    # the version 1 layout of docs/format.md, written out by hand
    s = lambda t: struct.pack("<H", len(t)) + t.encode()      # noqa: E731
    head = s("consumer") + s("range") + s("m-2")
    member = (s("m-2") + s("i1") + s("c") + s("/h") + struct.pack("<ii", 10_000, 30_000)
              + struct.pack("<I", 4) + b"meta" + struct.pack("<I", 3) + b"asg")
    v1 = struct.pack("<BiI", 1, 4, 1) + head + member
    assert gi.encode(plain) == v1 and gi.decode(v1) == plain and plain.told_leader is None
    told = gi.GroupImage(4, "consumer", "range", "m-2", (m,), told_leader="m-1")
    v2 = struct.pack("<BiI", 2, 4, 1) + head + s("m-1") + member
    assert gi.encode(told) == v2 and gi.decode(v2) == told
    with pytest.raises(StrataError, match="group 'G'.*version 3"):
        gi.decode(b"\x03" + v1[1:], "G")


# ---------------------------------------------------------------------- initial rebalance delay


def test_members_starting_together_form_the_first_generation_together():
    """The sequence that stalled kafka-python (issue 23): instance i1 joins a new group and
    i2 24 ms later. Without the delay i1 led a generation of its own at once (assigning
    before it knew the topic's partitions, so it rejoined at once); with it, the first
    generation waits the delay, is extended once for i2, and holds both."""
    c = coord(3_000)
    a = sjoin(c, "i1", now=0)
    assert not a.done and c.describe("G").state is State.PREPARING_REBALANCE
    assert c.next_deadline() == 3_000
    b = sjoin(c, "i2", now=24)
    c.tick(2_999)
    assert not a.done and not b.done               # everyone joined, still within the delay
    c.tick(3_000)                                  # i2 came during the delay: one step more
    assert not a.done and not b.done and c.next_deadline() == 6_000
    c.tick(6_000)
    ra, rb = a.result, b.result
    assert ra.error == rb.error == g.NONE and ra.generation_id == rb.generation_id == 1
    assert ra.leader == ra.member_id and rb.leader == ra.member_id
    assert sorted(m for m, _i, _meta in ra.members) == sorted([ra.member_id, rb.member_id])
    assert rb.members == ()
    assert c.describe("G").state is State.COMPLETING_REBALANCE


def test_a_lone_first_member_waits_one_delay():
    c = coord(3_000)
    a = join(c, now=100)
    c.tick(3_099)
    assert not a.done
    c.tick(3_100)
    assert a.result.error == g.NONE and a.result.generation_id == 1


def test_the_initial_delay_ends_within_the_rebalance_timeout():
    """Members arriving all the time extend the delay by a step each time, but no further
    than the rebalance timeout after the first join."""
    c = coord(3_000)
    waiters = [join(c, now=0, rebalance=5_000)]
    waiters.append(join(c, now=100, rebalance=5_000))
    c.tick(3_000)                                  # extended by min(3000, 5000 - 3000)
    assert c.next_deadline() == 5_000
    waiters.append(join(c, now=4_000, rebalance=5_000))
    c.tick(5_000)                                  # nothing remains: complete now
    assert [w.result.error for w in waiters] == [g.NONE] * 3
    assert {w.result.generation_id for w in waiters} == {1}


def test_a_two_step_join_during_the_delay_is_waited_for():
    """A member with MEMBER_ID_REQUIRED in hand when the delay ends is waited for (not
    left to cause a second rebalance), as any known member of a rebalance is."""
    c = coord(3_000)
    a = join(c, now=0)
    first = join(c, now=10, known=True)
    assert first.result.error == g.MEMBER_ID_REQUIRED
    c.tick(3_000)
    assert not a.done
    b = join(c, first.result.member_id, now=3_500)   # the delay is over: all joined now
    assert a.result.generation_id == b.result.generation_id == 1
    assert len(a.result.members) == 2


def test_leaving_during_the_delay_and_rebalances_of_a_formed_group():
    c = coord(3_000)
    a = join(c, now=0)
    c.leave("G", a.result.member_id if a.done else next(iter(c.groups["G"].members)), 10)
    assert a.result.error == g.UNKNOWN_MEMBER_ID
    assert c.describe("G").state is State.EMPTY and c.next_deadline() is None
    # a group formed (generation > 0) rebalances without the delay when a member joins
    a = join(c, now=20)
    c.tick(3_020)
    ida = a.result.member_id
    c.sync("G", a.result.generation_id, ida, {ida: b"all"}, 3_021)
    b = join(c, now=3_030)
    a2 = join(c, ida, now=3_031)
    assert a2.result.error == b.result.error == g.NONE
