"""The Spark Structured Streaming Kafka connector for B1, resolved with Maven.

``spark.jars.packages`` would resolve it with Ivy, which cannot reach Maven Central from
this machine (Maven can) and would ask for the connector of pyspark's own version, which
Central does not have (see ``spark-kafka-pom.xml``). So Maven resolves the pom into the
cache once, and Spark gets the jars that pyspark does not already ship (``spark.jars``):
two copies of a library on the class path would be a gamble on which one loads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from bench.kafkatools import resolve_pom

POM = Path(__file__).resolve().parent / "spark-kafka-pom.xml"
CONNECTOR = "4.2.0"

_VERSION = re.compile(r"-\d[\w.]*(-[A-Za-z][\w.]*)?\.jar$")


def artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` → ``kafka-clients`` (the name without version)."""
    return _VERSION.sub("", jar)


def missing(jars: Iterable[str], present: Iterable[str]) -> list[str]:
    """The jars in ``jars`` whose artifact is not among ``present`` (sorted). Pure."""
    have = {artifact(j) for j in present}
    return sorted(j for j in jars if artifact(j) not in have)


def connector_jars() -> list[Path]:
    """Jars to add to pyspark's class path for ``format("kafka")``."""
    import pyspark

    lib = resolve_pom(POM, f"spark-kafka-{CONNECTOR}", f"spark-sql-kafka-0-10_2.13-{CONNECTOR}.jar")
    shipped = Path(pyspark.__file__).resolve().parent / "jars"
    names = missing((p.name for p in lib.glob("*.jar")), (p.name for p in shipped.glob("*.jar")))
    return [lib / n for n in names]
