"""The gRPC listener of ``strata serve --listen``: a grpc.aio server running the RocketMQ 5
``MessagingService`` on the process's store. ``strata.broker.process`` opens the store and
the core's state, then binds, starts and stops the listeners; stopping lets in-flight calls
finish and pending sends be stored."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from strata.broker.rocketmq.intercept import layered
from strata.broker.rocketmq.protocol import svc_grpc
from strata.broker.rocketmq.service import BrokerOptions, MessagingService
from strata.words import count

if TYPE_CHECKING:
    from strata.broker.process import Node, ServeConfig

STOP_GRACE_S = 5.0


class GrpcListener:
    """The RocketMQ 5 gRPC service on one address."""

    name = "grpc"

    def __init__(self, cfg: "ServeConfig", node: "Node") -> None:
        self.cfg = cfg
        self.node = node
        store = node.store
        limit = store.config.max_body_size + (1 << 20)
        # grpc enables SO_REUSEPORT by default: a second server on a port in use would share
        # its connections (and split the clients' sends between two stores). Off.
        self.server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                               ("grpc.max_send_message_length", limit),
                                               ("grpc.so_reuseport", 0)])
        self.service = MessagingService(
            store, node.groups, node.signer, (cfg.host, cfg.port),
            BrokerOptions(auto_create=cfg.auto_create,
                          max_delivery_attempts=cfg.max_delivery_attempts,
                          transaction_check_interval_ms=int(
                              cfg.transaction_check_interval_s * 1000),
                          transaction_max_checks=cfg.transaction_max_checks,
                          gather_s=cfg.gather_ms / 1000,
                          renew_slice_ms=int(cfg.renew_slice_s * 1000),
                          renew_max_ms=int(cfg.renew_max_s * 1000)),
            node.held, node.batcher, node.worker)
        layers = []      # outermost first: metrics count what the ACL refuses too
        if node.metrics is not None:
            from strata.broker.rocketmq.metrics import RpcMetrics
            layers.append(RpcMetrics(node.metrics))
        if node.acl is not None:
            from strata.broker.rocketmq.authorize import AclLayer
            layers.append(AclLayer(node.acl))
        svc_grpc.add_MessagingServiceServicer_to_server(layered(self.service, layers),
                                                        self.server)
        self.port = cfg.port

    def bind(self) -> int:
        """Bind the address; returns the port. OSError naming the address if it is taken."""
        cfg = self.cfg
        address = f"[{cfg.host}]:{cfg.port}" if ":" in cfg.host else f"{cfg.host}:{cfg.port}"
        try:
            if self.node.tls_pems is not None:
                cert_pem, key_pem = self.node.tls_pems
                creds = grpc.ssl_server_credentials([(key_pem, cert_pem)])
                self.port = self.server.add_secure_port(address, creds)
            else:
                self.port = self.server.add_insecure_port(address)
        except (RuntimeError, OSError) as exc:
            raise OSError(f"cannot listen on {address} (--listen): {exc} (is another server "
                          f"using it?)") from None
        if not self.port or (cfg.port and self.port != cfg.port):
            raise OSError(f"cannot listen on {address} (--listen): the address is in use "
                          f"(bound port {self.port} instead)")
        self.service.endpoint = (cfg.host, self.port)
        return self.port

    async def start(self) -> None:
        self.service.start()
        await self.server.start()

    def begin_stop(self) -> None:
        """No new long polls; wake those waiting."""
        self.service.stopping = True
        self.service.wake_polls()

    async def stop(self) -> None:
        await self.server.stop(STOP_GRACE_S)
        await self.service.close()

    def summary(self) -> str:
        service = self.service
        return (f"{count(service.timer.moved, 'delay message')} moved "
                f"in {count(service.timer.batches, 'batch')}; transactions: "
                f"{service.transactions.committed} committed, "
                f"{service.transactions.rolled_back} rolled back, "
                f"{service.transactions.dropped} dropped, "
                f"{service.transactions.checks_sent} checks sent; "
                f"{service.renewed} invisible times renewed, {service.released} messages of "
                f"gone push consumers released")
