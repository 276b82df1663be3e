"""The RocketMQ 5 gRPC protocol on the broker core. Layers (each imports only those above
it): ``protocol`` (the official client's generated stubs), ``convert`` (protobuf <-> store
messages), ``message_types``, ``sessions`` (Telemetry streams), ``transactions`` (half
messages, checks over Telemetry), ``service`` (the RPCs), ``intercept`` (wrapping the RPC
handlers), ``authorize`` (the ACL applied to each RPC), ``metrics`` (RPC counters),
``server`` (grpc.aio server, signals, shutdown).
"""
