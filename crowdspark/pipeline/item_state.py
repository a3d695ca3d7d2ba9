"""The per-item state an incremental run keeps in the lake, and the tables it carries from the previous run.

A run of ``incremental.mode = "on"`` writes ``_incremental/items/`` beside its ``items/`` (Parquet; readers skip
``_`` names), one row per item of its result:

* ``item`` (string);
* ``days`` (array<string>): the days (``input.date_column``) on which the item has labels, so that a later run
  reads only those days' partitions to find its earlier labels;
* ``labels`` (long): how many labels it has on those days (a later run checks that it finds them all);
* ``visited`` (string, ``YYYY-MM-DD``): the as-of date of the run that last fitted it (its weight under a decay);
* ``resp`` (array<double>): its responsibilities at that fit
  (:meth:`~crowdspark.models.base.Model.item_responsibilities`), with which its contribution to the carried
  statistics is subtracted when new labels make a run refit it.

A night writes the state rows of the items it fitted (a full refit: every item); the newest row of an item is in
the newest run of the night's chain (:mod:`crowdspark.io.chain`) that fitted it.  To find the rows of the items a
new day touches without reading the history, each run also writes an **index** of every item of its chain:
``item`` (string) and ``run`` (int: the position, in ``chain + [run]``, of the run that holds its newest row).  The
local engine writes it as one Arrow IPC file, ``_incremental/index.arrow``, read memory-mapped; the Spark engine
as Parquet, ``_incremental/index/``; each engine reads the other's.  A night reads the index, the state deltas of
the runs it names for the touched items (usually the day before), and writes the index again with the touched
items pointing at itself.

Tables are pyarrow Tables when the labels were read with pandas (the history's rows are filtered and written
without a Python object per row) and Spark DataFrames (lazy, nothing item-level collected) when Spark read them;
the rows of the items fitted this run come from the engine (pandas or Spark).
"""

from __future__ import annotations

import datetime as _dt
import os
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from crowdspark.block import Block
from crowdspark.engine.carry import label_sums
from crowdspark.errors import InputError
from crowdspark.io.datatree import tree_from_bytes, tree_to_bytes
from crowdspark.io.rules import Encoding
from crowdspark.stats import Stats, add_stats, sum_stats

__all__ = [
    "STATE_FOLDER",
    "STATE_SCHEMA",
    "state_path",
    "read_table",
    "resp_batch",
    "state_table",
    "revisit_summary",
    "write_state",
    "previous_sums",
    "read_index",
    "index_of",
    "updated_index",
    "write_index",
    "state_rows",
]

STATE_FOLDER = "_incremental"
INDEX_FILE = f"{STATE_FOLDER}/index.arrow"
INDEX_FOLDER = f"{STATE_FOLDER}/index"
STATE_SCHEMA = "item string, days array<string>, labels long, visited string, resp array<double>"
RESP_SCHEMA = "item string, resp array<double>"


def state_path(run: str) -> str:
    """The item state table of the run at ``run``."""
    return f"{run.rstrip('/')}/{STATE_FOLDER}/items"


def _is_spark(table: Any) -> bool:
    import pyarrow as pa

    return not isinstance(table, (pd.DataFrame, pa.Table))


def _arrow_state_schema():
    import pyarrow as pa

    return pa.schema([("item", pa.string()), ("days", pa.list_(pa.string())), ("labels", pa.int64()),
                      ("visited", pa.string()), ("resp", pa.list_(pa.float64()))])


def read_table(path: str, spark: Any, what: str) -> Any:
    """The Parquet table at ``path``: with Spark when ``spark`` is given, else with pyarrow.

    Raises
    ------
    InputError
        When it cannot be read (the previous run is not one an incremental run can continue).
    """
    try:
        if spark is not None:
            return spark.read.parquet(path)
        import pyarrow.parquet as pq

        from crowdspark.io.paths import strip_file_scheme

        return pq.read_table(strip_file_scheme(path))
    except Exception as exc:  # noqa: BLE001 - any reader's failure means the same to the user
        raise InputError(f"cannot read {what} at {path!r} ({type(exc).__name__}: {str(exc)[:300]}); the previous "
                         "run is incomplete or was not written by an incremental run: run a full refit (--full-refit)"
                         ) from exc


def resp_batch(block: Block, resp: np.ndarray):
    """One block's ``(item, resp)`` rows as an Arrow record batch (:meth:`Engine.items`'s ``to_batch``)."""
    import pyarrow as pa

    from crowdspark.io.tables import _list_array

    return pa.RecordBatch.from_pydict({"item": pa.array(np.asarray(block.item_ids, dtype=object), type=pa.string()),
                                       "resp": _list_array(resp)})


def _days_of_items(labels: Any) -> Any:
    """``item``, ``days`` (sorted distinct days of the item's labels), ``labels`` (their number)."""
    if _is_spark(labels):
        from pyspark.sql import functions as F

        return labels.groupBy("item").agg(F.array_sort(F.collect_set("day")).alias("days"),
                                          F.count(F.lit(1)).alias("labels"))
    item = labels["item"].to_numpy(dtype=object)
    day = labels["day"].to_numpy(dtype=object)
    order = np.lexsort((day, item))
    item, day = item[order], day[order]
    new_item = np.r_[True, item[1:] != item[:-1]]
    new_pair = new_item | np.r_[True, day[1:] != day[:-1]]
    starts = np.flatnonzero(new_item)
    pair_starts = np.cumsum(new_pair)[starts] - 1  # first pair of each item
    return {"item": item[starts], "days": day[new_pair], "day_offsets": np.r_[pair_starts, new_pair.sum()],
            "labels": np.diff(np.r_[starts, len(item)])}


def state_table(resp: Any, labels: Any, as_of: _dt.date, spark: Any) -> Any:
    """The state rows of the items fitted this run: their ``resp`` (``item``, ``resp``) with the days of their
    ``labels`` and ``visited`` = ``as_of``."""
    days = _days_of_items(labels)
    if _is_spark(labels):
        from pyspark.sql import functions as F

        resp = resp if _is_spark(resp) else spark.createDataFrame(resp, RESP_SCHEMA)
        joined = resp.join(days, "item").withColumn("visited", F.lit(as_of.isoformat()))
        return joined.select("item", "days", "labels", "visited", "resp")
    import pyarrow as pa

    rows = pd.Index(days["item"]).get_indexer(resp["item"].to_numpy(dtype=object))
    if (rows < 0).any():
        raise ValueError("fitted items without labels")
    offsets = days["day_offsets"]
    lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(days["days"], type=pa.string()))
    values = np.stack(resp["resp"].to_numpy()) if len(resp) else np.zeros((0, 0))
    width = values.shape[1] if values.ndim == 2 else 0
    resp_lists = pa.ListArray.from_arrays(pa.array(np.arange(0, len(resp) * width + 1, width, dtype=np.int32)),
                                          pa.array(values.reshape(-1).astype(np.float64)))
    return pa.table({"item": pa.array(resp["item"].to_numpy(dtype=object), type=pa.string()),
                     "days": lists.take(pa.array(rows)), "labels": pa.array(days["labels"][rows].astype(np.int64)),
                     "visited": pa.array([as_of.isoformat()] * len(resp), type=pa.string()),
                     "resp": resp_lists}, schema=_arrow_state_schema())


def _pandas(table: Any) -> pd.DataFrame:
    return table if isinstance(table, pd.DataFrame) else table.to_pandas()


#: rows per Parquet row group of a local state table: a night reads only the groups whose key range holds a
#: touched item
STATE_ROW_GROUP = 4096


def write_state(table: Any, directory: str, spark: Any) -> None:
    """Write an item state table as Parquet, sorted by item (within each Spark partition), so that the row
    groups' key statistics let a later night skip the groups without a touched item."""
    import pyarrow as pa

    from crowdspark.io.paths import is_local, strip_file_scheme

    if _is_spark(table):
        table.sortWithinPartitions("item").write.mode("overwrite").parquet(directory)
        return
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, schema=_arrow_state_schema(), preserve_index=False)
    table = table.sort_by("item")
    if is_local(directory):
        import pyarrow.parquet as pq

        os.makedirs(strip_file_scheme(directory), exist_ok=True)
        pq.write_table(table, os.path.join(strip_file_scheme(directory), "part-00000.parquet"),
                       row_group_size=STATE_ROW_GROUP)
    else:
        spark.createDataFrame(table.to_pandas(), STATE_SCHEMA).coalesce(1).write.mode("overwrite").parquet(directory)


def _rows_of_items(directory: str, items: Any) -> Any:
    """The rows of the local Parquet state table at ``directory`` whose ``item`` is in ``items`` (a pyarrow
    string array), reading only the row groups whose ``item`` range can hold one of them."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from crowdspark.io.paths import strip_file_scheme

    wanted = np.sort(np.asarray(items.to_pylist(), dtype=object).astype(str))
    folder = strip_file_scheme(directory)
    parts = []
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".parquet"))
        for name in names:
            handle = pq.ParquetFile(os.path.join(folder, name))
            column = handle.schema_arrow.get_field_index("item")
            groups = [g for g in range(handle.num_row_groups)
                      if _may_hold(handle.metadata.row_group(g).column(column).statistics, wanted)]
            if groups:
                parts.append(handle.read_row_groups(groups))
    except Exception as exc:  # noqa: BLE001 - any reader's failure means the same to the user
        raise InputError(f"cannot read an earlier run's item state at {directory!r} ({type(exc).__name__}: "
                         f"{str(exc)[:300]}); run a full refit (--full-refit)") from exc
    if not parts:
        return _arrow_state_schema().empty_table()
    table = pa.concat_tables(parts)
    return table.filter(pc.is_in(table["item"], value_set=items))


def _may_hold(statistics: Any, wanted: np.ndarray) -> bool:
    """Whether a row group with these ``item`` statistics can hold one of the sorted keys ``wanted``."""
    if statistics is None or not statistics.has_min_max:
        return True
    low, high = str(statistics.min), str(statistics.max)
    first = np.searchsorted(wanted, low, side="left")
    return bool(first < len(wanted) and wanted[first] <= high)


def revisit_summary(rows: Any) -> tuple[int, int, list[str]]:
    """The number of state rows, their labels and their distinct ``days`` (one small job on Spark: days, not
    items, reach the driver)."""
    if _is_spark(rows):
        from pyspark.sql import functions as F

        row = rows.agg(F.count(F.lit(1)).alias("n"), F.sum("labels").alias("labels"),
                       F.array_distinct(F.flatten(F.collect_list("days"))).alias("days")).collect()[0]
        return int(row["n"]), int(row["labels"] or 0), sorted(row["days"] or [])
    return int(len(rows)), int(rows["labels"].sum()), sorted({day for days in rows["days"] for day in days})


def _weights(visited: np.ndarray, as_of: _dt.date, decay: float) -> np.ndarray:
    ages = np.array([(as_of - _dt.date.fromisoformat(v)).days for v in visited], dtype=np.float64)
    return decay ** ages


def _sums(item: np.ndarray, worker: np.ndarray, label: np.ndarray, visited: np.ndarray, resp: np.ndarray,
          encoding: Encoding, as_of: _dt.date, decay: float) -> Stats:
    """Previous contributions of labels (one row per label, with their item's ``visited`` and ``resp``
    (m, R)): ``label_sums``, ``item_sums`` and the counts, each item's weighted by its age under ``decay``."""
    workers, classes = encoding.worker_codes(worker), encoding.class_codes(label)
    if (workers < 0).any() or (classes < 0).any():
        raise InputError("an earlier label of a refitted item names a worker or class the previous run did not "
                         "have: the lake changed under the previous run; run a full refit (--full-refit)")
    weighted = resp * _weights(visited, as_of, decay)[:, None]
    first = np.r_[True, item[1:] != item[:-1]]
    return {
        "label_sums": label_sums(workers, classes, weighted, encoding.n_workers, encoding.n_classes),
        "item_sums": weighted[first].sum(axis=0),
        "worker_labels": np.bincount(workers, minlength=encoding.n_workers).astype(np.float64),
        "n_items": np.array(int(first.sum())),
        "n_labels": np.array(int(len(item))),
    }


def _sums_of_frame(frame: pd.DataFrame, encoding: Encoding, as_of: _dt.date, decay: float, width: int) -> Stats:
    frame = frame.sort_values("item", kind="stable")
    resp = np.stack(frame["resp"].to_numpy()) if len(frame) else np.zeros((0, width))
    return _sums(frame["item"].to_numpy(dtype=object), frame["worker"].to_numpy(dtype=object),
                 frame["label"].to_numpy(dtype=object), frame["visited"].to_numpy(dtype=object),
                 resp.astype(np.float64), encoding, as_of, decay)


def _sums_partition(batches, encoding: Encoding, as_of: _dt.date, decay: float, width: int):
    """mapInArrow function: one partition's previous contributions, as one data-only archive."""
    import pyarrow as pa

    frames = [batch.to_pandas() for batch in batches]
    total = {}
    if frames:
        frame = pd.concat(frames, ignore_index=True)
        if len(frame):
            total = _sums_of_frame(frame, encoding, as_of, decay, width)
    yield pa.RecordBatch.from_pydict({"sums": [tree_to_bytes(total)]}, schema=pa.schema([("sums", pa.binary())]))


def previous_sums(earlier: Any, rows: Any, encoding: Encoding, as_of: _dt.date, decay: float, width: int) -> Stats:
    """The previous contributions of refitted items: their earlier labels (``item``, ``worker``, ``label``)
    with their state ``rows`` (``item``, ``visited``, ``resp`` (R = ``width``)), weighted by ``decay`` ** the
    days since their last fit.  Every item of ``rows`` must have labels in ``earlier``."""
    if _is_spark(earlier):
        joined = earlier.select("item", "worker", "label").join(rows.select("item", "visited", "resp"), "item")
        parts = joined.repartition("item").mapInArrow(
            partial(_sums_partition, encoding=encoding, as_of=as_of, decay=decay, width=width), "sums binary")
        return sum_stats(tree_from_bytes(bytes(r["sums"])) for r in parts.collect())
    joined = earlier[["item", "worker", "label"]].merge(rows[["item", "visited", "resp"]], on="item")
    return add_stats({}, _sums_of_frame(joined, encoding, as_of, decay, width))


# ---- the index: where each item's newest state row is ------------------------------------------------------
def _arrow_index(items: Any, ordinal: int):
    import pyarrow as pa

    items = items if isinstance(items, (pa.Array, pa.ChunkedArray)) else pa.array(items, type=pa.string())
    return pa.table({"item": items, "run": pa.array(np.full(len(items), ordinal, dtype=np.int32))})


def read_index(run: str, spark: Any) -> Any:
    """The index of the run at ``run``: a pyarrow Table (``spark`` ``None``; the Arrow IPC file memory-mapped)
    or a Spark DataFrame.

    Raises
    ------
    InputError
        When the run has no readable index (written by an older crowdspark: refit in full).
    """
    from crowdspark.io.files import files_for
    from crowdspark.io.paths import is_local, strip_file_scheme

    run = run.rstrip("/")
    files = files_for(run, spark)
    arrow, folder = f"{run}/{INDEX_FILE}", f"{run}/{INDEX_FOLDER}"
    try:
        if spark is not None and files.exists(folder):
            return spark.read.parquet(folder)
        if files.exists(arrow) and is_local(arrow):
            import pyarrow as pa

            table = pa.ipc.open_file(pa.memory_map(strip_file_scheme(arrow))).read_all()
            return table if spark is None else spark.createDataFrame(table.to_pandas(), "item string, run int")
        if files.exists(folder):
            return read_table(folder, None, "the previous run's index")
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader's failure means the same to the user
        raise InputError(f"cannot read the item index of the previous run {run!r} ({type(exc).__name__}: "
                         f"{str(exc)[:300]}); run a full refit (--full-refit)") from exc
    raise InputError(f"the previous run {run!r} has no item index ({INDEX_FILE} or {INDEX_FOLDER}/): it was written "
                     "by an older crowdspark; run a full refit (--full-refit)")


def index_of(state: Any, ordinal: int) -> Any:
    """The index of the items of a state table, all pointing at the run at position ``ordinal``."""
    if _is_spark(state):
        from pyspark.sql import functions as F

        return state.select("item", F.lit(ordinal).cast("int").alias("run"))
    return _arrow_index(state["item"], ordinal)


def updated_index(index: Any, fitted: Any, ordinal: int, spark: Any) -> Any:
    """``index`` with the items of ``fitted`` (a table with ``item``) pointing at the run at ``ordinal``."""
    if _is_spark(index):
        fitted = fitted if _is_spark(fitted) else spark.createDataFrame(_pandas(fitted)[["item"]], "item string")
        return index.join(fitted.select("item"), "item", "left_anti").unionByName(index_of(fitted, ordinal))
    import pyarrow as pa
    import pyarrow.compute as pc

    items = pa.array(pd.unique(_pandas(fitted)["item"]), type=pa.string())
    kept = index.filter(pc.invert(pc.is_in(index["item"], value_set=items)))
    return pa.concat_tables([kept, _arrow_index(items, ordinal)])


def write_index(index: Any, run: str, spark: Any) -> None:
    """Write ``index`` into the (staged) run at ``run``: Arrow IPC locally, Parquet with Spark."""
    from crowdspark.io.paths import is_local, strip_file_scheme

    if not _is_spark(index) and is_local(run):
        import pyarrow as pa

        path = strip_file_scheme(f"{run.rstrip('/')}/{INDEX_FILE}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with pa.ipc.new_file(path, index.schema) as writer:
            writer.write_table(index)
        return
    if not _is_spark(index):
        index = spark.createDataFrame(index.to_pandas(), "item string, run int")
    index.write.mode("overwrite").parquet(f"{run.rstrip('/')}/{INDEX_FOLDER}")


def state_rows(index: Any, touched: Any, runs: list[str], spark: Any) -> Any:
    """The newest state rows of the ``touched`` items (a table with ``item``) that the chain ``runs`` fitted:
    only the state deltas of the runs the index names for them are read (a pandas frame locally)."""
    if _is_spark(index):
        from pyspark.sql import functions as F

        hits = index.join(touched.select("item").distinct(), "item", "left_semi")
        ordinals = sorted(int(r["run"]) for r in hits.select("run").distinct().collect())
        if not ordinals:
            return spark.createDataFrame([], STATE_SCHEMA)
        parts = [read_table(state_path(runs[o]), spark, "an earlier run's item state")
                 .withColumn("run", F.lit(o).cast("int")) for o in ordinals]
        union = parts[0]
        for part in parts[1:]:
            union = union.unionByName(part)
        return union.join(hits, ["item", "run"], "left_semi").drop("run")
    import pyarrow as pa
    import pyarrow.compute as pc

    items = pa.array(pd.unique(_pandas(touched)["item"]), type=pa.string())
    hits = index.filter(pc.is_in(index["item"], value_set=items))
    ordinals = np.unique(hits["run"].to_numpy())
    frames = []
    for o in ordinals:
        wanted = hits.filter(pc.equal(hits["run"], pa.scalar(int(o), pa.int32())))["item"]
        frames.append(_rows_of_items(state_path(runs[int(o)]), wanted.combine_chunks()))
    if not frames:
        return _arrow_state_schema().empty_table().to_pandas()
    return pa.concat_tables(frames).to_pandas()
