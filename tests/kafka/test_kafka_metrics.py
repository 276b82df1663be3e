"""--metrics counts Kafka requests per API and the messages Produce stored."""

from __future__ import annotations

import re
import urllib.request

import pytest

from kafka_support import run_client

pytestmark = pytest.mark.kafka

PRODUCE = '''
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": BOOTSTRAP})
for i in range(7):
    p.produce("metered", value=b"m", partition=0)
out(left=p.flush(120))
'''


def test_kafka_requests_and_messages_are_counted(kafka_factory):
    s = kafka_factory("--metrics", "127.0.0.1:0")
    url = re.search(r"metrics (http://[\d.:]+/metrics)", s.log)[1]
    assert run_client(PRODUCE, s.bootstrap) == dict(left=0)
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    produced = re.search(r'strata_requests_total\{code="OK",method="kafka.Produce"\} (\S+)',
                         text)
    assert produced and float(produced[1]) >= 1, text
    assert re.search(r'strata_requests_total\{code="OK",method="kafka.ApiVersions"\} ', text)
    sent = re.search(r'strata_messages_sent_total\{topic="metered"\} (\S+)', text)
    assert sent and float(sent[1]) == 7, text
