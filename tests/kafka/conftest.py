from kafka_support import kafka_factory, kafka_server  # noqa: F401
