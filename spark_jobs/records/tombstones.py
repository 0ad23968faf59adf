"""Kafka message keys as a record field, and tombstones as deletion records.

``read_kafka(..., key_field="id")`` puts each message's key, decoded as UTF-8 text, into
the record's field ``id`` (a message without a key keeps the value's ``id``).

``read_kafka(..., key_field="id", tombstones=True)`` reads a table topic (compacted) as
Kafka Streams and Quix do: a message with a key and an empty or null value deletes the
key's row. It becomes a *deletion record* ``{"id": key, "_deleted": True}`` with every
other field ``None``; rows carry ``"_deleted": False``. Both travel the source's channel,
whose schema is therefore the given one with the boolean field ``_deleted`` (default
false) added and every field but the key made nullable.

A lookup join's table input deletes the key's row on a deletion record (the state entry
goes, so its changelog gets a tombstone). Any other operator receives deletion records
as records like any other: filter them with ``filter(lambda r: not r["_deleted"])``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spillway.channels.errors import PipelineDefinitionError
from spillway.recovery.job.plan import Record
from spillway.spark_jobs.records.lines import FieldType, LineError, decode, parse_json_value

DELETED = "_deleted"  # the marker field of a deletion record (an Avro-valid name)


def keyed_schema(
    avro: Mapping[str, Any], key_field: str | None, tombstones: bool, where: str
) -> dict[str, Any]:
    """The channel schema of a Kafka source with ``key_field``/``tombstones`` (see the
    module doc); :class:`PipelineDefinitionError` if they do not fit ``avro``."""
    if key_field is None:
        if tombstones:
            raise PipelineDefinitionError(
                f"{where}: tombstones=True needs key_field= (the record field the Kafka "
                "message key goes to), so a deletion record says which row it deletes"
            )
        return dict(avro)
    fields = list(avro.get("fields", []))
    key = next((f for f in fields if f["name"] == key_field), None)
    if key is None or _branches(key["type"]) != ["string"]:
        found = "has no such field" if key is None else f"declares it as {key['type']!r}"
        raise PipelineDefinitionError(
            f"{where}: key_field {key_field!r} must be a string field of the schema (the "
            f"Kafka key is decoded as UTF-8 text), but the schema {found}"
        )
    if not tombstones:
        return dict(avro)
    if any(f["name"] == DELETED for f in fields):
        raise PipelineDefinitionError(
            f"{where}: with tombstones=True the source adds the field {DELETED!r}; the "
            "schema must not declare it"
        )
    out = [f if f["name"] == key_field else _nullable(f) for f in fields]
    out.append({"name": DELETED, "type": "boolean", "default": False})
    return {**avro, "fields": out}


def _branches(t: Any) -> list[Any]:
    """The non-null branches of an Avro type (``"string"`` and ``{"type": "string"}`` alike)."""
    ts = t if isinstance(t, list) else [t]
    plain = [b["type"] if isinstance(b, dict) and b.get("type") == "string" else b for b in ts]
    return [b for b in plain if b != "null"]


def _nullable(f: Mapping[str, Any]) -> dict[str, Any]:
    t = f["type"]
    if isinstance(t, list) and "null" in t:
        return dict(f)
    branches = t if isinstance(t, list) else [t]
    return {**f, "type": ["null", *branches], "default": None}


class KeyedDecoder:
    """Decodes a message (key, value) into a record, as the module doc says."""

    def __init__(self, key_field: str, tombstones: bool, names: list[str]) -> None:
        self.key_field, self.tombstones = key_field, tombstones
        self._empty = dict.fromkeys(names)

    def decode(
        self, key: bytes | None, value: bytes | None, fields: Mapping[str, FieldType]
    ) -> Record:
        """The row or deletion record of one message; :class:`LineError` if the value is
        unreadable, the key not UTF-8, or a tombstone without option or key."""
        text = None if key is None else decode(key)
        if not value and self.tombstones:
            if text is None:
                raise LineError("a tombstone (empty value) without a key: no row to delete")
            return {**self._empty, self.key_field: text, DELETED: True}
        record = parse_json_value(value, fields)
        if text is not None:
            record[self.key_field] = text
        if self.tombstones:
            record[DELETED] = False
        return record
