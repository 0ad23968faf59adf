"""The pipeline API's modes as types, each a ``Literal`` defined here once.

A pipeline passes them as strings (``emit="updates"``, ``value_format="avro"``, ...); the
API call that takes one parses it with :func:`spillway.channels.modes.choose`, raising
:class:`~spillway.channels.errors.PipelineDefinitionError` that names the bad value and the
allowed ones, and hands the typed value on.
"""

from __future__ import annotations

from typing import Literal, get_args

from spillway.channels.errors import PipelineDefinitionError
from spillway.channels.modes import choose

# When a keyed or windowed aggregation emits: once per key (or window) when the input ends
# (or the window fires), or after every record.
Emit = Literal["final", "updates"]
EMITS: tuple[Emit, ...] = get_args(Emit)

# A batch aggregation also emits "rows": one row per input row, running per key.
BatchEmit = Literal["final", "updates", "rows"]
BATCH_EMITS: tuple[BatchEmit, ...] = get_args(BatchEmit)

# How read_kafka reads a value: JSON, one Avro datum, the Confluent wire format (Avro), or
# JSON or a Protobuf message behind the wire format's header (JSON Schema or Protobuf, with
# a registry).
ValueFormat = Literal["json", "avro", "avro-confluent", "json-schema", "protobuf"]
VALUE_FORMATS: tuple[ValueFormat, ...] = get_args(ValueFormat)

# How write_kafka writes a value: JSON, or Avro, JSON Schema or Protobuf in the Confluent
# wire format (with a registry).
SinkValueFormat = Literal["json", "avro", "json-schema", "protobuf"]
SINK_VALUE_FORMATS: tuple[SinkValueFormat, ...] = get_args(SinkValueFormat)

# The value formats a schema registry frames (the Confluent wire format's body): Avro
# datums, JSON text validated by a JSON Schema, or Protobuf messages.
RegistryFormat = Literal["avro", "json-schema", "protobuf"]
REGISTRY_FORMATS: tuple[RegistryFormat, ...] = get_args(RegistryFormat)

# How write_kafka names the registry subject of its values, as Confluent's strategies do:
# TopicNameStrategy (<topic>-value), RecordNameStrategy (the record's full name),
# TopicRecordNameStrategy (<topic>-<full name>).
SubjectStrategy = Literal["topic", "record", "topic_record"]
SUBJECT_STRATEGIES: tuple[SubjectStrategy, ...] = get_args(SubjectStrategy)

# The files read_files reads; as Arrow batches (batches=True) only CSV and Parquet.
FileFormat = Literal["jsonl", "csv", "parquet"]
FILE_FORMATS: tuple[FileFormat, ...] = get_args(FileFormat)
BatchFileFormat = Literal["csv", "parquet"]
BATCH_FILE_FORMATS: tuple[BatchFileFormat, ...] = get_args(BatchFileFormat)


def emit_of(value: object, where: str) -> Emit:
    """``value`` as an :data:`Emit`; :class:`PipelineDefinitionError` naming ``where`` (the
    operator), the bad value and the allowed ones."""
    return choose(value, EMITS, f"{where}: emit", PipelineDefinitionError)


def batch_emit_of(value: object, where: str) -> BatchEmit:
    """``value`` as a :data:`BatchEmit`; :class:`PipelineDefinitionError` as :func:`emit_of`."""
    return choose(value, BATCH_EMITS, f"{where}: emit", PipelineDefinitionError)
