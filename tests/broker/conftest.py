from broker_support import broker, broker_factory  # noqa: F401
