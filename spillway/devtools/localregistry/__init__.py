"""Local schema registry (Apicurio Registry from Maven Central, in memory; no Docker).

::

    from spillway.devtools.localregistry import LocalRegistry

    registry = LocalRegistry(port=8085)
    registry.start()      # builds it once with Maven, waits until its API answers
    registry.url          # "http://127.0.0.1:8085/apis/ccompat/v7"
    registry.stop()       # SIGTERM to the recorded PID, SIGKILL after a bounded wait

Needs Java 17+ and, on the first start only, Maven. Linux only (the PID check reads
``/proc``).
"""

from spillway.devtools.localregistry.build import build_registry
from spillway.devtools.localregistry.registry import LocalRegistry, StopResult

__all__ = ["LocalRegistry", "StopResult", "build_registry"]
