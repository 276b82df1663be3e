"""The Kafka wire protocol on the broker core (issue 23; docs/kafka.md). ``api`` (handler
registry, request context), ``errors`` (Kafka error codes), ``server`` (the asyncio
listener), handler modules per API family, ``record_batch`` (v2 batches <-> columns)."""
