"""Topic message types: stored with the topic (config/topics.json), set by `strata topics
create --type`, listed by QueryRoute, checked on SendMessage (official client and raw
requests against `strata serve`)."""

import json
import subprocess
import sys

import pytest

import strata
from strata.errors import CorruptStoreError, InvalidInputError, TopicExistsError
from strata.store.topics import TOPICS_FILE, TopicTable, TopicType, table_checksum

from broker_support import run_client

pytestmark = pytest.mark.broker

OK, CONFLICT = 20000, 40014        # Code.OK, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
NORMAL, FIFO, DELAY, TRANSACTION = 1, 2, 3, 4


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata.cli.main", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_topic_keeps_its_type_across_reopen_and_refuses_another(tmp_path):
    with strata.open(tmp_path / "s") as store:
        assert store.create_topic("orders", 4, message_type="fifo") is True
        assert store.create_topic("plain") is True
        assert store.create_topic("later", message_type=TopicType.DELAY) is True
        store.put(strata.Message("auto", b"x"))           # an embedded put creates NORMAL
    path = tmp_path / "s" / TOPICS_FILE
    before = path.read_bytes()
    with strata.open(tmp_path / "s") as store:
        assert store.topic_type("orders") is TopicType.FIFO
        assert store.topic_type("plain") is TopicType.NORMAL
        assert store.topic_type("later") is TopicType.DELAY
        assert store.topic_type("auto") is TopicType.NORMAL
        assert store.topic_type("missing") is None
        assert store.create_topic("orders", message_type="fifo") is False   # same: no-op
        with pytest.raises(TopicExistsError, match="accepting fifo messages, not normal"):
            store.create_topic("orders", message_type="normal")
        with pytest.raises(InvalidInputError, match="normal, fifo, delay, transaction"):
            store.create_topic("new", message_type="ordered")
        assert store.topic_type("new") is None
    assert path.read_bytes() == before                    # refused: nothing written
    table = json.loads(before)["topics"]
    assert table["orders"]["type"] == "fifo" and table["later"]["type"] == "delay"
    assert "type" not in table["plain"]                   # normal topics: no field


def test_a_table_written_before_types_loads_as_normal_and_its_checksum_covers_types(tmp_path):
    with strata.open(tmp_path / "s") as store:
        store.create_topic("orders", 2)
    path = tmp_path / "s" / TOPICS_FILE
    old = {"version": 1, "topics": {"orders": {"queues": 2, "since": 0}}}
    old["crc32c"] = table_checksum(old)
    path.write_text(json.dumps(old))                      # exactly the pre-types layout
    with strata.open(tmp_path / "s") as store:
        assert store.topic_type("orders") is TopicType.NORMAL
        assert store.queue_count("orders") == 2
        assert store.create_topic("typed", 1, message_type="transaction")
    data = json.loads(path.read_bytes())
    data["topics"]["typed"]["type"] = "fifo"              # a changed type, checksum kept
    path.write_text(json.dumps(data))
    with pytest.raises(CorruptStoreError, match="checksum mismatch"):
        TopicTable(tmp_path / "s").load()        # the file alone: no directories to rebuild


def test_cli_topics_create_sets_the_type_and_topics_lists_it(tmp_path):
    d = str(tmp_path / "s")
    r = _cli("topics", "create", d, "orders", "--queues", "3", "--type", "fifo")
    assert r.returncode == 0, r.stderr
    assert "created topic orders (3 queues, fifo messages)" in r.stdout
    r = _cli("topics", "create", d, "orders", "--type", "normal")
    assert r.returncode == 1 and "accepting fifo messages, not normal" in r.stderr
    r = _cli("topics", "create", d, "other", "--type", "sideways")
    assert r.returncode == 2 and "'sideways' is not one of" in r.stderr
    r = _cli("topics", d)
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if "orders" in line)
    assert "fifo" in row and "3" in row
    assert "other" not in r.stdout


def test_routes_list_exactly_the_topics_type(broker_factory, tmp_path):
    d = tmp_path / "store"
    with strata.open(d) as store:
        for name, kind in (("n", "normal"), ("f", "fifo"), ("d", "delay"),
                           ("t", "transaction")):
            store.create_topic(name, 2, message_type=kind)
    broker = broker_factory(directory=d)
    got = run_client(tmp_path, broker.endpoint, '''
        s = stub()
        types = {}
        for name in ("n", "f", "d", "t", "unknown"):
            r = s.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name=name)),
                             metadata=meta())
            types[name] = [sorted(q.accept_message_types) for q in r.message_queues]
        a = s.QueryAssignment(svc.QueryAssignmentRequest(topic=pb.Resource(name="f"),
                              group=pb.Resource(name="g")), metadata=meta())
        out(types=types, assignment=[list(x.message_queue.accept_message_types)
                                     for x in a.assignments])
    ''')
    t = got["types"]
    assert t["n"] == [[NORMAL]] * 2 and t["f"] == [[FIFO]] * 2
    assert t["d"] == [[DELAY]] * 2 and t["t"] == [[TRANSACTION]] * 2
    assert t["unknown"] == [[NORMAL, FIFO, DELAY, TRANSACTION]] * 8   # its first send picks one
    assert got["assignment"] == [[FIFO]]


def test_a_send_of_another_type_is_refused_naming_both_and_stores_nothing(broker_factory,
                                                                          tmp_path):
    d = tmp_path / "store"
    with strata.open(d) as store:
        store.create_topic("ordered", 2, message_type="fifo")
        store.create_topic("plain", 2)
    broker = broker_factory(directory=d)
    got = run_client(tmp_path, broker.endpoint, '''
        s = stub()
        def send(topic, group=None, kind=None):
            m = pb.Message(topic=pb.Resource(name=topic), body=b"x")
            m.system_properties.message_id = "id-" + topic
            if group:
                m.system_properties.message_group = group
            m.system_properties.message_type = kind or (pb.MessageType.FIFO if group
                                                        else pb.MessageType.NORMAL)
            r = s.SendMessage(svc.SendMessageRequest(messages=[m]), metadata=meta())
            return [r.status.code, r.status.message]
        raw = {"normal_to_fifo": send("ordered"), "fifo_to_normal": send("plain", "g1"),
               "fifo_to_fifo": send("ordered", "g1"), "normal_to_normal": send("plain")}
        # the official producer checks the route's types itself
        p = producer("ordered")
        try:
            p.send(message("ordered", "no group"))
            client = "sent"
        except Exception as e:
            client = str(e)
        p.shutdown()
        out(raw=raw, client=client)
    ''')
    raw = got["raw"]
    assert raw["normal_to_fifo"][0] == CONFLICT
    assert "'ordered' accepts FIFO messages; this message is NORMAL" in raw["normal_to_fifo"][1]
    assert raw["fifo_to_normal"][0] == CONFLICT
    assert "'plain' accepts NORMAL messages; this message is FIFO" in raw["fifo_to_normal"][1]
    assert raw["fifo_to_fifo"][0] == OK and raw["normal_to_normal"][0] == OK
    assert "accept message types" in got["client"]
    broker.stop()
    with strata.open(d, readonly=True) as store:       # only the two fitting sends
        assert sum(store.max_offset("ordered", q) for q in range(2)) == 1
        assert sum(store.max_offset("plain", q) for q in range(2)) == 1


def test_an_auto_created_topic_takes_the_type_of_its_first_message(broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, '''
        p = producer("born-fifo", "born-normal")
        p.send(message("born-fifo", "first", group="g"))
        p.send(message("born-normal", "first"))
        p.shutdown()
        s = stub()
        routes = {}
        for name in ("born-fifo", "born-normal"):
            r = s.QueryRoute(svc.QueryRouteRequest(topic=pb.Resource(name=name)),
                             metadata=meta())
            routes[name] = sorted({t for q in r.message_queues for t in q.accept_message_types})
        m = pb.Message(topic=pb.Resource(name="born-fifo"), body=b"x")
        m.system_properties.message_type = pb.MessageType.NORMAL
        r = s.SendMessage(svc.SendMessageRequest(messages=[m]), metadata=meta())
        out(routes=routes, code=r.status.code)
    ''')
    assert got["routes"] == {"born-fifo": [FIFO], "born-normal": [NORMAL]}
    assert got["code"] == CONFLICT
    broker.stop()
    with strata.open(broker.directory, readonly=True) as store:
        assert store.topic_type("born-fifo") is TopicType.FIFO
        assert store.topic_type("born-normal") is TopicType.NORMAL


def test_consumer_settings_say_fifo_for_fifo_topics_only(broker_factory, tmp_path):
    d = tmp_path / "store"
    with strata.open(d) as store:
        store.create_topic("ordered", 2, message_type="fifo")
        store.create_topic("plain", 2)
    broker = broker_factory(directory=d)
    got = run_client(tmp_path, broker.endpoint, '''
        s = stub()
        fifo = {}
        for name in ("ordered", "plain"):
            st = pb.Settings(client_type=pb.ClientType.SIMPLE_CONSUMER)
            st.subscription.group.name = "g"
            st.subscription.subscriptions.add().topic.name = name
            reply = next(iter(s.Telemetry(iter([svc.TelemetryCommand(settings=st)]),
                                          metadata=meta())))
            fifo[name] = reply.settings.subscription.fifo
        out(fifo=fifo)
    ''')
    assert got["fifo"] == {"ordered": True, "plain": False}
