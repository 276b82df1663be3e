"""strata.broker: what ``strata serve`` runs on a store, in two parts.

The protocol-neutral core lives directly here; each layer imports only those above it in
this list: ``errors``, ``status`` (the core's refusal codes), ``properties`` (record
properties the broker sets), ``names``, ``receipt`` (signed receipt handles), ``journal``
(the consumer-group journal's bytes), ``held_journal`` (the held-message journal's bytes),
``group_state`` (offsets, in-flight receipts, delivery attempts), ``send`` (group commit
across clients and connections, store calls off the event loop), ``held`` (messages held
back, in a ref-counted store), ``due_queue``, ``timer`` (delay messages), ``dead_letter``,
``fifo`` and ``receive`` (pops across a topic's queues), ``acl`` (accounts, request
signatures, rights), ``metrics`` (the Prometheus registry), ``tls`` (certificate and key).

Each protocol is a subpackage that builds on the core and never on another protocol:
``rocketmq`` (the RocketMQ 5 gRPC service) and ``kafka`` (the Kafka wire protocol).
"""
