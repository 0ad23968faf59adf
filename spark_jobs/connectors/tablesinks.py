"""Choosing a columnar sink: Parquet files, or the same files added to a Delta Lake table.

Apart from both sinks because it picks between them (the Delta sink builds on the Parquet
sink), and checks the schema and partition column when the pipeline is built.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from spillway.spark_jobs.connectors.deltasink import DeltaTableSink
from spillway.spark_jobs.connectors.parquetsink import ParquetFileSink, check_partition_column
from spillway.spark_jobs.records.schemas import parquet_schemas


def columnar_sink(
    kind: str,
    directory: str,
    name: str,
    spec: Any,
    upstream: dict[str, Any] | None,
    partition_by: str | None,
    max_file_bytes: int,
    roll_interval_s: float,
) -> Callable[[], ParquetFileSink]:
    """The factory of a ``"parquet"`` or ``"delta"`` sink; its schema (``spec``, else the
    input's ``upstream``) and partition column are checked now, when the pipeline is built."""
    where = f"sink {name!r}"
    arrow, avro = parquet_schemas(spec, upstream, where, name)
    check_partition_column(arrow, partition_by, where)
    cls: type[ParquetFileSink] = DeltaTableSink if kind == "delta" else ParquetFileSink
    return partial(cls, directory, name, arrow, avro, partition_by, max_file_bytes, roll_interval_s)
