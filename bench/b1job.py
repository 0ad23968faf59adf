"""B1's pipeline for ``spillway run`` (what a user submits), set with ``--conf``.

``spillway run bench.b1job:pipeline --job-id ID --conf input=TOPIC --conf output=TOPIC
[--conf chaining=true]`` runs :func:`bench.peers.spillway_pipeline` on Spark (local mode
unless ``--master``), with the bounded Kafka source: the job ends once it has processed
the input topic up to the end it had when the job started.
"""

from __future__ import annotations

from bench.peers import spillway_pipeline
from spillway.channels.errors import ConfigError
from spillway.spark_jobs.api.pipeline import Pipeline, conf


def pipeline() -> Pipeline:
    """The B1 pipeline over ``--conf input`` into ``--conf output``."""
    chaining = conf("chaining", "false")
    if chaining not in ("true", "false"):
        raise ConfigError(f"--conf chaining must be true or false, got {chaining!r}")
    p: Pipeline = spillway_pipeline(conf("input"), conf("output"), chaining=chaining == "true")
    return p
