"""Columnar keyed aggregation: ``key_by(column).aggregate_batches(...)``'s logic.

Each input batch is reduced per key by Arrow (``Table.group_by`` over ``pyarrow.compute``
kernels) into one partial row per distinct key; only those partial rows are merged into
keyed state in Python — one step per distinct key of a batch, never one per record.

State, and so the changelog, has the contract of the record path's ``aggregate``
(:class:`spillway.spark_jobs.operators.operators.KeyedAggregateLogic`): one value per key in
:class:`~spillway.recovery.job.plan.KeyedState`, written with ``put`` after a whole batch has been
reduced (a batch that fails leaves state as it was), restored by the changelog as it is.
The value is a flat JSON list of *slots*, one per ``count``/``sum``/``min``/``max`` and two
(sum, count) per ``mean``, so a mean restores exactly and merges with later batches.

Aggregates are per key, over non-null values, as SQL's: ``count(col)`` counts non-null
values (``count()`` counts rows), ``sum``/``min``/``max`` of a key with no non-null value
are null, ``mean`` is ``sum / count`` (null when the count is 0). User-defined combinations
of Arrow compute functions come in two places: an aggregate may run over an *expression*
of the batch (``Agg("sum", lambda b: pc.multiply(b["price"], b["qty"]))``), and ``derive``
adds output columns computed from the aggregated table (``pc.divide(t["rev"], t["n"])``).

Emitting: ``"final"`` emits every key's result once when the input ends, sorted by key as
the record path sorts them; ``"updates"`` emits, after each batch, one row per key the
batch touched (in order of first appearance) — the record path's last update of that key
within the batch (it emits after every record; a columnar operator emits per batch);
``"rows"`` (count, sum and mean only) emits one row per input row, its key's result after
that row — the record path's ``"updates"`` row for row
(:mod:`spillway.spark_jobs.operators.batchrunning`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spillway.channels.errors import ConfigError, PipelineDefinitionError, RecordError
from spillway.channels.routing.batchroute import check_key_type
from spillway.recovery.job.origins import Origins
from spillway.recovery.job.plan import Context, KeyedState, SetAside
from spillway.spark_jobs.modes import BatchEmit
from spillway.spark_jobs.operators.batchops import DeadLetterSink, process_batch
from spillway.spark_jobs.operators.batchrunning import KeyCodes, key_codes, running_sum, with_base
from spillway.spark_jobs.operators.operators import _by_key
from spillway.spark_jobs.records.aggregations import KINDS as KINDS
from spillway.spark_jobs.records.aggregations import Agg as Agg
from spillway.spark_jobs.records.aggregations import Expr as Expr

ROW_KINDS = ("count", "sum", "mean")  # the kinds emit="rows" keeps running per row
Derive = Callable[[pa.Table], pa.Array | pa.ChunkedArray]

_ADD, _MIN, _MAX = "add", "min", "max"
# Per kind: its slots, each as (hash aggregate, options, how two partials merge).
_SLOTS: dict[str, list[tuple[str, Any, str]]] = {
    "count": [("count", pc.CountOptions(mode="only_valid"), _ADD)],
    "sum": [("sum", None, _ADD)],
    "min": [("min", None, _MIN)],
    "max": [("max", None, _MAX)],
    "mean": [("sum", None, _ADD), ("count", pc.CountOptions(mode="only_valid"), _ADD)],
}
_ROWS = ("count", pc.CountOptions(mode="all"), _ADD)  # count() of rows, nulls included


def _numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t))


class BatchAggregate:
    """The pure fold of batches into keyed state, and the results it emits.

    ``input_schema``: the Arrow schema of the input batches (the channel's), from which the
    output schema is fixed at definition time; a definition that cannot work on it (a
    missing column, ``sum`` of strings) is refused with :class:`PipelineDefinitionError`.
    """

    def __init__(
        self,
        name: str,
        key: str,
        aggs: Mapping[str, Agg],
        input_schema: pa.Schema,
        *,
        derive: Mapping[str, Derive] | None = None,
        emit: BatchEmit = "final",
    ) -> None:
        self.name, self.key, self.emit = name, key, emit
        self.aggs = dict(aggs)
        self.derive = dict(derive or {})
        self._check(input_schema)
        self._slots: list[tuple[str, Any, str]] = []
        self._first_slot: list[int] = []
        for a in self.aggs.values():
            self._first_slot.append(len(self._slots))
            self._slots.extend([_ROWS] if a.kind == "count" and a.of is None else _SLOTS[a.kind])
        self._merges = [m for _, _, m in self._slots]
        empty = pa.RecordBatch.from_pylist([], schema=input_schema)
        partial = self._partial(empty)
        key_type = input_schema.field(key).type
        self.key_type = key_type.value_type if pa.types.is_dictionary(key_type) else key_type
        self._types = [partial.field(i + 1).type for i in range(len(self._slots))]
        fields = [pa.field(key, self.key_type)]
        for (out, a), s in zip(self.aggs.items(), self._first_slot, strict=True):
            kind = a.kind
            typ = pa.float64() if kind == "mean" else pa.int64() if kind == "count" else None
            fields.append(pa.field(out, typ or self._types[s]))
        self._base_schema = pa.schema(fields)
        self.output_schema = self._results([], []).schema

    def _check(self, schema: pa.Schema) -> None:
        where = f"operator {self.name!r}"
        if self.emit == "rows" and (bad := [o for o, a in aggs_of(self) if a not in ROW_KINDS]):
            raise PipelineDefinitionError(
                f"{where}: emit='rows' keeps {', '.join(ROW_KINDS)} running per row; "
                f"{bad} are not of those (use emit='updates')"
            )
        if self.key not in schema.names:
            raise PipelineDefinitionError(
                f"{where}: key column {self.key!r} is not in the input; its columns are "
                f"{schema.names}"
            )
        check_key_type(self.key, schema.field(self.key).type)
        kt = schema.field(self.key).type
        if pa.types.is_binary(kt) or pa.types.is_large_binary(kt):
            raise PipelineDefinitionError(
                f"{where}: key column {self.key!r} is binary, which keyed state (JSON) "
                "cannot hold; cast it to a string"
            )
        if not self.aggs:
            raise PipelineDefinitionError(f"{where}: give at least one aggregate")
        empty = pa.RecordBatch.from_pylist([], schema=schema)
        for out, a in self.aggs.items():
            if a.kind not in KINDS:
                raise PipelineDefinitionError(
                    f"{where}: aggregate {out!r} has kind {a.kind!r}; use one of {KINDS}"
                )
            if out == self.key or out in self.derive:
                raise PipelineDefinitionError(f"{where}: output column {out!r} is named twice")
            if a.of is None:
                if a.kind != "count":
                    raise PipelineDefinitionError(f"{where}: {a.kind} of {out!r} needs a column")
                continue
            if isinstance(a.of, str) and a.of not in schema.names:
                raise PipelineDefinitionError(
                    f"{where}: aggregate {out!r} reads column {a.of!r}, which is not in the "
                    f"input; its columns are {schema.names}"
                )
            typ = self._input(a, empty).type
            ok = (
                _numeric(typ)
                if a.kind in ("sum", "mean")
                else _numeric(typ) or pa.types.is_string(typ) or pa.types.is_boolean(typ)
                if a.kind in ("min", "max")
                else True
            )
            if not ok:
                raise PipelineDefinitionError(
                    f"{where}: {a.kind} of {out!r} over type {typ} is not supported; "
                    "sum and mean take numbers, min and max numbers, strings or booleans"
                )

    def _input(self, a: Agg, batch: pa.RecordBatch) -> pa.Array | pa.ChunkedArray:
        if a.of is None:
            return batch.column(self.key)
        if isinstance(a.of, str):
            return batch.column(a.of)
        return a.of(batch)

    def _partial(self, batch: pa.RecordBatch) -> pa.Table:
        """One row per distinct key of ``batch`` (first appearance order): key, slots."""
        cols: dict[str, Any] = {"k": batch.column(self.key)}
        specs = []
        for a, first in zip(self.aggs.values(), self._first_slot, strict=True):
            arr = self._input(a, batch)
            kinds = [_ROWS] if a.kind == "count" and a.of is None else _SLOTS[a.kind]
            for j, (fn, opts, _) in enumerate(kinds):
                col = f"s{first + j}"
                cols[col] = arr
                specs.append((col, fn, opts) if opts is not None else (col, fn))
        grouped = pa.table(cols).group_by("k", use_threads=False).aggregate(specs)
        names = ["k"] + [f"{s[0]}_{s[1]}" for s in specs]
        return grouped.select(names)

    def fold(self, batch: pa.RecordBatch, state: KeyedState) -> pa.RecordBatch | None:
        """Fold ``batch`` into ``state``; with ``emit="updates"`` the touched keys' results.

        State is written only after the whole batch has been reduced and merged.
        """
        try:
            partial = self._partial(batch)
            self._check_int_sums(batch)
        except (pa.ArrowException, KeyError, TypeError, ValueError) as e:
            raise RecordError(f"operator {self.name!r}: cannot aggregate a batch: {e}") from e
        keys = partial.column(0).to_pylist()
        cols = [partial.column(i + 1).to_pylist() for i in range(len(self._slots))]
        rows = zip(*cols, strict=True)
        olds = {k: state.get(k) for k in keys}  # one state read per distinct key
        accs = []
        for k, new in zip(keys, rows, strict=True):
            old = olds[k]
            accs.append(list(new) if old is None else self._merge(old, new))
        out = (
            self._results(keys, accs)
            if self.emit == "updates"
            else self._rows(batch, olds)
            if self.emit == "rows"
            else None
        )
        for k, acc in zip(keys, accs, strict=True):  # only once nothing can fail
            state.put(k, acc)
        return out

    def _check_int_sums(self, batch: pa.RecordBatch) -> None:
        """Arrow's grouped integer sums wrap around silently; the record path's do not.

        One vectorised bound per integer sum: while the batch's sum of absolute values
        stays below 2**62, no key's sum can overflow. Only above it are the keys' sums
        taken exactly (in Python), and a real overflow is an error naming the aggregate.
        """
        for (out, a), first in zip(self.aggs.items(), self._first_slot, strict=True):
            typ = self._types[first]
            if a.kind not in ("sum", "mean") or not pa.types.is_integer(typ):
                continue
            values = self._input(a, batch)
            bound = pc.sum(pc.abs(pc.cast(values, pa.float64(), safe=False))).as_py() or 0.0
            if bound < 2.0**62:
                continue
            sums: dict[Any, int] = {}
            for k, v in zip(batch.column(self.key).to_pylist(), values.to_pylist(), strict=True):
                if v is not None:
                    sums[k] = sums.get(k, 0) + v
            low, high = (
                (0, 2**64 - 1) if pa.types.is_unsigned_integer(typ) else (-(2**63), 2**63 - 1)
            )
            for k, total in sums.items():
                if not low <= total <= high:
                    raise ValueError(
                        f"{a.kind} {out!r} of key {k!r} is {total} within one batch, beyond {typ}"
                    )

    def _rows(self, batch: pa.RecordBatch, state_before: dict[Any, Any]) -> pa.RecordBatch:
        """Per input row, its key's result after that row (``emit="rows"``);
        ``state_before``: each key's state value before the batch."""
        kc = key_codes(batch.column(self.key))
        olds = [state_before[k] for k in kc.keys.to_pylist()]

        def before(slot: int) -> list[Any]:  # each distinct key's slot before the batch
            return [None if o is None else o[slot] for o in olds]

        arrays: list[Any] = [pc.cast(kc.keys, self.key_type).take(kc.codes)]
        try:
            for (a, s), f in zip(
                zip(self.aggs.values(), self._first_slot, strict=True),
                list(self._base_schema)[1:],
                strict=True,
            ):
                arrays.append(pc.cast(self._running(a, s, batch, kc, before), f.type))
        except (pa.ArrowException, OverflowError) as e:
            raise RecordError(f"operator {self.name!r}: a result does not fit its type: {e}") from e
        return self._derived(pa.Table.from_arrays(arrays, schema=self._base_schema))

    def _running(
        self,
        a: Agg,
        slot: int,
        batch: pa.RecordBatch,
        kc: KeyCodes,
        before: Callable[[int], list[Any]],
    ) -> pa.Array:
        """Aggregate ``a``'s result per row (its slots from ``slot``), running per key."""
        values = self._input(a, batch)
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if a.kind == "count":
            ones = pc.cast(pc.is_valid(values), pa.int64())
            if a.of is None:  # count() of rows: a row whose key is null counts too
                ones = pc.if_else(pc.is_null(values), pa.scalar(1, pa.int64()), ones)
            return with_base(kc, running_sum(kc, ones), before(slot))
        valid = pc.cast(pc.is_valid(values), pa.int64())
        total = running_sum(kc, pc.fill_null(pc.cast(values, self._types[slot]), 0))
        total = with_base(kc, total, before(slot))
        if a.kind == "sum":  # null while the key has had no value (SQL's sum)
            had = [None if b is None else 1 for b in before(slot)]
            seen = with_base(kc, running_sum(kc, valid), had)
            return pc.if_else(pc.greater(seen, 0), total, pa.scalar(None, total.type))
        count = with_base(kc, running_sum(kc, valid), before(slot + 1))  # mean: sum / count
        mean = pc.divide(pc.cast(total, pa.float64()), pc.cast(count, pa.float64()))
        return pc.if_else(pc.greater(count, 0), mean, pa.scalar(None, pa.float64()))

    def _merge(self, old: Sequence[Any], new: Sequence[Any]) -> list[Any]:
        out = list(old)
        for i, how in enumerate(self._merges):
            a, b = out[i], new[i]
            if b is None:
                continue
            if a is None:
                out[i] = b
            elif how == _ADD:
                out[i] = a + b
            elif how == _MIN:
                out[i] = b if b < a else a
            else:
                out[i] = b if b > a else a
        return out

    def finals(self, state: KeyedState) -> pa.RecordBatch:
        """Every key's result, sorted by key as the record path's ``aggregate`` sorts."""
        items = _by_key(state.items())
        return self._results([k for k, _ in items], [acc for _, acc in items])

    def _results(self, keys: list[Any], accs: Sequence[Sequence[Any]]) -> pa.RecordBatch:
        slots = list(zip(*accs, strict=True)) if accs else [() for _ in self._slots]
        arrays = [pa.array(keys, self.key_type)]
        try:
            for (a, first), f in zip(
                zip(self.aggs.values(), self._first_slot, strict=True),
                list(self._base_schema)[1:],
                strict=True,
            ):
                if a.kind == "mean":
                    sums, counts = slots[first], slots[first + 1]
                    vals = [s / c if c else None for s, c in zip(sums, counts, strict=True)]
                    arrays.append(pa.array(vals, f.type))
                else:
                    arrays.append(pa.array(slots[first], f.type))
        except (pa.ArrowException, OverflowError) as e:
            raise RecordError(f"operator {self.name!r}: a result does not fit its type: {e}") from e
        return self._derived(pa.Table.from_arrays(arrays, schema=self._base_schema))

    def _derived(self, table: pa.Table) -> pa.RecordBatch:
        """``table`` with the ``derive`` columns appended, as one batch."""
        for out, fn in self.derive.items():
            try:
                col = fn(table)
            except Exception as e:  # user code: name the column it computes
                raise RecordError(f"operator {self.name!r}: derive {out!r} failed: {e}") from e
            table = table.append_column(out, col)
        return _one_batch(table)


def aggs_of(agg: BatchAggregate) -> list[tuple[str, str]]:
    """(output column, kind) of each aggregate of ``agg``."""
    return [(out, a.kind) for out, a in agg.aggs.items()]


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    """``table`` as one record batch (an empty one when it has no rows)."""
    return (
        table.combine_chunks().to_batches()[0]
        if table.num_rows
        else (pa.RecordBatch.from_pylist([], schema=table.schema))
    )


class BatchAggregateLogic:
    """:class:`BatchAggregate` as an operator: keyed state from the subtask's context.

    The batch counterpart of the record ``Logic`` protocol: :meth:`process_batch` takes
    the input batch as it arrived and returns the batches to emit.
    """

    # The runtime hands it all the messages of one poll as one batch
    # (spillway.recovery.runtime.pollfold):
    # a group_by and a state read per distinct key per poll, not per message.
    folds_per_poll = True

    def __init__(self, agg: BatchAggregate) -> None:
        self.agg = agg
        self._ctx: Context | None = None

    def open(self, ctx: Context) -> None:
        """State arrives already restored in ``ctx.state``."""
        self._ctx = ctx

    def process_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """Fold ``batch``; the updates to emit (none with ``emit="final"``)."""
        if self._ctx is None:
            raise ConfigError(f"operator {self.agg.name!r}: process_batch before open")
        out = self.agg.fold(batch, self._ctx.state)
        return [out] if out is not None and out.num_rows else []

    def run_batch(
        self, batch: pa.RecordBatch, origins: Origins, dead_letters: DeadLetterSink | None
    ) -> list[pa.RecordBatch]:
        """:meth:`process_batch` with failing rows isolated (the runtime's entry point)."""
        where = f"operator {self.agg.name!r}"
        return process_batch(self.process_batch, batch, origins, dead_letters, where)

    def on_watermark(self, watermark: int) -> Iterable[pa.RecordBatch]:
        """Global aggregates are not windowed."""
        return ()

    def on_end(self) -> list[pa.RecordBatch]:
        """With ``emit="final"``: every key's result, sorted by key."""
        if self._ctx is None or self.agg.emit != "final":
            return []
        out = self.agg.finals(self._ctx.state)
        return [out] if out.num_rows else []

    def set_aside(self) -> list[SetAside]:
        """Every row is folded in."""
        return []
