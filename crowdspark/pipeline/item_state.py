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

Every operation is written once against :class:`~crowdspark.pipeline.frames.Frames`: pyarrow Tables on the driver
when the labels were read with pandas (the history's rows are filtered and written without a Python object per
row), Spark DataFrames (lazy, nothing item-level collected) when Spark read them; the rows of the items fitted this
run come from the engine (pandas or Spark).
"""

from __future__ import annotations

import datetime as _dt
import os
from functools import partial

import numpy as np
import pandas as pd
import pyarrow as pa

from crowdspark.block import Block
from crowdspark.engine.carry import label_sums
from crowdspark.errors import InputError
from crowdspark.io.rules import Encoding
from crowdspark.pipeline.frames import Frames, Table, ddl
from crowdspark.stats import Stats

__all__ = [
    "STATE_FOLDER",
    "STATE",
    "RESP",
    "INDEX",
    "STATE_SCHEMA",
    "state_path",
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

#: the item state's columns (the module's docstring)
STATE = pa.schema([("item", pa.string()), ("days", pa.list_(pa.string())), ("labels", pa.int64()),
                   ("visited", pa.string()), ("resp", pa.list_(pa.float64()))])
#: the fitted items' responsibilities (:func:`resp_batch`)
RESP = pa.schema([("item", pa.string()), ("resp", pa.list_(pa.float64()))])
#: the index: the position in ``chain + [run]`` of the run holding each item's newest state row
INDEX = pa.schema([("item", pa.string()), ("run", pa.int32())])
STATE_SCHEMA = ddl(STATE)

#: rows per Parquet row group of a local state table: a night reads only the groups whose key range holds a
#: touched item
STATE_ROW_GROUP = 4096


def state_path(run: str) -> str:
    """The item state table of the run at ``run``."""
    return f"{run.rstrip('/')}/{STATE_FOLDER}/items"


def resp_batch(block: Block, resp: np.ndarray):
    """One block's ``(item, resp)`` rows as an Arrow record batch (:meth:`Engine.items`'s ``to_batch``)."""
    from crowdspark.io.tables import _list_array

    return pa.RecordBatch.from_pydict({"item": pa.array(np.asarray(block.item_ids, dtype=object), type=pa.string()),
                                       "resp": _list_array(resp)})


def state_table(frames: Frames, resp: Table, labels: Table, as_of: _dt.date) -> Table:
    """The state rows of the items fitted this run: their ``resp`` (``item``, ``resp`` (R)) with the sorted
    distinct days of their ``labels`` (``item``, ``day``), their number, and ``visited`` = ``as_of``; in the order
    of ``resp`` on the driver."""
    days = frames.grouped_sets(labels, "item", "day", ("days", "labels"))
    joined = frames.join(frames.adopt(resp, RESP), days, "item")
    return frames.select(frames.with_constant(joined, "visited", as_of.isoformat(), pa.string()),
                         STATE.names)


def write_state(frames: Frames, table: Table, directory: str) -> None:
    """Write an item state table as Parquet, sorted by item (within each Spark partition), so that the row
    groups' key statistics let a later night skip the groups without a touched item."""
    frames.write(table, directory, STATE, sort_by="item", rows_per_group=STATE_ROW_GROUP)


def revisit_summary(frames: Frames, rows: Table) -> tuple[int, int, list[str]]:
    """The number of state rows, their labels and their distinct ``days`` (one small job on Spark: days, not
    items, reach the driver)."""
    return frames.totals(rows, "labels", "days")


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


def previous_sums(frames: Frames, earlier: Table, rows: Table, encoding: Encoding, as_of: _dt.date, decay: float,
                  width: int) -> Stats:
    """The previous contributions of refitted items: their earlier labels (``item``, ``worker``, ``label``)
    with their state ``rows`` (``item``, ``visited``, ``resp`` (R = ``width``)), weighted by ``decay`` ** the
    days since their last fit.  Every item of ``rows`` must have labels in ``earlier``."""
    joined = frames.join(frames.select(earlier, ["item", "worker", "label"]),
                         frames.select(rows, ["item", "visited", "resp"]), "item")
    return frames.sum_groups(joined, "item", partial(_sums_of_frame, encoding=encoding, as_of=as_of, decay=decay,
                                                     width=width))


# ---- the index: where each item's newest state row is ------------------------------------------------------
def read_index(frames: Frames, run: str) -> Table:
    """The index of the run at ``run``: its Arrow IPC file (memory-mapped) or its Parquet folder, whichever the
    tables' engine reads best (Spark: the folder; on the driver: the file).

    Raises
    ------
    InputError
        When the run has no readable index (written by an older crowdspark: refit in full).
    """
    from crowdspark.io.files import files_for
    from crowdspark.io.paths import is_local, strip_file_scheme

    run = run.rstrip("/")
    files = files_for(run, None if frames.local else frames.spark)
    arrow, folder = f"{run}/{INDEX_FILE}", f"{run}/{INDEX_FOLDER}"
    try:
        if files.exists(arrow) and is_local(arrow) and (frames.local or not files.exists(folder)):
            return frames.adopt(pa.ipc.open_file(pa.memory_map(strip_file_scheme(arrow))).read_all(), INDEX)
        if files.exists(folder):
            return frames.read(folder, "the previous run's index")
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader's failure means the same to the user
        raise InputError(f"cannot read the item index of the previous run {run!r} ({type(exc).__name__}: "
                         f"{str(exc)[:300]}); run a full refit (--full-refit)") from exc
    raise InputError(f"the previous run {run!r} has no item index ({INDEX_FILE} or {INDEX_FOLDER}/): it was written "
                     "by an older crowdspark; run a full refit (--full-refit)")


def index_of(frames: Frames, state: Table, ordinal: int) -> Table:
    """The index of the items of a state table, all pointing at the run at position ``ordinal``."""
    return frames.with_constant(frames.select(state, ["item"]), "run", ordinal, pa.int32())


def updated_index(frames: Frames, index: Table, fitted: Table, ordinal: int) -> Table:
    """``index`` with the items of ``fitted`` (a table of distinct ``item``) pointing at the run at ``ordinal``."""
    fitted = frames.adopt(fitted, pa.schema([INDEX.field("item")]))
    return frames.union([frames.anti_join(index, fitted, "item"), index_of(frames, fitted, ordinal)])


def write_index(frames: Frames, index: Table, run: str) -> None:
    """Write ``index`` into the (staged) run at ``run``: one Arrow IPC file from the driver to a local path (read
    memory-mapped), else Parquet."""
    from crowdspark.io.paths import is_local, strip_file_scheme

    if frames.local and is_local(run):
        path = strip_file_scheme(f"{run.rstrip('/')}/{INDEX_FILE}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with pa.ipc.new_file(path, index.schema) as writer:
            writer.write_table(index)
        return
    frames.write(index, f"{run.rstrip('/')}/{INDEX_FOLDER}", INDEX)


def state_rows(frames: Frames, index: Table, touched: Table, runs: list[str]) -> Table:
    """The newest state rows of the ``touched`` items (a table with ``item``) that the chain ``runs`` fitted:
    only the state deltas of the runs the index names for them are read (on the driver: only their row groups
    that can hold a touched item)."""
    hits = frames.semi_join(index, touched, ["item"])
    ordinals = frames.distinct_values(hits, "run")
    if not ordinals:
        return frames.adopt(STATE.empty_table(), STATE)
    parts = [frames.with_constant(frames.read(state_path(runs[o]), "an earlier run's item state", schema=STATE,
                                              keys=frames.where(hits, "run", o)), "run", o, pa.int32())
             for o in ordinals]
    return frames.drop(frames.semi_join(frames.union(parts), hits, ["item", "run"]), "run")
