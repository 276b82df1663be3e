"""A Kafka client in its own process for the group tests: confluent-kafka, kafka-python or
aiokafka, unchanged, against ``strata serve --kafka``. Prints JSON lines on stdout.

    produce CLIENT BOOTSTRAP TOPIC N [--start S]            values "m<i>", keys "k<i>"
    consume CLIENT BOOTSTRAP TOPIC GROUP N                  subscribe, read N, commit, close
    member  CLIENT BOOTSTRAP TOPIC GROUP --stop FILE        stay in the group until FILE exists
    committed CLIENT BOOTSTRAP TOPIC GROUP PARTITIONS       the group's committed offsets
    create  kafka-python BOOTSTRAP TOPIC PARTITIONS         admin create_topics
    groups  kafka-python BOOTSTRAP TOPIC GROUP              admin list + describe groups

``--sasl MECHANISM USER PASSWORD`` authenticates (SASL_PLAINTEXT). Errors are printed as
{"error": "..."} and exit with status 3.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time

DEADLINE_S = 60
CLIENT_ERRORS: list[str] = []     # what the client library reported on the side (auth)


def say(**kw) -> None:
    print(json.dumps(kw), flush=True)


class _Keep(logging.Handler):
    """kafka-python logs a refused SASL authentication and then retries until its
    bootstrap timeout; keep the reason for the error line."""

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "Authentication" in text or "Sasl" in text or "authorized" in text:
            CLIENT_ERRORS.append(text)


logging.getLogger("kafka").addHandler(_Keep(logging.WARNING))


def check_side_errors() -> None:
    """confluent-kafka: a refused authentication arrives through error_cb; stop at once."""
    for e in CLIENT_ERRORS:
        if "_AUTHENTICATION" in e:
            raise RuntimeError(e)


# ---------------------------------------------------------------------- confluent-kafka


def ck_conf(a) -> dict:
    conf = {"bootstrap.servers": a.bootstrap, "broker.address.family": "v4",
            "error_cb": lambda err: CLIENT_ERRORS.append(str(err))}
    if a.sasl:
        conf.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": a.sasl[0],
                     "sasl.username": a.sasl[1], "sasl.password": a.sasl[2]})
    return conf


def ck_produce(a) -> None:
    from confluent_kafka import KafkaException, Producer
    errors = []
    p = Producer({**ck_conf(a), "acks": "all", "message.timeout.ms": DEADLINE_S * 1000})
    for i in range(a.start, a.start + a.n):
        p.produce(a.topic, value=f"m{i}".encode(), key=f"k{i}".encode(),
                  on_delivery=lambda err, msg: err and errors.append(str(err)))
    end = time.time() + DEADLINE_S
    while (left := p.flush(0.2)) and time.time() < end:
        check_side_errors()
    if errors or left:
        raise KafkaException(errors[0] if errors else f"{left} messages not delivered")
    say(produced=a.n)


def ck_consumer(a, **extra):
    from confluent_kafka import Consumer
    return Consumer({**ck_conf(a), "group.id": a.group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 10000, **extra})


def ck_consume(a) -> None:
    from confluent_kafka import KafkaException
    c = ck_consumer(a)
    c.subscribe([a.topic])
    got, end = [], time.time() + DEADLINE_S
    while len(got) < a.n and time.time() < end:
        m = c.poll(0.5)
        check_side_errors()
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        got.append((m.partition(), m.offset(), m.value().decode()))
    c.commit(asynchronous=False)
    parts = sorted({p for p, _o, _v in got})
    from confluent_kafka import TopicPartition
    committed = {tp.partition: tp.offset for tp in
                 c.committed([TopicPartition(a.topic, p) for p in parts], timeout=10)}
    c.close()
    say(got=[v for _p, _o, v in got], committed=committed)


def ck_member(a) -> None:
    from confluent_kafka import KafkaException
    c = ck_consumer(a, **{"enable.auto.commit": True, "auto.commit.interval.ms": 200})
    c.subscribe([a.topic], on_assign=lambda _c, ps: say(assigned=sorted(p.partition for p in ps)),
                on_revoke=lambda _c, ps: say(revoked=sorted(p.partition for p in ps)))
    while not os.path.exists(a.stop):
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        say(msg=m.value().decode(), p=m.partition())
    c.close()
    say(closed=True)


def ck_committed(a) -> None:
    from confluent_kafka import TopicPartition
    c = ck_consumer(a)
    tps = c.committed([TopicPartition(a.topic, p) for p in range(a.n)], timeout=10)
    say(committed={tp.partition: tp.offset for tp in tps})
    c.close()


# ---------------------------------------------------------------------- kafka-python


def kp_conf(a) -> dict:
    conf = {"bootstrap_servers": a.bootstrap}
    if a.sasl:
        conf.update({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": a.sasl[0],
                     "sasl_plain_username": a.sasl[1], "sasl_plain_password": a.sasl[2],
                     "bootstrap_timeout_ms": 8000})
    return conf


def kp_produce(a) -> None:
    from kafka import KafkaProducer
    p = KafkaProducer(**kp_conf(a))
    futs = [p.send(a.topic, value=f"m{i}".encode(), key=f"k{i}".encode())
            for i in range(a.start, a.start + a.n)]
    for f in futs:
        f.get(timeout=DEADLINE_S)
    p.close()
    say(produced=a.n)


def kp_consumer(a, **extra):
    from kafka import KafkaConsumer
    conf = {**kp_conf(a), "group_id": a.group, "auto_offset_reset": "earliest",
            "enable_auto_commit": False, **extra}
    return KafkaConsumer(**conf)


def kp_consume(a) -> None:
    from kafka import TopicPartition
    c = kp_consumer(a)
    c.subscribe([a.topic])
    got, end = [], time.time() + DEADLINE_S
    while len(got) < a.n and time.time() < end:
        for tp, msgs in c.poll(timeout_ms=500).items():
            got += [(tp.partition, m.offset, m.value.decode()) for m in msgs]
    c.commit()
    parts = sorted({p for p, _o, _v in got})
    committed = {p: c.committed(TopicPartition(a.topic, p)) for p in parts}
    c.close()
    say(got=[v for _p, _o, v in got], committed=committed, logged=CLIENT_ERRORS)


def kp_member(a) -> None:
    from kafka import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned):
            say(assigned=sorted(tp.partition for tp in assigned))

        def on_partitions_revoked(self, revoked):
            say(revoked=sorted(tp.partition for tp in revoked))

    c = kp_consumer(a, enable_auto_commit=True, auto_commit_interval_ms=200)
    c.subscribe([a.topic], listener=Listener())
    while not os.path.exists(a.stop):
        for tp, msgs in c.poll(timeout_ms=200).items():
            for m in msgs:
                say(msg=m.value.decode(), p=tp.partition)
    c.close()
    say(closed=True)


def kp_create(a) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(**kp_conf(a))
    try:
        admin.create_topics([NewTopic(a.topic, a.n, 1)])
    finally:
        admin.close()
    say(created=a.topic)


def kp_groups(a) -> None:
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(**kp_conf(a))
    try:
        listed = admin.list_groups()
        desc = admin.describe_groups([a.group])[a.group]
    finally:
        admin.close()
    say(listed=sorted(g["group_id"] for g in listed), state=desc["group_state"],
        protocol=desc["protocol_data"], members=sorted(m["client_id"] for m in desc["members"]))


def kp_committed(a) -> None:
    from kafka import TopicPartition
    c = kp_consumer(a)
    say(committed={p: c.committed(TopicPartition(a.topic, p)) for p in range(a.n)})
    c.close()


# ---------------------------------------------------------------------- aiokafka


def ak_conf(a) -> dict:
    conf = {"bootstrap_servers": a.bootstrap}
    if a.sasl:
        conf.update({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": a.sasl[0],
                     "sasl_plain_username": a.sasl[1], "sasl_plain_password": a.sasl[2]})
    return conf


async def ak_produce(a) -> None:
    from aiokafka import AIOKafkaProducer
    p = AIOKafkaProducer(**ak_conf(a), acks="all")
    await p.start()
    try:
        futs = [await p.send(a.topic, value=f"m{i}".encode(), key=f"k{i}".encode())
                for i in range(a.start, a.start + a.n)]
        await asyncio.gather(*futs)
    finally:
        await p.stop()
    say(produced=a.n)


async def ak_consume(a) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    c = AIOKafkaConsumer(a.topic, **ak_conf(a), group_id=a.group,
                         auto_offset_reset="earliest", enable_auto_commit=False)
    await c.start()
    try:
        got, end = [], time.time() + DEADLINE_S
        while len(got) < a.n and time.time() < end:
            for tp, msgs in (await c.getmany(timeout_ms=500)).items():
                got += [(tp.partition, m.offset, m.value.decode()) for m in msgs]
        await c.commit()
        parts = sorted({p for p, _o, _v in got})
        committed = {p: await c.committed(TopicPartition(a.topic, p)) for p in parts}
    finally:
        await c.stop()
    say(got=[v for _p, _o, v in got], committed=committed)


async def ak_committed(a) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    c = AIOKafkaConsumer(**ak_conf(a), group_id=a.group, enable_auto_commit=False)
    await c.start()
    try:
        say(committed={p: await c.committed(TopicPartition(a.topic, p)) for p in range(a.n)})
    finally:
        await c.stop()


# ---------------------------------------------------------------------- main

RUN = {
    ("confluent", "produce"): ck_produce, ("confluent", "consume"): ck_consume,
    ("confluent", "member"): ck_member, ("confluent", "committed"): ck_committed,
    ("kafka-python", "produce"): kp_produce, ("kafka-python", "consume"): kp_consume,
    ("kafka-python", "member"): kp_member, ("kafka-python", "committed"): kp_committed,
    ("kafka-python", "create"): kp_create,
    ("kafka-python", "groups"): kp_groups,
    ("aiokafka", "produce"): ak_produce, ("aiokafka", "consume"): ak_consume,
    ("aiokafka", "committed"): ak_committed,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("client")
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("rest", nargs="*")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--stop")
    ap.add_argument("--sasl", nargs=3)
    ap.add_argument("--deadline", type=float, default=60.0, help="seconds to wait")
    a = ap.parse_args()
    global DEADLINE_S
    DEADLINE_S = a.deadline
    plain = a.mode in ("produce", "create")
    a.group = a.rest[0] if not plain and a.rest else None
    nums = a.rest if plain else a.rest[1:]
    a.n = int(nums[0]) if nums else 0
    fn = RUN[(a.client, a.mode)]
    try:
        out = fn(a)
        if asyncio.iscoroutine(out):
            asyncio.run(out)
    except Exception as exc:        # noqa: BLE001 - the test reads what went wrong
        side = f" ({CLIENT_ERRORS[-1]})" if CLIENT_ERRORS else ""
        say(error=f"{type(exc).__name__}: {exc}{side}")
        sys.exit(3)


if __name__ == "__main__":
    main()
