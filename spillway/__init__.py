"""``import spillway``: the pipeline API in one place.

A front door over the layered packages (channels → offsets → recovery → spark_jobs),
which stay where they are; everything here is re-exported from them::

    import spillway

    p = spillway.Pipeline("clicks")
    clicks = p.generate(
        "clicks", count=1_000, make=make_click, parallelism=2, timestamp_column="ts"
    )
    clicks.map("enrich", enrich).write_jsonl("out", "/tmp/out")
    per_minute = clicks.key_by("page").window("per-minute", spillway.Tumbling(60_000))
    per_minute.agg(views=spillway.count(), cents=spillway.sum("cents")).print()

Windows are values (:class:`Tumbling`, :class:`Hopping`, :class:`Session`,
:class:`Count`), aggregations too (:func:`count`, ``sum``, ``min``, ``max``,
:func:`mean`: attributes of this module, but left out of ``__all__`` where they would
shadow builtins). Event time is declared once, at the source.

Errors all derive from :class:`SpillwayError`. The ``spillway`` command is
:func:`spillway.cli.main`.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from spillway.channels.errors import (
    ConfigError,
    JobAbortedError,
    PipelineDefinitionError,
    RecordError,
    SchemaMismatchError,
    SpillwayError,
)
from spillway.spark_jobs.api.coprocess import ConnectedKeyedStreams, ConnectedStreams
from spillway.spark_jobs.api.pipeline import KeyedStream, Pipeline, Stream, conf, connect, union
from spillway.spark_jobs.api.streams import WindowedStream
from spillway.spark_jobs.api.windowspec import Count, Hopping, Session, Tumbling
from spillway.spark_jobs.connectors.deltasink import DeltaTableSink
from spillway.spark_jobs.connectors.parquetsink import ParquetFileSink
from spillway.spark_jobs.connectors.registry import RegistryConfig
from spillway.spark_jobs.connectors.sinks import ConsoleSink, JsonlFileSink, KafkaTopicSink
from spillway.spark_jobs.connectors.sources import FileSource, GeneratorSource, KafkaTopicSource
from spillway.spark_jobs.records.aggregations import Agg, count, mean
from spillway.spark_jobs.records.aggregations import max as max  # not in __all__: see there
from spillway.spark_jobs.records.aggregations import min as min
from spillway.spark_jobs.records.aggregations import sum as sum
from spillway.spark_jobs.records.schemas import avro_schema
from spillway.spark_jobs.records.watermarks import Watermarks

# The aggregations sum, min and max are attributes (spillway.sum("cents")) but not in
# __all__: ``from spillway import *`` must not shadow the builtins of that name.
__all__ = [
    "Agg",
    "ConfigError",
    "ConnectedKeyedStreams",
    "ConnectedStreams",
    "ConsoleSink",
    "Count",
    "DeltaTableSink",
    "FileSource",
    "GeneratorSource",
    "Hopping",
    "JobAbortedError",
    "JsonlFileSink",
    "KafkaTopicSink",
    "KafkaTopicSource",
    "KeyedStream",
    "ParquetFileSink",
    "Pipeline",
    "PipelineDefinitionError",
    "RecordError",
    "RegistryConfig",
    "SchemaMismatchError",
    "Session",
    "SpillwayError",
    "Stream",
    "Tumbling",
    "Watermarks",
    "WindowedStream",
    "__version__",
    "avro_schema",
    "conf",
    "connect",
    "count",
    "mean",
    "union",
]


try:
    __version__ = _metadata.version("spillway-channels")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "unknown"
