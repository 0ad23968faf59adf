"""Dev tooling, apart from the runtime: a local Kafka broker (:mod:`spillway.devtools.localbroker`),
a local Spark standalone cluster (:mod:`spillway.devtools.cluster`) and the demo
(:mod:`spillway.devtools.demo`), as local processes on 127.0.0.1 without Docker.

They ship in the wheel because the ``spillway broker``, ``spillway cluster`` and
``spillway demo`` commands are them; the runtime layers (channels → offsets → recovery →
spark_jobs) never import this package, only the command line (``spillway.cli``) does.
"""
