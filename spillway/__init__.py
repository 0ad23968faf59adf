"""``import spillway``: the pipeline API in one place.

A front door over the layered packages (channels → offsets → recovery → spark_jobs),
which stay where they are; everything here is re-exported from them::

    import spillway

    p = spillway.Pipeline("clicks")
    clicks = p.generate("clicks", count=1_000, make=make_click, parallelism=2)
    clicks.map("enrich", enrich).write_jsonl("out", "/tmp/out")

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
from spillway.spark_jobs.connectors.deltasink import DeltaTableSink
from spillway.spark_jobs.connectors.parquetsink import ParquetFileSink
from spillway.spark_jobs.connectors.sinks import ConsoleSink, JsonlFileSink, KafkaTopicSink
from spillway.spark_jobs.connectors.sources import FileSource, GeneratorSource, KafkaTopicSource
from spillway.spark_jobs.records.schemas import avro_schema
from spillway.spark_jobs.records.watermarks import Watermarks

__all__ = [
    "ConfigError",
    "ConnectedKeyedStreams",
    "ConnectedStreams",
    "ConsoleSink",
    "DeltaTableSink",
    "FileSource",
    "GeneratorSource",
    "JobAbortedError",
    "JsonlFileSink",
    "KafkaTopicSink",
    "KafkaTopicSource",
    "KeyedStream",
    "ParquetFileSink",
    "Pipeline",
    "PipelineDefinitionError",
    "RecordError",
    "SchemaMismatchError",
    "SpillwayError",
    "Stream",
    "Watermarks",
    "__version__",
    "avro_schema",
    "conf",
    "connect",
    "union",
]


try:
    __version__ = _metadata.version("spillway-channels")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "unknown"
