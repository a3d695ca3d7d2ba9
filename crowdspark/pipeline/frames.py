"""The few table operations an incremental night needs, once for tables on the driver and once for Spark.

An incremental night (:mod:`crowdspark.pipeline.incremental`, :mod:`crowdspark.pipeline.item_state`) works on
tables of rows keyed by ``item``: the labels it reads, the items they touch, the item state and its index.  Its
operations are written once against :class:`Frames`; two implementations say how each step runs:

* :class:`LocalFrames`: tables on the driver.  Labels stay pandas DataFrames (as the reader gives them and as
  :mod:`crowdspark.pipeline.prepare` takes them); the item state and its index are pyarrow Tables (their rows
  are filtered, joined and written without a Python object per row).  An operation returns a table of its
  first argument's kind, except where it says otherwise.
* :class:`SparkFrames`: lazy Spark DataFrames; nothing item-level is collected to the driver.

:func:`frames_for` picks one.  Schemas are pyarrow schemas; :func:`ddl` gives the Spark DDL of one.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np
import pandas as pd

from crowdspark.errors import InputError
from crowdspark.io.datatree import tree_from_bytes, tree_to_bytes
from crowdspark.stats import Stats, sum_stats

__all__ = ["Table", "Frames", "LocalFrames", "SparkFrames", "frames_for", "ddl"]

#: a table of rows: a pandas DataFrame or a pyarrow Table (:class:`LocalFrames`), a Spark DataFrame
#: (:class:`SparkFrames`)
Table = Any

#: a function of one pandas frame holding whole key groups, returning additive statistics
GroupsFn = Callable[[pd.DataFrame], Stats]


def ddl(schema: Any) -> str:
    """The Spark DDL of a pyarrow ``schema`` (``"item string, run int"``) of strings, ints, longs, doubles and
    lists of them."""
    return ", ".join(f"{field.name} {_ddl_type(field.type)}" for field in schema)


def _ddl_type(kind: Any) -> str:
    import pyarrow as pa

    if pa.types.is_list(kind):
        return f"array<{_ddl_type(kind.value_type)}>"
    names = {pa.string(): "string", pa.int32(): "int", pa.int64(): "long", pa.float64(): "double"}
    if kind not in names:
        raise ValueError(f"no Spark DDL for the Arrow type {kind}; use one of {sorted(map(str, names))} or lists")
    return names[kind]


def _read_error(what: str, path: str, exc: Exception) -> InputError:
    return InputError(f"cannot read {what} at {path!r} ({type(exc).__name__}: {str(exc)[:300]}); the previous run "
                      "is incomplete or was not written by an incremental run: run a full refit (--full-refit)")


class Frames(Protocol):
    """The table operations of an incremental night (tables keyed by columns such as ``item``).

    ``on`` names the key columns of a join; the right side of :meth:`join` holds each key once.  Row order is
    kept where the engine has one (:class:`LocalFrames`: the left or first table's order).
    """

    #: whether the tables are on the driver
    local: bool

    def read(self, path: str, what: str, *, keys: Table | None = None, schema: Any = None) -> Table:
        """The Parquet table at ``path`` (``what`` names it in the error).  With ``keys`` (a table with
        ``item``), a reader may leave out rows whose ``item`` is not among them: the local reader reads only the
        row groups whose ``item`` range can hold one and keeps those rows (``schema`` when none); Spark reads
        all and prunes through the caller's join.

        Raises
        ------
        InputError
            When it cannot be read (the previous run is not one an incremental run can continue).
        """

    def no_rows(self, path: str) -> Table:
        """The Parquet table at ``path`` without its rows (only its metadata is read)."""

    def write(self, table: Table, directory: str, schema: Any, *, sort_by: str | None = None,
              rows_per_group: int | None = None) -> None:
        """Write ``table`` (of ``schema``) as Parquet into ``directory``, sorted by ``sort_by`` (within each
        Spark partition; a local table as one file of row groups of ``rows_per_group`` rows)."""

    def written(self, table: Table, directory: str) -> Table:
        """The rows of ``table`` that :meth:`write` wrote into ``directory``, for further use: Spark reads the
        files back (the plan that computed them does not run again); locally ``table`` itself."""

    def adopt(self, table: Table, schema: Any) -> Table:
        """A driver table (pandas or pyarrow, of ``schema``) as a table of this kind; a table of this kind as it
        is."""

    def to_pandas(self, table: Table) -> pd.DataFrame:
        """A small table (e.g. workers, size K) as a pandas frame on the driver."""

    def select(self, table: Table, columns: Sequence[str]) -> Table:
        """The ``columns`` of ``table``, in that order."""

    def drop(self, table: Table, column: str) -> Table:
        """``table`` without ``column``."""

    def where(self, table: Table, column: str, value: Any) -> Table:
        """The rows of ``table`` whose ``column`` equals ``value``."""

    def with_constant(self, table: Table, name: str, value: Any, kind: Any) -> Table:
        """``table`` with a column ``name`` holding ``value`` (pyarrow type ``kind``) on every row."""

    def union(self, tables: Sequence[Table]) -> Table:
        """The rows of all ``tables`` (the same columns), in order."""

    def distinct(self, table: Table, column: str) -> Table:
        """The distinct values of ``column`` as a one-column table (locally: in order of first appearance)."""

    def semi_join(self, table: Table, keys: Table, on: Sequence[str]) -> Table:
        """The rows of ``table`` whose ``on`` values are a row of ``keys``."""

    def anti_join(self, table: Table, keys: Table, on: str) -> Table:
        """The rows of ``table`` whose ``on`` value is not in ``keys``."""

    def join(self, left: Table, right: Table, on: str) -> Table:
        """The inner join: each row of ``left`` with the columns of the row of ``right`` of its ``on`` value
        (``right`` holds each value once; a driver table: of ``left``'s kind)."""

    def grouped_sets(self, table: Table, key: str, column: str, names: tuple[str, str]) -> Table:
        """Per distinct ``key``: ``names[0]``, the sorted distinct values of ``column`` (a list), and
        ``names[1]``, the number of rows (int64).  Locally a pyarrow Table."""

    def distinct_values(self, table: Table, column: str, limit: int | None = None) -> list:
        """The sorted distinct non-null values of ``column`` on the driver (Spark: at most ``limit`` of
        them)."""

    def count_by(self, table: Table, column: str) -> dict[Any, int]:
        """The number of rows of each value of ``column``."""

    def totals(self, table: Table, sum_of: str, lists_of: str) -> tuple[int, int, list]:
        """The number of rows, the sum of ``sum_of`` and the sorted distinct values of the lists in
        ``lists_of`` (one small job on Spark)."""

    def sum_groups(self, table: Table, key: str, fn: GroupsFn) -> Stats:
        """The sum of ``fn`` over parts of ``table`` (pandas frames) that each hold whole groups of ``key``
        (Spark: one per partition after a shuffle by ``key``; locally: the whole table)."""


def frames_for(distributed: bool, spark: Any = None) -> Frames:
    """:class:`SparkFrames` over ``spark`` when the tables are Spark's, else :class:`LocalFrames` (which writes
    to a path that is not local through ``spark``)."""
    return SparkFrames(spark) if distributed else LocalFrames(spark)


# ---- on the driver ----------------------------------------------------------------------------------------------
def _is_pandas(table: Table) -> bool:
    return isinstance(table, pd.DataFrame)


def _values(table: Table, column: str) -> np.ndarray:
    """A column of a pandas frame or pyarrow Table as a numpy array (strings as objects)."""
    if _is_pandas(table):
        series = table[column]
        return series.to_numpy() if pd.api.types.is_numeric_dtype(series.dtype) else series.to_numpy(dtype=object)
    return table[column].to_numpy()


def _arrow(table: Table, schema: Any = None) -> Any:
    """A pyarrow Table of a pandas frame (without pandas' schema metadata) or of a pyarrow Table."""
    import pyarrow as pa

    if not _is_pandas(table):
        return table
    return pa.Table.from_pandas(table, schema=schema, preserve_index=False).replace_schema_metadata(None)


def _like(table: Table, other: Table) -> Table:
    """``other`` as a table of ``table``'s kind (pandas or pyarrow)."""
    if _is_pandas(table):
        return other if _is_pandas(other) else other.to_pandas()
    return _arrow(other, table.schema)


def _filter(table: Table, mask: Any) -> Table:
    """The rows of ``table`` where ``mask`` (a numpy or pyarrow boolean array) holds."""
    import pyarrow as pa

    if _is_pandas(table):
        return table.loc[np.asarray(mask)].reset_index(drop=True)
    return table.filter(mask if isinstance(mask, (pa.Array, pa.ChunkedArray)) else pa.array(mask))


def _is_in(table: Table, keys: Table, on: Sequence[str]) -> Any:
    """Whether each row's ``on`` values are a row of ``keys`` (a numpy or pyarrow boolean array)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(on) > 1:
        return pd.MultiIndex.from_arrays([_values(table, c) for c in on]).isin(
            pd.MultiIndex.from_arrays([_values(keys, c) for c in on]))
    column = on[0]
    if _is_pandas(table):
        return table[column].isin(set(_values(keys, column))).to_numpy()
    wanted = pa.array(pd.unique(_values(keys, column)), type=table.schema.field(column).type)
    return pc.is_in(table[column], value_set=wanted)


def _may_hold(statistics: Any, wanted: np.ndarray) -> bool:
    """Whether a row group with these ``item`` statistics can hold one of the sorted keys ``wanted``."""
    if statistics is None or not statistics.has_min_max:
        return True
    low, high = str(statistics.min), str(statistics.max)
    first = np.searchsorted(wanted, low, side="left")
    return bool(first < len(wanted) and wanted[first] <= high)


def _row_groups(folder: str, items: np.ndarray) -> list[Any]:
    """The row groups of the Parquet files in ``folder`` whose ``item`` range can hold one of ``items``."""
    import pyarrow.parquet as pq

    wanted = np.sort(items.astype(str))
    parts = []
    for name in sorted(n for n in os.listdir(folder) if n.endswith(".parquet")):
        handle = pq.ParquetFile(os.path.join(folder, name))
        column = handle.schema_arrow.get_field_index("item")
        groups = [g for g in range(handle.num_row_groups)
                  if _may_hold(handle.metadata.row_group(g).column(column).statistics, wanted)]
        if groups:
            parts.append(handle.read_row_groups(groups))
    return parts


class LocalFrames:
    """:class:`Frames` of pandas DataFrames and pyarrow Tables on the driver.

    Parameters
    ----------
    spark : SparkSession, optional
        Writes a table to a path that is not local (none is needed otherwise).
    """

    local = True

    def __init__(self, spark: Any = None) -> None:
        self.spark = spark

    def read(self, path: str, what: str, *, keys: Table | None = None, schema: Any = None) -> Table:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from crowdspark.io.paths import strip_file_scheme

        try:
            if keys is None:
                return pq.read_table(strip_file_scheme(path))
            items = _values(keys, "item")
            parts = _row_groups(strip_file_scheme(path), items)
        except Exception as exc:  # noqa: BLE001 - any reader's failure means the same to the user
            raise _read_error(what, path, exc) from exc
        if not parts:
            return schema.empty_table()
        table = pa.concat_tables(parts)
        return table.filter(_is_in(table, keys, ["item"]))

    def no_rows(self, path: str) -> Table:
        import pyarrow.dataset as ds

        from crowdspark.io.paths import strip_file_scheme

        return ds.dataset(strip_file_scheme(path), format="parquet").schema.empty_table()

    def write(self, table: Table, directory: str, schema: Any, *, sort_by: str | None = None,
              rows_per_group: int | None = None) -> None:
        from crowdspark.io.paths import is_local, strip_file_scheme

        rows = _arrow(table, schema)
        rows = rows.sort_by(sort_by) if sort_by else rows
        if is_local(directory):
            import pyarrow.parquet as pq

            folder = strip_file_scheme(directory)
            os.makedirs(folder, exist_ok=True)
            pq.write_table(rows, os.path.join(folder, "part-00000.parquet"), row_group_size=rows_per_group)
            return
        frame = self.spark.createDataFrame(rows.to_pandas(), ddl(schema))
        (frame.coalesce(1) if sort_by else frame).write.mode("overwrite").parquet(directory)  # one file keeps the order

    def written(self, table: Table, directory: str) -> Table:
        return table

    def adopt(self, table: Table, schema: Any) -> Table:
        return _arrow(table, schema)

    def to_pandas(self, table: Table) -> pd.DataFrame:
        return table if _is_pandas(table) else table.to_pandas()

    def select(self, table: Table, columns: Sequence[str]) -> Table:
        return table[list(columns)] if _is_pandas(table) else table.select(list(columns))

    def drop(self, table: Table, column: str) -> Table:
        return table.drop(columns=column) if _is_pandas(table) else table.drop_columns([column])

    def where(self, table: Table, column: str, value: Any) -> Table:
        import pyarrow as pa
        import pyarrow.compute as pc

        if _is_pandas(table):
            return _filter(table, (table[column] == value).to_numpy())
        return table.filter(pc.equal(table[column], pa.scalar(value, table.schema.field(column).type)))

    def with_constant(self, table: Table, name: str, value: Any, kind: Any) -> Table:
        import pyarrow as pa

        column = pa.repeat(pa.scalar(value, kind), len(table))
        if _is_pandas(table):
            return table.assign(**{name: column.to_numpy(zero_copy_only=False)})
        return table.append_column(name, column)

    def union(self, tables: Sequence[Table]) -> Table:
        import pyarrow as pa

        first = tables[0]
        rest = [_like(first, t) for t in tables[1:]]
        if _is_pandas(first):
            return pd.concat([first, *rest], ignore_index=True)
        return pa.concat_tables([first, *rest])

    def distinct(self, table: Table, column: str) -> Table:
        import pyarrow as pa

        values = pd.unique(_values(table, column))
        if _is_pandas(table):
            return pd.DataFrame({column: values})
        return pa.table({column: pa.array(values, type=table.schema.field(column).type)})

    def semi_join(self, table: Table, keys: Table, on: Sequence[str]) -> Table:
        return _filter(table, _is_in(table, keys, list(on)))

    def anti_join(self, table: Table, keys: Table, on: str) -> Table:
        import pyarrow.compute as pc

        inside = _is_in(table, keys, [on])
        return _filter(table, ~inside if _is_pandas(table) else pc.invert(inside))

    def join(self, left: Table, right: Table, on: str) -> Table:
        import pyarrow as pa

        rows = pd.Index(_values(right, on)).get_indexer(_values(left, on))
        found = rows >= 0
        if not found.all():
            left, rows = _filter(left, found), rows[found]
        for name in (c for c in _columns(right) if c != on):
            column = right[name].take(pa.array(rows)) if not _is_pandas(right) else right[name].to_numpy()[rows]
            if _is_pandas(left):
                left = left.assign(**{name: column if _is_pandas(right) else column.to_pandas().to_numpy()})
            else:
                left = left.append_column(name, column if not _is_pandas(right) else pa.array(column))
        return left

    def grouped_sets(self, table: Table, key: str, column: str, names: tuple[str, str]) -> Table:
        import pyarrow as pa

        keys, values = _values(table, key), _values(table, column)
        order = np.lexsort((values, keys))
        keys, values = keys[order], values[order]
        new_key = np.r_[True, keys[1:] != keys[:-1]]
        new_pair = new_key | np.r_[True, values[1:] != values[:-1]]
        starts = np.flatnonzero(new_key)
        offsets = np.r_[np.cumsum(new_pair)[starts] - 1, new_pair.sum()]  # each key's first pair, then the end
        return pa.table({key: pa.array(keys[starts], type=pa.string()),
                         names[0]: pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)),
                                                            pa.array(values[new_pair], type=pa.string())),
                         names[1]: pa.array(np.diff(np.r_[starts, len(keys)]).astype(np.int64))})

    def distinct_values(self, table: Table, column: str, limit: int | None = None) -> list:
        values = pd.Series(_values(table, column)).dropna()
        return sorted(set(values.tolist()))

    def count_by(self, table: Table, column: str) -> dict[Any, int]:
        return {value: int(n) for value, n in pd.Series(_values(table, column)).value_counts().items()}

    def totals(self, table: Table, sum_of: str, lists_of: str) -> tuple[int, int, list]:
        lists = table[lists_of] if _is_pandas(table) else table[lists_of].to_pylist()
        return int(len(table)), int(_values(table, sum_of).sum()), sorted({v for values in lists for v in values})

    def sum_groups(self, table: Table, key: str, fn: GroupsFn) -> Stats:
        frame = self.to_pandas(table)
        return sum_stats([fn(frame)] if len(frame) else [])


def _columns(table: Table) -> list[str]:
    return list(table.columns) if _is_pandas(table) else table.column_names


# ---- on Spark -------------------------------------------------------------------------------------------------
def _stats_partition(batches: Iterator[Any], fn: GroupsFn) -> Iterator[Any]:
    """mapInArrow function: ``fn`` of one partition's rows, as one data-only archive."""
    import pyarrow as pa

    frames = [batch.to_pandas() for batch in batches]
    total: Stats = {}
    if frames:
        frame = pd.concat(frames, ignore_index=True)
        if len(frame):
            total = fn(frame)
    yield pa.RecordBatch.from_pydict({"sums": [tree_to_bytes(total)]}, schema=pa.schema([("sums", pa.binary())]))


class SparkFrames:
    """:class:`Frames` of lazy Spark DataFrames.

    Parameters
    ----------
    spark : SparkSession
    """

    local = False

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def read(self, path: str, what: str, *, keys: Table | None = None, schema: Any = None) -> Table:
        try:
            return self.spark.read.parquet(path)
        except Exception as exc:  # noqa: BLE001 - any reader's failure means the same to the user
            raise _read_error(what, path, exc) from exc

    def no_rows(self, path: str) -> Table:
        return self.spark.read.parquet(path).limit(0)

    def write(self, table: Table, directory: str, schema: Any, *, sort_by: str | None = None,
              rows_per_group: int | None = None) -> None:
        (table.sortWithinPartitions(sort_by) if sort_by else table).write.mode("overwrite").parquet(directory)

    def written(self, table: Table, directory: str) -> Table:
        return self.spark.read.parquet(directory)

    def adopt(self, table: Table, schema: Any) -> Table:
        import pyarrow as pa

        if _is_pandas(table):
            return self.spark.createDataFrame(table, ddl(schema))
        if isinstance(table, pa.Table):
            return self.spark.createDataFrame(table.to_pandas(), ddl(schema))
        return table

    def to_pandas(self, table: Table) -> pd.DataFrame:
        return table.toPandas()

    def select(self, table: Table, columns: Sequence[str]) -> Table:
        return table.select(*columns)

    def drop(self, table: Table, column: str) -> Table:
        return table.drop(column)

    def where(self, table: Table, column: str, value: Any) -> Table:
        from pyspark.sql import functions as F

        return table.filter(F.col(column) == value)

    def with_constant(self, table: Table, name: str, value: Any, kind: Any) -> Table:
        from pyspark.sql import functions as F

        return table.withColumn(name, F.lit(value).cast(_ddl_type(kind)))

    def union(self, tables: Sequence[Table]) -> Table:
        union = tables[0]
        for table in tables[1:]:
            union = union.unionByName(table)
        return union

    def distinct(self, table: Table, column: str) -> Table:
        return table.select(column).distinct()

    def semi_join(self, table: Table, keys: Table, on: Sequence[str]) -> Table:
        on = list(on)
        return table.join(keys.select(*on), on if len(on) > 1 else on[0], "left_semi")

    def anti_join(self, table: Table, keys: Table, on: str) -> Table:
        return table.join(keys.select(on), on, "left_anti")

    def join(self, left: Table, right: Table, on: str) -> Table:
        return left.join(right, on)

    def grouped_sets(self, table: Table, key: str, column: str, names: tuple[str, str]) -> Table:
        from pyspark.sql import functions as F

        return table.groupBy(key).agg(F.array_sort(F.collect_set(column)).alias(names[0]),
                                      F.count(F.lit(1)).alias(names[1]))

    def distinct_values(self, table: Table, column: str, limit: int | None = None) -> list:
        rows = table.select(column).distinct()
        rows = rows.limit(limit) if limit is not None else rows
        return sorted(r[0] for r in rows.collect() if r[0] is not None)

    def count_by(self, table: Table, column: str) -> dict[Any, int]:
        return {r[column]: int(r["count"]) for r in table.groupBy(column).count().collect()}

    def totals(self, table: Table, sum_of: str, lists_of: str) -> tuple[int, int, list]:
        from pyspark.sql import functions as F

        row = table.agg(F.count(F.lit(1)).alias("n"), F.sum(sum_of).alias("total"),
                        F.array_distinct(F.flatten(F.collect_list(lists_of))).alias("values")).collect()[0]
        return int(row["n"]), int(row["total"] or 0), sorted(row["values"] or [])

    def sum_groups(self, table: Table, key: str, fn: GroupsFn) -> Stats:
        parts = table.repartition(key).mapInArrow(partial(_stats_partition, fn=fn), "sums binary")
        return sum_stats(tree_from_bytes(bytes(r["sums"])) for r in parts.collect())
