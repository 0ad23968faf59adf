"""RegistryConfig, the Confluent header and the API's refusals (no registry needed)."""

from __future__ import annotations

import io
import pickle

import fastavro
import pytest

from spillway.channels.config import scrub_secrets
from spillway.channels.errors import ConfigError, PipelineDefinitionError
from spillway.spark_jobs.api.pipeline import Pipeline
from spillway.spark_jobs.connectors.confluentavro import (
    RegistryAvroRecords,
    split_header,
    subject_name,
)
from spillway.spark_jobs.connectors.registry import RegistryConfig
from spillway.spark_jobs.records.lines import LineError

ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}


def test_the_secrets_of_registry_settings_never_show() -> None:
    config = RegistryConfig(
        "https://sr.example:8081",
        {"basic.auth.user.info": "alice:pw-reg-789", "ssl.key.password": "kp-reg-012"},
    )
    assert "pw-reg-789" not in repr(config)
    assert "kp-reg-012" not in repr(config)
    assert "alice" not in repr(config)
    assert scrub_secrets("auth alice:pw-reg-789, key kp-reg-012") == "auth ***, key ***"


@pytest.mark.parametrize(
    ("url", "client", "error"),
    [
        ("sr.example:8081", {}, "must be http(s)://"),
        ("http://bob:pw@sr.example", {}, "must not hold credentials"),
        ("http://sr.example", {"basic.auth.user": "x"}, "unknown registry settings"),
        ("http://sr.example", {"basic.auth.user.info": "nopassword"}, "USER:PASSWORD"),
    ],
)
def test_a_bad_registry_setting_is_refused(url: str, client: dict[str, str], error: str) -> None:
    with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
        RegistryConfig(url, client)


def test_the_header_gives_the_schema_id_and_the_body() -> None:
    assert split_header(b"\x00\x00\x01\x00\x02body") == (65538, b"body")
    for bad, why in [
        (None, "no value (null)"),
        (b"", "empty value"),
        (b"\x01\x00\x00\x00\x01x", "no Confluent Schema Registry header"),
        (b"\x00\x00\x01", "no Confluent Schema Registry header"),
    ]:
        with pytest.raises(LineError, match=why.replace("(", r"\(").replace(")", r"\)")):
            split_header(bad)
    assert subject_name("orders", ORDER) == "orders-value"


def test_the_decoder_pickles_without_its_client_and_cache() -> None:
    records = RegistryAvroRecords(ORDER, RegistryConfig("http://127.0.0.1:1"))
    copy = pickle.loads(pickle.dumps(records))
    assert (copy.schema, copy.registry) == (ORDER, records.registry)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(ORDER), {"id": 1})
    with pytest.raises(LineError, match="no Confluent Schema Registry header"):
        copy.read(out.getvalue())


def test_the_api_refuses_what_the_registry_path_does_not_do_yet() -> None:
    registry = RegistryConfig("http://127.0.0.1:1")
    p = Pipeline("r")
    with pytest.raises(PipelineDefinitionError, match='value_format must be "avro"'):
        p.read_kafka("a", "t", schema=ORDER, value_format="json", registry=registry)
    nested = {**ORDER, "fields": [{"name": "tags", "type": {"type": "array", "items": "string"}}]}
    with pytest.raises(PipelineDefinitionError, match="needs a flat schema"):
        p.read_kafka("b", "t", schema=nested, value_format="avro", registry=registry, batches=True)
    s = p.read_kafka("c", "t", schema=ORDER, value_format="avro", registry=registry)
    with pytest.raises(PipelineDefinitionError, match='value_format must be "avro"'):
        s.write_kafka("d", "out", value_format="json", registry=registry)
    with pytest.raises(PipelineDefinitionError, match="'json-schema', 'protobuf', got 'thrift"):
        s.write_kafka("d", "out", value_format="thrift", registry=registry)  # type: ignore[arg-type]
    with pytest.raises(PipelineDefinitionError, match="need registry=RegistryConfig"):
        s.write_kafka("e", "out", value_format="avro")
    with pytest.raises(PipelineDefinitionError, match="need registry=RegistryConfig"):
        s.write_kafka("e", "out", value_format="json-schema")
    with pytest.raises(PipelineDefinitionError, match=r"json-schema.* needs registry="):
        p.read_kafka("f", "t", schema=ORDER, value_format="json-schema")
