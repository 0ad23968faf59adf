"""Which schema a channel message was written with. Pure: no I/O.

Every data message, and every part of a record that spans messages, carries header
``spw.s``: its writer schema's id, the CRC-64-AVRO (Rabin) fingerprint of the schema's
Parsing Canonical Form as 16 hex digits. That is the fingerprint Avro itself defines
(and its single-object encoding uses), so any tool can compute it from a schema. Two
schemas with one id encode every record alike (the canonical form keeps exactly what
the binary encoding depends on: defaults, aliases and docs are left out), so the id
names the encoding, which is what a reader needs.

**Where a reader finds the schema of an id**: in the job's recorded topologies. Every
run records its topology, channel schemas included, in its ``submitted`` event
(:func:`spillway.recovery.job.evolution.topology_doc`) before any of its subtasks writes; the driver
collects each channel's schemas from all of them and hands them to the run's readers
with the plan (:attr:`spillway.recovery.job.plan.EdgePlan.writer_schemas`, shipped to the tasks by
:class:`spillway.recovery.restore.rescale.PlanShape`). No record can be in a channel unless a run of
the
job wrote it, so the list is complete. Not in-band (the schema in a writer's first
message): that message may sit in an aborted transaction or in a rewind's discard span,
and a reader restored past it would never see it. Not a schema registry: another service
to run and reach from every executor, for what the events topic already holds durably.

A message without ``spw.s`` comes from a Spillway older than this one: it is read with
the reader's own schema, as it was then.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fastavro.schema import fingerprint, to_parsing_canonical_form

from spillway.channels.errors import SchemaMismatchError

H_SCHEMA = "spw.s"


@functools.lru_cache(maxsize=256)
def _id_of_json(text: str) -> bytes:
    canonical = to_parsing_canonical_form(json.loads(text))
    return fingerprint(canonical, "CRC-64-AVRO").encode()


def schema_id(schema: Mapping[str, Any] | Sequence[Any] | str) -> bytes:
    """The id of Avro ``schema`` (16 ASCII hex digits): equal for schemas whose binary
    encodings are the same, different otherwise (up to a 64-bit fingerprint collision)."""
    return _id_of_json(json.dumps(schema, sort_keys=True))


def schema_header(schema: Mapping[str, Any]) -> tuple[str, bytes]:
    """The ``spw.s`` header of a message written with ``schema``."""
    return H_SCHEMA, schema_id(schema)


def schema_id_of(raw_headers: Sequence[tuple[str, bytes | None]] | None) -> bytes | None:
    """The writer schema id a message carries; None: written before ids existed."""
    for name, value in raw_headers or ():
        if name == H_SCHEMA:
            return value
    return None


class WriterSchemas:
    """The schemas the messages of one channel may have been written with, by id: the
    reader's own and the channel's earlier ones (recorded by the job's earlier runs)."""

    def __init__(self, reader: dict[str, Any], earlier: Iterable[dict[str, Any]] = ()) -> None:
        self.reader = reader
        self.own = schema_id(reader)
        self._by_id: dict[bytes, dict[str, Any]] = {}
        for s in earlier:
            self._by_id.setdefault(schema_id(s), s)
        self._by_id[self.own] = reader

    def is_own(self, sid: bytes | None) -> bool:
        """True if a message of id ``sid`` needs no resolution (None: an older writer's
        message, read with the reader's schema as before ids)."""
        return sid is None or sid == self.own

    def get(self, sid: bytes) -> dict[str, Any]:
        """The schema of id ``sid``; :class:`SchemaMismatchError` (deterministic) if
        neither the reader's nor one of the channel's recorded schemas has it."""
        found = self._by_id.get(sid)
        if found is None:
            known = ", ".join(sorted(k.decode() for k in self._by_id))
            raise SchemaMismatchError(
                f"a data message written with schema id {sid.decode(errors='replace')}, which "
                f"is neither this reader's schema {self.reader.get('name', '?')!r} nor one "
                f"this job's recorded runs gave the channel (known ids: {known}); it was "
                "written by code that did not run as this job (another job on the same "
                "topic?): read it with the code that wrote it"
            )
        return found
