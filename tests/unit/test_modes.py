"""Modes as types: parsed once where they enter, with an error naming the value and the choices."""

from __future__ import annotations

from typing import Any

import pytest

from spillway.channels.errors import ConfigError, PipelineDefinitionError
from spillway.channels.modes import (
    CHECKPOINT_MODES,
    CODECS,
    GUARANTEES,
    ReaderModes,
    choose,
)
from spillway.cli import build_parser
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.modes import (
    BATCH_EMITS,
    EMITS,
    FILE_FORMATS,
    REGISTRY_FORMATS,
    SINK_VALUE_FORMATS,
    VALUE_FORMATS,
)
from spillway.spark_jobs.operators.batchagg import Agg

SCHEMA = {
    "type": "record",
    "name": "R",
    "fields": [{"name": "k", "type": "string"}, {"name": "x", "type": "long"}],
}


def test_the_allowed_values_are_the_literal_types_values() -> None:
    assert GUARANTEES == ("exactly-once", "at-least-once")
    assert CHECKPOINT_MODES == ("interval", "aligned", "unaligned")
    assert CODECS == ("arrow", "avro")
    assert EMITS == ("final", "updates")
    assert BATCH_EMITS == ("final", "updates", "rows")
    assert VALUE_FORMATS == ("json", "avro", "avro-confluent", "json-schema", "protobuf")
    assert SINK_VALUE_FORMATS == ("json", "avro", "json-schema", "protobuf")
    assert REGISTRY_FORMATS == ("avro", "json-schema", "protobuf")
    assert FILE_FORMATS == ("jsonl", "csv", "parquet")


@pytest.mark.parametrize("value", ["at-least-once", "exactly-once"])
def test_choose_returns_the_allowed_value(value: str) -> None:
    assert choose(value, GUARANTEES, "--guarantee") == value


@pytest.mark.parametrize("value", ["exactly_once", "EXACTLY-ONCE", "", None, 1])
def test_a_bad_mode_names_itself_and_the_allowed_ones(value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        choose(value, GUARANTEES, "--guarantee")
    assert str(info.value) == (
        f"--guarantee must be one of 'exactly-once', 'at-least-once', got {value!r}"
    )


def test_choose_raises_the_error_type_asked_for() -> None:
    with pytest.raises(PipelineDefinitionError) as info:
        choose("sometimes", EMITS, "operator 'a': emit", PipelineDefinitionError)
    assert (
        str(info.value) == "operator 'a': emit must be one of 'final', 'updates', got 'sometimes'"
    )


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--guarantee", "exactly_once"),
        ("--checkpoint-mode", "global"),
        ("--channel-codec", "json"),
    ],
)
def test_the_cli_refuses_a_bad_mode_naming_the_choices(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["run", "--pipeline", "m:p", "--job-id", "j", option, value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: invalid choice: {value!r}" in err


def test_reader_modes_default_and_derived_flags() -> None:
    default = ReaderModes()
    assert (default.bad, default.checkpoints, default.form, default.guarantee) == (
        "fail",
        "interval",
        "rows",
        "exactly-once",
    )
    assert not default.aligned
    assert not default.resends
    assert ReaderModes(checkpoints="aligned").aligned
    assert not ReaderModes(checkpoints="unaligned").aligned
    assert ReaderModes(guarantee="at-least-once").resends


def test_reader_modes_are_frozen() -> None:
    modes = ReaderModes()
    with pytest.raises(AttributeError):
        modes.bad = "deliver"  # type: ignore[misc]


def test_read_kafka_refuses_an_unknown_value_format() -> None:
    with pytest.raises(PipelineDefinitionError) as info:
        Pipeline("m").read_kafka("src", "t", schema=SCHEMA, value_format="thrift")  # type: ignore[arg-type]
    assert str(info.value) == (
        "source 'src': value_format must be one of 'json', 'avro', 'avro-confluent', "
        "'json-schema', 'protobuf', got 'thrift'"
    )


def test_read_files_refuses_an_unknown_format_when_the_pipeline_is_defined() -> None:
    with pytest.raises(PipelineDefinitionError) as info:
        Pipeline("m").read_files("f", "*.xml", format="xml", schema=SCHEMA)  # type: ignore[arg-type]
    assert str(info.value) == (
        "read_files 'f': format must be one of 'jsonl', 'csv', 'parquet', got 'xml'"
    )


def test_aggregate_batches_refuses_an_unknown_emit() -> None:
    src = Pipeline("m").read_kafka("src", "t", schema=SCHEMA, batches=True)
    with pytest.raises(PipelineDefinitionError) as info:
        src.key_by("k").aggregate_batches("a", {"n": Agg("count")}, emit="sometimes")  # type: ignore[arg-type]
    assert str(info.value) == (
        "operator 'a': emit must be one of 'final', 'updates', 'rows', got 'sometimes'"
    )


def test_write_kafka_refuses_an_unknown_value_format() -> None:
    src = Pipeline("m").read_kafka("src", "t", schema=SCHEMA)
    with pytest.raises(PipelineDefinitionError) as info:
        src.write_kafka("out", "o", value_format="avro-confluent")  # type: ignore[arg-type]
    assert str(info.value) == (
        "write_kafka 'out': value_format must be one of 'json', 'avro', 'json-schema', "
        "'protobuf', got 'avro-confluent'"
    )
    with pytest.raises(PipelineDefinitionError) as info:
        src.write_kafka("out", "o", value_format="avro")
    assert str(info.value) == (
        """write_kafka 'out': value_format="avro", "json-schema" or "protobuf", subject= and """
        "subject_strategy= need registry=RegistryConfig(...)"
    )
    with pytest.raises(PipelineDefinitionError) as info:
        src.write_kafka("out", "o", subject_strategy="records")  # type: ignore[arg-type]
    assert str(info.value) == (
        "write_kafka 'out': subject_strategy must be one of 'topic', 'record', "
        "'topic_record', got 'records'"
    )
