"""A long-lived group member in its own process for the membership tests (restarts, static
members): confluent-kafka or kafka-python, unchanged, against ``strata serve --kafka``.

    member_script.py CLIENT BOOTSTRAP TOPIC GROUP --stop FILE [--instance ID]
                     [--session MS] [--crash] [--log FILE]

Prints JSON lines: {"member": id} once it holds an assignment (again if the id changes),
{"assigned": [...]}, {"revoked": [...]}, {"msg": value, "p": partition}, and {"error": ...}
(then exits 3). When the --stop FILE exists it closes the consumer and prints
{"closed": true}; with ``--crash`` it exits at once instead, without closing or leaving (a
killed consumer). ``--log FILE``: the client library's own DEBUG log (kafka-python's logging,
librdkafka's ``debug=cgrp``) into FILE, for a test to show when a member stalls; SIGUSR1
dumps every thread's stack to stderr (faulthandler).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys


def say(**kw) -> None:
    print(json.dumps(kw), flush=True)


def confluent(a) -> None:
    from confluent_kafka import Consumer, KafkaException
    errors: list[str] = []
    conf = {"bootstrap.servers": a.bootstrap, "broker.address.family": "v4",
            "group.id": a.group, "auto.offset.reset": "earliest",
            "enable.auto.commit": True, "auto.commit.interval.ms": 200,
            "session.timeout.ms": a.session, "heartbeat.interval.ms": 500,
            "reconnect.backoff.max.ms": 500,
            "error_cb": lambda err: errors.append(f"{err.code()}: {err}")}
    if a.instance:
        conf["group.instance.id"] = a.instance
    if a.log:
        conf["debug"] = "cgrp"
        conf["logger"] = logging.getLogger("librdkafka")
    c = Consumer(conf)
    c.subscribe([a.topic],
                on_assign=lambda _c, ps: say(assigned=sorted(p.partition for p in ps)),
                on_revoke=lambda _c, ps: say(revoked=sorted(p.partition for p in ps)))
    member = None
    while not os.path.exists(a.stop):
        m = c.poll(0.1)
        fatal = [e for e in errors if "FATAL" in e.upper() or "FENCED" in e.upper()]
        if fatal:
            raise KafkaException(fatal[0])
        mid = c.memberid()
        if mid and mid != member and c.assignment():
            member = mid
            say(member=mid)
        if m is None:
            continue
        if m.error():
            if m.error().fatal() or "FENCED" in str(m.error()).upper():
                raise KafkaException(m.error())
            continue
        say(msg=m.value().decode(), p=m.partition())
    if a.crash:
        os._exit(0)
    c.close()
    say(closed=True)


def kafka_python(a) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned):
            say(assigned=sorted(tp.partition for tp in assigned))

        def on_partitions_revoked(self, revoked):
            say(revoked=sorted(tp.partition for tp in revoked))

    kw = dict(bootstrap_servers=a.bootstrap, group_id=a.group, auto_offset_reset="earliest",
              enable_auto_commit=True, auto_commit_interval_ms=200,
              session_timeout_ms=a.session, heartbeat_interval_ms=500,
              reconnect_backoff_max_ms=500)
    if a.instance:
        kw["group_instance_id"] = a.instance
    c = KafkaConsumer(**kw)
    c.subscribe([a.topic], listener=Listener())
    member = None
    while not os.path.exists(a.stop):
        for tp, msgs in c.poll(timeout_ms=100).items():
            for m in msgs:
                say(msg=m.value.decode(), p=tp.partition)
        gen = c._coordinator.generation_if_stable() if hasattr(
            c._coordinator, "generation_if_stable") else None
        mid = getattr(gen, "member_id", None) if gen else None
        if mid and mid != member and c.assignment():
            member = mid
            say(member=mid)
    if a.crash:
        os._exit(0)
    c.close()
    say(closed=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("client", choices=["confluent", "kafka-python"])
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("group")
    ap.add_argument("--stop", required=True)
    ap.add_argument("--instance")
    ap.add_argument("--session", type=int, default=30000)
    ap.add_argument("--crash", action="store_true")
    ap.add_argument("--log")
    a = ap.parse_args()
    faulthandler.register(signal.SIGUSR1)
    if a.log:
        logging.basicConfig(filename=a.log, level=logging.DEBUG,
                            format="%(asctime)s %(threadName)s %(name)s %(message)s")
        for h in logging.getLogger().handlers:      # kafka-python says this at every poll
            h.addFilter(lambda r: not str(r.msg).startswith("need_rejoin"))
    try:
        (confluent if a.client == "confluent" else kafka_python)(a)
    except Exception as exc:        # noqa: BLE001 - the test reads what went wrong
        say(error=f"{type(exc).__name__}: {exc}")
        sys.stdout.flush()
        os._exit(3)


if __name__ == "__main__":
    main()
