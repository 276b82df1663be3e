"""The RocketMQ 5 protocol's generated stubs, taken from the official Python client.

``rocketmq-python-client`` ships them in ``rocketmq.grpc_protocol``, but importing that
package the ordinary way first runs ``rocketmq/__init__.py``, which loads the whole client
(OpenTelemetry, thread pools) and opens a log file under ``~/logs``. A broker needs only the
stubs: when the client is not imported yet, ``rocketmq`` is registered as a bare package
(its ``__path__`` only), so ``rocketmq.grpc_protocol`` loads without the client. A process
that imports strata.broker and then the client's ``Producer`` must import the client first.
"""

from __future__ import annotations

import importlib.util
import sys
import types

from strata.errors import StrataError


def _bare_package(name: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise StrataError("strata serve needs the broker extra: "
                          "pip install 'strata[broker]' (rocketmq-python-client==5.1.2)")
    module = types.ModuleType(name)
    module.__path__ = list(spec.submodule_search_locations)
    module.__spec__ = spec
    sys.modules[name] = module


_bare_package("rocketmq")

from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as svc  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc  # noqa: E402

Code = pb.Code
MessageType = pb.MessageType

__all__ = ["pb", "svc", "svc_grpc", "Code", "MessageType"]
