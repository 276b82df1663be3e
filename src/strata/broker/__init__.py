"""strata.broker: the RocketMQ 5 gRPC service that ``strata serve`` runs on a store.

Layers inside (each imports only those above it in this list): ``protocol`` (the official
client's generated stubs), ``errors``, ``names``, ``receipt`` (signed receipt handles),
``journal`` (the consumer-group journal's bytes), ``held_journal`` (the held-message
journal's bytes), ``group_state`` (offsets, in-flight receipts, delivery attempts),
``convert`` (protobuf <-> store messages), ``sessions`` (Telemetry streams), ``send`` (group
commit across clients), ``held`` (messages held back, in a ref-counted store), ``timer``
(delay messages), ``transactions`` (half messages, checks), ``receive`` (pops across a
topic's queues), ``service`` (the RPCs), ``acl`` (plain_acl.yml accounts, request
signatures, rights), ``intercept`` (wrapping the RPC handlers), ``authorize`` (the ACL
applied to each RPC), ``metrics`` (Prometheus), ``tls`` (certificate and key), ``server``
(grpc.aio server, signals, shutdown).
"""
