"""Local single-node KRaft broker from Apache Kafka's jars (no Docker needed).

::

    from spillway.devtools.localbroker import BrokerConfig, LocalBroker

    broker = LocalBroker(BrokerConfig.resolve(port=9094, controller_port=9095))
    broker.start()          # resolves jars once, formats storage once, waits until ready
    broker.bootstrap        # "127.0.0.1:9094"
    broker.stop()           # SIGTERM to the recorded PID, SIGKILL after a bounded wait

Needs Java 17+ and, on the first start only, Maven (see :mod:`.jars`). Linux only:
the PID check reads ``/proc``.
"""

from spillway.devtools.localbroker.broker import BrokerStatus, LocalBroker, StartResult, StopResult
from spillway.devtools.localbroker.config import BrokerConfig, SaslListener
from spillway.devtools.localbroker.jars import cache_dir, resolve_jars
from spillway.devtools.localbroker.process import free_ports

__all__ = [
    "BrokerConfig",
    "BrokerStatus",
    "LocalBroker",
    "SaslListener",
    "StartResult",
    "StopResult",
    "cache_dir",
    "free_ports",
    "resolve_jars",
]
