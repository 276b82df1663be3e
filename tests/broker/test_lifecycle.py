"""Start line, graceful SIGTERM, exit with the parent, group commit across clients."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker_support import PRELUDE, SMALL_STORE, Broker, run_client

pytestmark = pytest.mark.broker


class TracedBroker(Broker):
    """Says on stderr when a receive starts to wait (tests/broker/traced_serve.py)."""
    command = (sys.executable, str(Path(__file__).with_name("traced_serve.py")))

    def wait_for_line(self, text: str, timeout: float = 120) -> None:
        """Read the server's stderr (kept in ``lines``) until a line holds ``text``; the
        bound is generous and decides nothing but a hang."""
        found = threading.Event()

        def read() -> None:
            for line in self.proc.stderr:
                self.lines.append(line)
                if text in line:
                    found.set()
                    return
        threading.Thread(target=read, daemon=True).start()
        assert found.wait(timeout), f"no {text!r} from the server: {self.log[-3000:]}"


def test_sigterm_answers_a_waiting_long_poll_and_closes_the_store_cleanly(tmp_path):
    from traced_serve import WAITING
    b = TracedBroker(tmp_path / "store").start()
    home = tmp_path / "h"
    home.mkdir()
    poller = subprocess.Popen([sys.executable, "-c", PRELUDE + '''
c = consumer("g", "quiet", await_s=20)
print("POLLING", flush=True)
t0 = time.time()
try:
    got = c.receive(1, 10)
    print("RESULT " + json.dumps({"n": len(got), "s": time.time() - t0}), flush=True)
except Exception as exc:
    print("RESULT " + json.dumps({"error": str(exc)}), flush=True)
''', b.endpoint], env=dict(os.environ, HOME=str(home)), stdout=subprocess.PIPE, text=True)
    try:
        assert poller.stdout.readline().strip() == "POLLING"
        b.wait_for_line(WAITING)                  # the receive is waiting at the broker
        assert b.stop(signal.SIGTERM) == 0
        out, _ = poller.communicate(timeout=30)
    finally:
        poller.kill()
        b.stop(signal.SIGKILL)                    # (a no-op once it has stopped)
    result = out.strip().splitlines()[-1]
    assert result.startswith("RESULT ") and '"n": 0' in result    # answered, not cut off
    assert b.log.count("listening on") == 1
    assert "stopped cleanly" in b.log
    assert not (b.directory / "abort").exists()      # the store was closed cleanly


def test_server_exits_when_its_parent_dies(tmp_path):
    opts = " ".join(f"--store-option {o}" for o in SMALL_STORE)
    parent = subprocess.Popen(
        ["sh", "-c", f"{sys.executable} -m strata.cli.main serve {tmp_path / 's'} --listen "
                     f"127.0.0.1:0 --exit-with-parent {opts} & echo $!; wait"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert "listening on" in parent.stderr.readline()
    parent.kill()                                    # the shell dies; the server is orphaned
    parent.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as f:       # a zombie has exited already
            if f.read().split(") ")[1].startswith("Z"):
                break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("strata serve kept running after its parent died")
    assert not (tmp_path / "s" / "abort").exists()   # it stopped cleanly


def test_sync_flush_group_commits_concurrent_sends(broker_factory, tmp_path):
    b = broker_factory("--flush", "sync")
    got = run_client(tmp_path, b.endpoint, '''
        p = producer("gc")
        futures = [p.send_async(message("gc", f"m{i}")) for i in range(400)]
        ids = [f.result(timeout=60).message_id for f in futures]
        p.shutdown()
        out(n=len(set(ids)))
    ''')
    assert got["n"] == 400
    assert b.stop() == 0
    m = re.search(r"([\d,]+) messages? stored in ([\d,]+) batch(?:es)?", b.log)
    messages, batches = (int(g.replace(",", "")) for g in m.groups())
    assert messages == 400
    assert batches < messages / 2          # concurrent sends shared put_batch calls (fsyncs)
