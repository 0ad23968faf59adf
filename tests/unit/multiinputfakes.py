"""Two record schemas and a generator of either, for plans whose operators take several
inputs (pure): test_multi_input, test_joins and test_coprocess share them."""

from __future__ import annotations

from typing import Any

from spillway.spark_jobs.api.pipeline import Pipeline

EVENT = {"type": "record", "name": "E", "fields": [{"name": "k", "type": "string"}]}
OTHER = {"type": "record", "name": "O", "fields": [{"name": "n", "type": "long"}]}


def gen(p: Pipeline, name: str, schema: dict[str, Any], parallelism: int = 1) -> Any:
    """A generator of 3 records ``{"k": str(i)}`` named ``name`` in ``p``."""
    return p.generate(
        name, make=lambda i: {"k": str(i)}, schema=schema, count=3, parallelism=parallelism
    )
