"""Exactly-once sinks: JSONL files committed at checkpoints, Kafka topics, console.

Files use two-phase commit as Flink's FileSink does (:class:`StagedFileSink`, shared with
the Parquet sink): records go to an in-progress file; ``prepare`` makes it durable and the
checkpoint records its name; after the checkpoint's transaction commits, the file is
renamed to its final name. A restart renames the files its last checkpoint names (if the
rename had not happened) and deletes every other in-progress file of the subtask, so
files of an aborted attempt never appear.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from spillway.channels.config import KafkaSettings
from spillway.channels.errors import SpillwayError
from spillway.channels.kafka.limits import MessageLimit, message_size, read_message_limit
from spillway.channels.output import MessageOutput
from spillway.channels.routing.batchwrite import ColumnKey
from spillway.channels.routing.partitioners import key_bytes
from spillway.channels.wire import jsontext
from spillway.channels.wire.arrowjson import json_values, key_values
from spillway.channels.wire.batchread import ArrowRows
from spillway.recovery.job.plan import Context, Record
from spillway.recovery.runtime.sinklimit import SinkRefusal
from spillway.spark_jobs.connectors.confluentavro import RegistryAvroWriter
from spillway.spark_jobs.connectors.confluentjson import RegistryJsonWriter
from spillway.spark_jobs.connectors.confluentproto import RegistryProtoWriter

_SUFFIX = ".inprogress"
_to_json = jsontext.dumps  # compact, key-sorted UTF-8 JSON (see spillway.channels.wire.jsontext)


def pending_names(value: Any) -> list[str]:
    """A checkpoint's ``pending``: one staged file (a name) or several (a list of names)."""
    if not value:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def final_name(staged: str) -> str:
    """The published path of a staged one: ``[dir/][.]NAME.inprogress`` → ``[dir/]NAME``."""
    head, _, base = staged.rpartition("/")
    final = base.removesuffix(_SUFFIX).removeprefix(".")
    return f"{head}/{final}" if head else final


class StagedFileSink(abc.ABC):
    """The two-phase commit of files that the JSONL and Parquet sinks share.

    A subclass writes each file under a *staged* name (:meth:`staged_name`) below
    ``directory/<name>/`` and, in :meth:`seal`, closes and fsyncs every file written since
    the last checkpoint and returns their staged paths (relative to that directory). The
    checkpoint records them as ``pending``; once its transaction commits, they are renamed
    to their final names. Final names start ``part-<subtask>-<checkpoint>``, so a restart
    knows which subtask and checkpoint wrote each file.

    ``open`` after a restart: renames the files its last checkpoint names (if the rename
    had not happened), deletes every other staged file of the subtask (an aborted
    attempt's), and deletes published files of checkpoints after the restored one (a
    whole-job rewind to an older checkpoint).
    """

    extension = ""  # of published files, e.g. ".jsonl"
    hidden = False  # stage as ".part-…" (ignored by pyarrow.dataset and Hive-style readers)

    def __init__(self, directory: str, name: str | None = None) -> None:
        self.directory = Path(directory)
        self.name = name
        self._dir = self.directory
        self._index = 0
        self._next = 0

    def open(self, ctx: Context, committed: Mapping[str, Any], producer: Any) -> None:
        """Finish the last committed files and drop in-progress files of aborted attempts."""
        self._dir = self.directory / (self.name or ctx.subtask.operator)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._index = ctx.subtask.index
        for pending in pending_names(committed.get("pending")):
            tmp, final = self._dir / pending, self._dir / final_name(pending)
            if tmp.exists():
                tmp.rename(final)
            elif not final.exists():
                raise SpillwayError(
                    f"{ctx.subtask}: committed output file {final} is missing (and so is its "
                    f"in-progress file): its records would be lost. Is {self.directory} on "
                    "storage every node of the cluster shares?",
                    subtasks=[ctx.subtask],
                )
        prefix = "." if self.hidden else ""
        for stale in self._dir.rglob(f"{prefix}part-{self._index:04d}-*{_SUFFIX}"):
            stale.unlink()  # written by an attempt whose transaction never committed
        self._next = int(committed.get("next", 0))
        later = [
            f
            for f in self._dir.rglob(f"part-{self._index:04d}-*{self.extension}")
            if int(f.name.split("-")[2].split(".")[0]) >= self._next
        ]
        if later:
            self.drop_later(ctx, later)

    def drop_later(self, ctx: Context, files: list[Path]) -> None:
        """Files published after the restored checkpoint: only a whole-job rewind restores
        an older checkpoint than the files on disk; they belong to the abandoned run."""
        for f in files:
            f.unlink()

    def staged_name(self, final: str) -> str:
        """The staged path of published path ``final`` (both relative to the directory)."""
        head, _, base = final.rpartition("/")
        staged = ("." if self.hidden else "") + base + _SUFFIX
        return f"{head}/{staged}" if head else staged

    @abc.abstractmethod
    def seal(self) -> str | list[str] | None:
        """Close and fsync what was written since the last checkpoint; its staged paths."""

    def prepare(self, checkpoint_id: int) -> dict[str, Any]:
        """Make the staged files durable; the checkpoint records their names."""
        info: dict[str, Any] = {"next": checkpoint_id + 1}
        pending = self.seal()
        if pending:
            info["pending"] = pending
        self._next = checkpoint_id + 1
        return info

    def committed(self, info: Mapping[str, Any]) -> None:
        """Publish the files of the committed checkpoint."""
        for pending in pending_names(info.get("pending")):
            os.replace(self._dir / pending, self._dir / final_name(pending))


class JsonlFileSink(StagedFileSink):
    """Writes ``part-<subtask>-<checkpoint>.jsonl`` files under ``directory/<name>/``.

    ``name``: the sink operator's name (default: the subtask's operator, which differs
    when the sink is chained behind other operators).

    A rewind to an older checkpoint deletes the files published after it, so the
    directory again holds exactly the output up to that checkpoint.
    """

    extension = ".jsonl"

    def __init__(self, directory: str, name: str | None = None) -> None:
        super().__init__(directory, name)
        self._fh: Any = None
        self._count = 0

    def write(self, records: Sequence[Record]) -> None:
        """Append records to the in-progress file."""
        if not records:
            return
        if self._fh is None:
            # "x": never truncate a file another incarnation (a zombie) created; if one did,
            # this attempt fails and its retry's open() clears the zombie's file first.
            self._fh = open(self._dir / self._name(self._next, tmp=True), "xb")  # noqa: SIM115
        self._fh.write(b"".join([_to_json(r) + b"\n" for r in records]))
        self._count += len(records)

    def seal(self) -> str | None:
        """fsync the in-progress file; the checkpoint records its name."""
        if self._fh is None:
            return None
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None
        # The file was opened for the id that was "next" then; name it by that id.
        return self._name(self._next, tmp=True)

    def _name(self, n: int, tmp: bool) -> str:
        final = f"part-{self._index:04d}-{n:08d}.jsonl"
        return self.staged_name(final) if tmp else final


class KafkaTopicSink:
    """Writes records as JSON (or, with ``encoder``, registry-framed Avro or JSON) to a user topic
    inside the subtask's transaction.

    ``key``: a function of the record, or a column's name (``ColumnKey``), whose
    ``key_bytes`` key each message. With ``batches`` (a flat input schema, no key function
    but a column), alone in its subtask it reads its channel as Arrow batches
    (``spillway.recovery.runtime.batchpath``). A batch, read so or from a batch operator it
    is chained behind, is written column by column (:mod:`spillway.channels.wire.arrowjson`,
    or the encoder's ``encode_batch``): the same bytes as the records', with no
    dict per row.

    Every message is checked against the topic's :class:`MessageLimit` (read by
    :meth:`read_limit` before the subtask's producer starts) before any is produced: a
    write with a record too large for the topic produces nothing and raises
    :class:`SinkRefusal` naming each such record's position, so the transaction is never
    spoiled by the broker's refusal.
    """

    def __init__(
        self,
        topic: str,
        key: Callable[[Record], Any] | None = None,
        batches: bool = False,
        encoder: RegistryAvroWriter | RegistryJsonWriter | RegistryProtoWriter | None = None,
    ) -> None:
        self.topic = topic
        self.key = key
        # Avro or JSON in the registry's wire format (spark_jobs.connectors.confluentavro,
        # .confluentjson), else JSON.
        self._encoder = encoder
        self._encode: Callable[[Record], bytes] = _to_json if encoder is None else encoder.encode
        # A key function is asked record by record: such a sink takes records.
        self.takes_batches = batches and (key is None or isinstance(key, ColumnKey))
        self._producer: MessageOutput | None = None
        self.limit: MessageLimit | None = None  # None until read_limit (then checked)

    def read_limit(self, settings: KafkaSettings, producer_bytes: int) -> int:
        """Read the topic's message limit (once; see :func:`read_message_limit`); the
        ``batch.size`` the producer must keep to."""
        if self.limit is None:
            self.limit = read_message_limit(settings, self.topic, producer_bytes)
        return self.limit.batch_size

    def open(self, ctx: Context, committed: Mapping[str, Any], producer: Any) -> None:
        """Writes share the subtask's transaction, so nothing needs finishing."""
        self._producer = producer

    def write(self, records: Sequence[Record]) -> None:
        """Produce each record (keyed if a key was given; librdkafka partitions), or none
        if one is too large for the topic (:class:`SinkRefusal`)."""
        assert self._producer is not None
        messages = None
        if isinstance(records, ArrowRows):
            messages = self._columnar(records.batch)
        if messages is None:
            key, encode = self.key, self._encode
            if key is None:
                messages = [(None, encode(r)) for r in records]
            else:
                messages = [(key_bytes(key(r)), encode(r)) for r in records]
        if self.limit is not None:
            check_sizes(self.limit, messages)
        self._producer.produce_many(self.topic, messages)

    def _columnar(self, batch: pa.RecordBatch) -> list[tuple[bytes | None, bytes]] | None:
        """The batch's messages built column by column in the sink's value format (a
        chained sink gets batches whatever it takes); ``None``: write the rows as records
        (a key function, or a type only records take)."""
        if self.key is not None and not isinstance(self.key, ColumnKey):
            return None  # a key function is asked record by record
        if self._encoder is not None:
            values: list[bytes] | None = self._encoder.encode_batch(batch)
        else:
            values = json_values(batch)
        if values is None:
            return None
        if self.key is None:
            return [(None, v) for v in values]
        keys = key_values(batch.column(self.key.column))
        return None if keys is None else list(zip(keys, values, strict=True))

    def prepare(self, checkpoint_id: int) -> dict[str, Any]:
        """Nothing beyond the transaction."""
        return {}

    def committed(self, info: Mapping[str, Any]) -> None:
        """Visible to read_committed consumers now."""


def check_sizes(limit: MessageLimit, messages: Sequence[tuple[bytes | None, bytes]]) -> None:
    """:class:`SinkRefusal` naming every message over ``limit`` by its position (and why),
    if there is one."""
    most = limit.payload_bytes  # key + value bytes a message without headers may carry
    refused = [
        (k, limit.refusal(message_size(key, value)))
        for k, (key, value) in enumerate(messages)
        if len(value) + (len(key) if key else 0) > most
    ]
    if refused:
        raise SinkRefusal(
            f"{len(refused)} of {len(messages)} records too large for topic {limit.topic}: "
            f"the first {refused[0][1]}",
            refused,
        )


class ConsoleSink:
    """Prints records once their checkpoint has committed (for demos)."""

    def __init__(self, limit: int = 20) -> None:
        self.limit = limit
        self._buf: list[Record] = []
        self._printed = 0
        self._prefix = ""

    def open(self, ctx: Context, committed: Mapping[str, Any], producer: Any) -> None:
        """Nothing to recover: printed output cannot be taken back."""
        self._prefix = f"[{ctx.subtask}] "

    def write(self, records: Sequence[Record]) -> None:
        """Buffer until commit."""
        self._buf.extend(records)

    def prepare(self, checkpoint_id: int) -> dict[str, Any]:
        """Nothing to make durable."""
        return {}

    def committed(self, info: Mapping[str, Any]) -> None:
        """Print what the checkpoint committed (up to ``limit`` lines in all)."""
        for r in self._buf:
            if self._printed < self.limit:
                print(self._prefix + _to_json(r).decode(), flush=True)
                self._printed += 1
        self._buf.clear()
