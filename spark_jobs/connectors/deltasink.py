"""Exactly-once Delta Lake table: the Parquet sink's files, added to the table's log with an
idempotent commit per checkpoint (needs the optional ``deltalake`` package: the ``delta``
extra).

The data files are written, staged and published exactly as by
:class:`spillway.spark_jobs.connectors.parquetsink.ParquetFileSink`. A Delta reader sees only files
the
table's log adds, so the files become visible when the sink, after the checkpoint's
Kafka transaction committed, commits a Delta transaction adding them. That commit carries
an *application transaction* (Delta's ``txn`` action): app id = the subtask's
transactional id, version = the checkpoint id. A restart reads the version the table
holds for its app id: if the restored checkpoint is newer, its Delta commit never
happened, and the restart makes it (with the same files); otherwise it is done. So a
crash anywhere between the Kafka commit and the Delta commit adds each file exactly once.

Subtasks commit to the same table concurrently; their commits are blind appends, which
Delta's optimistic concurrency retries without conflict.

A whole-job rewind to an older checkpoint is refused: the files it would drop are in
the table's log (undo them with Delta's own ``restore`` to a table version, then rewind).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from spillway.channels.errors import ConfigError, SpillwayError
from spillway.recovery.job.plan import Context
from spillway.spark_jobs.connectors.parquetsink import HIVE_NULL, ParquetFileSink
from spillway.spark_jobs.connectors.sinks import final_name, pending_names


def _deltalake() -> Any:
    try:
        import deltalake
    except ImportError as e:
        raise ConfigError(
            "write_delta needs the deltalake package: pip install 'spillway-channels[delta]'"
        ) from e
    return deltalake


class DeltaTableSink(ParquetFileSink):
    """A Delta table at ``directory/<name>/``, appended to exactly once per checkpoint."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._app_id = ""
        self._table: Any = None

    def open(self, ctx: Context, committed: Mapping[str, Any], producer: Any) -> None:
        """Publish what the last checkpoint staged, then make its Delta commit if the table
        does not hold it yet (the app transaction's version tells)."""
        deltalake = _deltalake()
        super().open(ctx, committed, producer)
        self._app_id = ctx.subtask.transactional_id
        partition_by = [self.partition_by] if self.partition_by else None
        deltalake.DeltaTable.create(
            str(self._dir), self.schema, partition_by=partition_by, mode="ignore"
        )
        self._table = deltalake.DeltaTable(str(self._dir))
        pending = pending_names(committed.get("pending"))
        if pending:
            done = self._table.transaction_version(self._app_id)
            version = int(committed["next"]) - 1
            if done is None or done < version:
                self._commit([final_name(p) for p in pending], version)

    def drop_later(self, ctx: Context, files: list[Path]) -> None:
        """Refuse: the files of later checkpoints are in the table's log already."""
        raise SpillwayError(
            f"{ctx.subtask}: the Delta table {self._dir} holds files of checkpoints after the "
            f"one being restored ({files[0].name}, ...); a rewind cannot take them back. "
            "Restore the table to an earlier version with Delta's restore first",
            subtasks=[ctx.subtask],
        )

    def committed(self, info: Mapping[str, Any]) -> None:
        """Publish the checkpoint's files and add them to the table in one Delta commit."""
        super().committed(info)
        pending = pending_names(info.get("pending"))
        if pending:
            self._commit([final_name(p) for p in pending], int(info["next"]) - 1)

    def _commit(self, finals: list[str], version: int) -> None:
        deltalake = _deltalake()
        from deltalake.transaction import AddAction

        now = int(time.time() * 1000)
        actions = []
        for rel in finals:
            path = self._dir / rel
            rows = pq.read_metadata(path).num_rows
            actions.append(
                AddAction(
                    path=rel,
                    size=path.stat().st_size,
                    partition_values=self._partition_values(rel),
                    modification_time=now,
                    data_change=True,
                    stats=json.dumps({"numRecords": rows}),
                )
            )
        # To the table's latest version first: a commit read from an older one that our own
        # app id has committed since would fail Delta's conflict check for app transactions.
        self._table.update_incremental()
        self._table.create_write_transaction(
            actions,
            mode="append",
            schema=self.schema,
            partition_by=[self.partition_by] if self.partition_by else None,
            commit_properties=deltalake.CommitProperties(
                app_transactions=[deltalake.Transaction(self._app_id, version)]
            ),
        )

    def _partition_values(self, rel: str) -> dict[str, str | None]:
        if self.partition_by is None:
            return {}
        column, _, text = rel.split("/", 1)[0].partition("=")
        return {column: None if text == HIVE_NULL else urllib.parse.unquote(text)}
