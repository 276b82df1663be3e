"""Consumer-group state and sends survive a clean restart and a SIGKILL of the broker."""

import os
import signal
import subprocess
import sys
import time

import pytest

from broker_support import PRELUDE, run_client

pytestmark = pytest.mark.broker

CONSUME_ALL = '''
    expect = set(json.loads(sys.argv[2]))
    c = consumer("g", "dur", await_s=1)
    seen = []
    empty = 0
    t0 = time.time()
    # until every expected message came and a poll found nothing more (or 60 s)
    while (not expect <= set(seen) or empty < 1) and time.time() - t0 < 60:
        ms = c.receive(32, 30)
        empty = 0 if ms else empty + 1
        for m in ms:
            seen.append(m.body.decode())
            c.ack(m)
    c.shutdown()
    out(seen=seen)
'''


def test_clean_restart_keeps_acks_and_in_flight_deliveries(broker_factory, tmp_path):
    b = broker_factory()
    got = run_client(tmp_path, b.endpoint, '''
        p = producer("dur")
        for i in range(10):
            p.send(message("dur", f"m{i}"))
        p.shutdown()
        c = consumer("g", "dur", await_s=1)
        acked, held = [], []
        while len(acked) + len(held) < 7:
            for m in c.receive(1, 3):
                if len(acked) < 4:
                    c.ack(m)
                    acked.append(m.body.decode())
                else:
                    held.append(m.body.decode())       # in flight, never acked
        c.shutdown()
        out(acked=acked, held=held)
    ''')
    assert b.stop() == 0 and "stopped cleanly" in b.log
    b2 = broker_factory()
    expected = set(f"m{i}" for i in range(10)) - set(got["acked"])
    after = run_client(tmp_path, b2.endpoint, CONSUME_ALL, args=sorted(expected))["seen"]
    assert sorted(after) == sorted(expected)
    assert set(got["held"]) <= set(after)


def test_sigkill_between_acknowledged_sends_loses_nothing_and_redelivers_no_ack(
        broker_factory, tmp_path):
    b = broker_factory()
    # acked before the crash: these must never come back
    before = run_client(tmp_path, b.endpoint, '''
        p = producer("dur")
        for i in range(6):
            p.send(message("dur", f"early{i}"))
        c = consumer("g", "dur", await_s=1)
        acked = []
        while len(acked) < 3:
            for m in c.receive(1, 60):
                c.ack(m)
                acked.append(m.body.decode())
        c.shutdown()
        p.shutdown()
        out(acked=acked)
    ''')["acked"]
    # a producer that keeps sending; every acknowledged send is written down at once
    acked_file = tmp_path / "acked.txt"
    home = tmp_path / "producer-home"
    home.mkdir()
    sender = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + f'''
p = producer("dur")
with open({str(acked_file)!r}, "a") as f:
    i = 0
    while True:
        try:
            p.send(message("dur", f"late{{i}}"))
        except Exception:
            break
        f.write(f"late{{i}}\\n")
        f.flush()
        i += 1
''', b.endpoint], env=dict(os.environ, HOME=str(home)), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if acked_file.exists() and len(acked_file.read_text().split()) >= 30:
                break
            time.sleep(0.05)
        b.stop(signal.SIGKILL)
        sender.wait(timeout=60)
    finally:
        sender.kill()
    sent = acked_file.read_text().split()
    assert len(sent) >= 30
    b2 = broker_factory()
    expected = set(f"early{i}" for i in range(6)) - set(before)
    seen = run_client(tmp_path, b2.endpoint, CONSUME_ALL,
                      args=sorted(expected | set(sent)))["seen"]
    assert not set(before) & set(seen)                      # acked: never redelivered
    assert expected <= set(seen)                            # unacked: not lost
    assert set(sent) <= set(seen)                           # every acknowledged send served
