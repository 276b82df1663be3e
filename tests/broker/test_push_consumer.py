import pytest
from broker_support import run_client
pytestmark = pytest.mark.broker

def test_push_consumer_gets_every_message(broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, '''
        from rocketmq import PushConsumer, MessageListener, ConsumeResult
        import threading
        p = producer("pushed")
        for i in range(20):
            p.send(message("pushed", f"p{i}"))
        p.shutdown()
        seen = set()
        lock = threading.Lock()
        class L(MessageListener):
            def consume(self, m):
                with lock:
                    seen.add(m.body.decode())
                return ConsumeResult.SUCCESS
        c = PushConsumer(config(), "pg", L(), {"pushed": FilterExpression("*")})
        c.startup()
        t0 = time.time()
        while len(seen) < 20 and time.time() - t0 < 30:
            time.sleep(0.1)
        c.shutdown()
        out(seen=sorted(seen))
    ''')
    assert got["seen"] == sorted(f"p{i}" for i in range(20))


def test_push_consumer_failure_is_retried_after_the_broker_backoff(broker, tmp_path):
    got = run_client(tmp_path, broker.endpoint, '''
        from rocketmq import PushConsumer, MessageListener, ConsumeResult
        p = producer("retried")
        p.send(message("retried", "flaky"))
        p.shutdown()
        attempts = []
        class L(MessageListener):
            def consume(self, m):
                attempts.append(m.delivery_attempt)
                return ConsumeResult.FAILURE if len(attempts) == 1 else ConsumeResult.SUCCESS
        c = PushConsumer(config(), "rg", L(), {"retried": FilterExpression("*")})
        c.startup()
        t0 = time.time()
        while len(attempts) < 2 and time.time() - t0 < 30:
            time.sleep(0.1)
        time.sleep(2.5)                    # acked: no third delivery
        c.shutdown()
        out(attempts=attempts)
    ''')
    assert got["attempts"] == [1, 2]
