"""Kafka group membership that survives a broker restart, and static membership (KIP-345),
with confluent-kafka and kafka-python consumers each in its own process against `strata serve
--kafka` in its own process: members keep their member ids and assignments across a SIGTERM
or SIGKILL of the broker (no rebalance), a member that died while the broker was down is
expired by its session after the restart, and a static member restarted under its instance
id takes its old assignment back without the other members noticing (also after a broker
restart); an older incarnation of an instance is fenced."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clients import RAW
from kafka_support import KafkaServer, run_client
from test_kafka_group_clients import client, create_topic

pytestmark = pytest.mark.broker

SCRIPT = str(Path(__file__).with_name("member_script.py"))
# how long a member's next event may take: generous, since a member process starting (and
# kafka-python joining) under a loaded machine took longer than 30 s once; a wait ends at
# the event, so passing runs take no longer
WAIT_S = 90.0
# static members' session: a restarted instance must be back within it for no rebalance to
# be the right answer; kept well above a slow process start on a loaded machine
STATIC_SESSION_MS = 60000
# the static members' tests and the one whose member dies while the broker is down give
# their servers Kafka's default initial rebalance delay (3 s), so that kafka-python leads the
# first generation only once it knows the topic's partitions (docs/kafka.md, issue 23)
GROUP_DELAY_MS = 3000


# one condition for every member's events: a wait's predicate may look at other members'
# events too, so any member's line must wake it (with one condition per member a wait slept
# to its timeout when the line it needed came from another member)
EVENTS = threading.Condition()


class Member:
    """A member_script.py process; its JSON lines are collected by a reader thread and
    waited for with ``EVENTS`` (woken by every member's line)."""

    def __init__(self, name: str, server, topic: str, group: str, stop: Path, *,
                 instance: str | None = None, session: int = 30000, crash: bool = False,
                 log: Path | None = None):
        cmd = [sys.executable, SCRIPT, name, server.bootstrap, topic, group,
               "--stop", str(stop), "--session", str(session)]
        if instance:
            cmd += ["--instance", instance]
        if log is not None:         # the client's DEBUG log, shown when a wait fails
            cmd += ["--log", str(log)]
        self.log = log
        if crash:
            cmd.append("--crash")
        self.name = name
        self.events: list[dict] = []
        self.cond = EVENTS
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                with self.cond:
                    self.events.append(json.loads(line))
                    self.cond.notify_all()
        with self.cond:
            self.events.append({"exit": True})
            self.cond.notify_all()

    def wait_for(self, pred, seconds: float = WAIT_S) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: pred(self.events), timeout=seconds)
        if not ok:
            raise AssertionError(f"{self.name} member: waited {seconds} s in vain; events "
                                 f"{self.events[-20:]}; stderr "
                                 f"{self.proc.stderr.read()[-3000:] if self.proc.poll() is not None else ''}"
                                 f"{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        """The end of the client's own log (``log=``), for a failure's message."""
        if self.log is None or not self.log.exists():
            return ""
        with open(self.log, errors="replace") as f:
            tail = f.readlines()[-lines:]
        return f"\n--- {self.log.name} (last {len(tail)} lines)\n" + "".join(
            line[:400] for line in tail)

    def kinds(self, key: str, since: int = 0) -> list:
        with self.cond:
            return [e[key] for e in self.events[since:] if key in e]

    @property
    def mark(self) -> int:
        with self.cond:
            return len(self.events)

    def assigned(self) -> list[int]:
        """The partitions it holds (its last assigned, unless revoked since)."""
        held: list[int] = []
        for e in list(self.events):
            if "assigned" in e:
                held = e["assigned"]
            elif "revoked" in e:
                held = []
        return held

    def close(self) -> None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def holds(member: Member) -> bool:
    return bool(member.assigned()) and bool(member.kinds("member"))


def msgs(members: list[Member], since: list[int]) -> list[str]:
    return [v for m, s in zip(members, since) for v in m.kinds("msg", s)]


def restart(server: KafkaServer, directory: Path, sig: int) -> KafkaServer:
    port = server.port
    server.stop(sig)
    return KafkaServer(directory, group_delay_ms=server.group_delay_ms).start(port=port)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_members_keep_ids_and_assignments_across_a_broker_restart(tmp_path, sig):
    directory = tmp_path / "store"
    s = KafkaServer(directory).start()
    stop = tmp_path / "stop"
    members: list[Member] = []
    try:
        create_topic(s, "t", 4)
        members = [Member("confluent", s, "t", "g", stop),
                   Member("kafka-python", s, "t", "g", stop)]
        # both hold disjoint shares of the four partitions
        for m in members:
            m.wait_for(lambda ev, m=m: holds(m) and sorted(
                members[0].assigned() + members[1].assigned()) == [0, 1, 2, 3])
        ids = [m.kinds("member")[-1] for m in members]
        shares = [m.assigned() for m in members]
        client("produce", "confluent", s, "t", "40")
        since = [0, 0]
        for m in members:
            m.wait_for(lambda ev: len(msgs(members, since)) >= 40)
        s = restart(s, directory, sig)
        marks = [m.mark for m in members]
        client("produce", "kafka-python", s, "t", "40", "--start", "40")
        for m in members:
            m.wait_for(lambda ev: len(msgs(members, marks)) >= 40, WAIT_S)
        after = msgs(members, marks)
        assert sorted(after) == sorted(f"m{i}" for i in range(40, 80))      # each once
        for m, mid, share, mark in zip(members, ids, shares, marks):
            assert m.kinds("assigned", mark) == [] and m.kinds("revoked", mark) == []
            assert m.kinds("member")[-1] == mid and m.assigned() == share
        desc = client("groups", "kafka-python", s, "t", "g")
        assert desc["state"] == "Stable" and len(desc["members"]) == 2
    finally:
        stop.touch()
        for m in members:
            m.close()
        s.stop()


def test_a_member_gone_while_the_broker_was_down_expires_after_the_restart(tmp_path):
    directory = tmp_path / "store"
    s = KafkaServer(directory, group_delay_ms=GROUP_DELAY_MS).start()
    stop, gone = tmp_path / "stop", tmp_path / "gone"
    members: list[Member] = []
    try:
        create_topic(s, "t", 2)
        members = [Member("confluent", s, "t", "g", stop, session=6000),
                   Member("confluent", s, "t", "g", gone, session=6000, crash=True)]
        for m in members:
            m.wait_for(lambda ev, m=m: holds(m) and sorted(
                members[0].assigned() + members[1].assigned()) == [0, 1])
        port = s.port
        s.stop(signal.SIGKILL)
        gone.touch()                                  # dies without leaving
        members[1].wait_for(lambda ev: {"exit": True} in ev)
        s = KafkaServer(directory, group_delay_ms=GROUP_DELAY_MS).start(port=port)
        # the loaded group holds the dead member until its session (restarted at load)
        # ends; then the survivor gets both partitions
        members[0].wait_for(lambda ev: members[0].assigned() == [0, 1], 30)
    finally:
        stop.touch()
        gone.touch()
        for m in members:
            m.close()
        s.stop()


@pytest.mark.parametrize("name", ["confluent", "kafka-python"])
def test_static_member_restarts_without_a_rebalance_also_after_a_broker_restart(tmp_path,
                                                                                 name):
    directory = tmp_path / "store"
    s = KafkaServer(directory, group_delay_ms=GROUP_DELAY_MS).start()
    stop = tmp_path / "stop"
    members: list[Member] = []
    try:
        create_topic(s, "t", 4)
        # the clients' own logs, shown if a wait fails
        a = Member(name, s, "t", "g", stop, instance="inst-a", session=STATIC_SESSION_MS,
                   log=tmp_path / "inst-a.log")
        b_stop = tmp_path / "b-stop"
        b = Member(name, s, "t", "g", b_stop, instance="inst-b", crash=True,
                   session=STATIC_SESSION_MS, log=tmp_path / "inst-b-0.log")
        members = [a, b]
        try:
            for m in members:
                m.wait_for(lambda ev, m=m: holds(m) and sorted(a.assigned() + b.assigned())
                           == [0, 1, 2, 3])
        except AssertionError as exc:   # both members' events and logs, should it stall
            raise AssertionError(f"{exc}\nmember a: {a.events[-20:]}{a.log_tail()}\n"
                                 f"member b: {b.events[-20:]}{b.log_tail()}") from None
        a_id, a_share, b_share = a.kinds("member")[-1], a.assigned(), b.assigned()
        a_mark = a.mark
        for round_ in range(2):
            b_stop.touch()                            # instance b restarts
            b.wait_for(lambda ev: {"exit": True} in ev)
            b.close()
            b_stop.unlink()
            b = Member(name, s, "t", "g", b_stop, instance="inst-b", crash=True,
                       session=STATIC_SESSION_MS, log=tmp_path / f"inst-b-{round_ + 1}.log")
            members.append(b)
            b.wait_for(lambda ev: holds(b))
            assert b.assigned() == b_share            # the old incarnation's partitions
            start = 100 * round_
            client("produce", "confluent", s, "t", "20", "--start", str(start))
            want = {f"m{i}" for i in range(start, start + 20)}
            b.wait_for(lambda ev: want <= set(msgs([a, b], [a_mark, 0])))
            if round_ == 0:
                s = restart(s, directory, signal.SIGKILL)   # the static ids are stored
        # a never saw a rebalance: same id, same share, no callbacks since it first held it
        assert a.kinds("member")[-1] == a_id and a.assigned() == a_share
        assert a.kinds("assigned", a_mark) == [] and a.kinds("revoked", a_mark) == []
    finally:
        stop.touch()
        (tmp_path / "b-stop").touch()
        for m in members:
            m.close()
        s.stop()


def test_an_older_incarnation_of_a_static_member_is_fenced(tmp_path):
    s = KafkaServer(tmp_path / "store", group_delay_ms=GROUP_DELAY_MS).start()
    stop, stop2 = tmp_path / "stop", tmp_path / "stop2"
    members: list[Member] = []
    try:
        create_topic(s, "t", 2)
        old = Member("confluent", s, "t", "g", stop, instance="twin", session=10000)
        members.append(old)
        old.wait_for(lambda ev: holds(old))
        new = Member("confluent", s, "t", "g", stop2, instance="twin", session=10000)
        members.append(new)
        new.wait_for(lambda ev: holds(new))
        old.wait_for(lambda ev: any("error" in e for e in ev))
        assert "FENCED" in old.kinds("error")[-1].upper()
        assert new.kinds("member")[-1] != old.kinds("member")[-1]
    finally:
        stop.touch()
        stop2.touch()
        for m in members:
            m.close()
        s.stop()


REPLACED_LEADER = RAW + '''
raw = Raw(BOOTSTRAP)
J = REQ[11]
A = REQ[14].SyncGroupRequestAssignment

def join(member):
    return raw.call(11, 5, group_id="g", session_timeout_ms=30000, rebalance_timeout_ms=30000,
                    member_id=member, group_instance_id="i1", protocol_type="consumer",
                    protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"sub")])

def sync(gen, member, assignments):
    r = raw.call(14, 3, group_id="g", generation_id=gen, member_id=member,
                 group_instance_id="i1",
                 assignments=[A(member_id=k, assignment=v) for k, v in assignments.items()])
    return r.error_code, bytes(r.assignment).decode()

def state():
    return raw.call(15, 0, groups=["g"]).groups[0].group_state

if ARGS["step"] == 1:
    first = join("")                          # the instance's first incarnation leads
    assert first.error_code == 0 and first.leader == first.member_id, first
    s1 = sync(first.generation_id, first.member_id, {first.member_id: b"p0"})
    second = join("")                         # the instance restarts: replaced, no rebalance
    s2 = sync(second.generation_id, second.member_id, {})
    out(first=first.member_id, gen=first.generation_id, s1=list(s1),
        second=second.member_id, second_gen=second.generation_id, told=second.leader,
        second_members=len(second.members), s2=list(s2), state=state())
else:
    again = join(ARGS["second"])              # its repeated JoinGroup, after the restart
    out(error=again.error_code, gen=again.generation_id, leader=again.leader,
        members=len(again.members), state=state(), sync=list(sync(again.generation_id,
                                                                  ARGS["second"], {})))
'''


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_replaced_leader_told_it_follows_still_follows_after_a_broker_restart(tmp_path,
                                                                                sig):
    """The replaced static leader's repeated JoinGroup (kafka-python drops a join's answer
    now and then and joins again; docs/kafka.md) with a broker restart between the answer
    and the repeated join: still a follower's answer, in the same generation, no rebalance
    (the "told it does not lead" state is kept with the group's stored image)."""
    s = KafkaServer(tmp_path / "store", group_delay_ms=0).start()
    try:
        one = run_client(REPLACED_LEADER, s.bootstrap, dict(step=1))
        assert one["s1"] == [0, "p0"]
        assert one["second"] != one["first"] and one["second_gen"] == one["gen"]
        assert one["told"] == one["first"] and one["second_members"] == 0   # a follower
        assert one["s2"] == [0, "p0"] and one["state"] == "Stable"   # the old one's
        s = restart(s, tmp_path / "store", sig)
        two = run_client(REPLACED_LEADER, s.bootstrap, dict(step=2, second=one["second"]))
        assert two["error"] == 0 and two["gen"] == one["gen"]       # no new generation
        assert two["leader"] == one["first"] and two["members"] == 0
        assert two["state"] == "Stable" and two["sync"] == [0, "p0"]
    finally:
        s.stop()
