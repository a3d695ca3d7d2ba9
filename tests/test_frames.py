"""The table operations of an incremental night (crowdspark.pipeline.frames): what each gives on the driver, with
pandas and pyarrow tables, and that Spark gives the same rows."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crowdspark.errors import InputError
from crowdspark.pipeline.frames import LocalFrames, SparkFrames, ddl, frames_for

LABELS = pd.DataFrame({"item": ["b", "a", "b", "c", "a", "b"], "worker": ["w1", "w2", "w2", "w1", "w1", "w3"],
                       "label": ["x", "y", None, "x", "y", "x"],
                       "day": ["d2", "d1", "d1", "d3", "d1", "d2"]})
STATE = pa.schema([("item", pa.string()), ("days", pa.list_(pa.string())), ("labels", pa.int64())])
INDEX = pa.schema([("item", pa.string()), ("run", pa.int32())])


def index_table() -> pa.Table:
    return pa.table({"item": ["a", "b", "c", "d"], "run": pa.array([0, 1, 1, 0], type=pa.int32())}, schema=INDEX)


def rows(table) -> list[tuple]:
    """The rows of any table, as sorted tuples (lists as tuples)."""
    frame = table if isinstance(table, pd.DataFrame) else (table.to_pandas() if hasattr(table, "schema") and
                                                              isinstance(table, pa.Table) else table.toPandas())
    return sorted(tuple(tuple(v) if isinstance(v, (list, np.ndarray)) else v for v in r)
                  for r in frame.itertuples(index=False))


def outcomes(frames, tmp_path) -> dict:
    """Every operation of ``frames`` on the same small tables, as rows."""
    labels = frames.adopt(LABELS, pa.schema([(c, pa.string()) for c in LABELS.columns]))
    index = frames.adopt(index_table(), INDEX)
    touched = frames.distinct(labels, "item")
    days = frames.grouped_sets(labels, "item", "day", ("days", "labels"))
    folder = str(tmp_path / type(frames).__name__)
    frames.write(days, folder, STATE, sort_by="item", rows_per_group=2)
    written = frames.written(days, folder)
    keys = frames.where(index, "run", 1)
    read = frames.semi_join(frames.read(folder, "the state", keys=keys, schema=STATE), keys, ["item"])
    marked = frames.with_constant(frames.select(index, ["item"]), "run", 7, pa.int32())
    return {
        "touched": rows(touched),
        "days": rows(days),
        "written": rows(written),
        "read": rows(read),
        "no_rows": rows(frames.no_rows(folder)),
        "semi": rows(frames.semi_join(index, frames.where(touched, "item", "a"), ["item"])),
        "semi2": rows(frames.semi_join(index, keys, ["item", "run"])),
        "anti": rows(frames.anti_join(index, touched, "item")),
        "join": rows(frames.join(frames.select(labels, ["item", "worker"]), days, "item")),
        "union": rows(frames.union([index, marked])),
        "drop": rows(frames.drop(index, "run")),
        "values": frames.distinct_values(labels, "label", limit=10),
        "runs": frames.distinct_values(index, "run"),
        "counts": dict(sorted(frames.count_by(labels, "day").items())),
        "totals": frames.totals(days, "labels", "days"),
        "sums": {k: v.tolist() for k, v in frames.sum_groups(
            frames.select(labels, ["item", "day"]), "item", _sums).items()},
        "small": rows(frames.to_pandas(index)),
        "empty": rows(frames.adopt(STATE.empty_table(), STATE)),
    }


def _sums(frame: pd.DataFrame) -> dict:
    return {"n": np.array([len(frame), frame["item"].nunique()], dtype=np.float64)}


def test_local_frames_on_pandas_and_arrow_tables(tmp_path):
    found = outcomes(LocalFrames(), tmp_path)
    assert found["touched"] == [("a",), ("b",), ("c",)]
    assert found["days"] == found["written"] == [("a", ("d1",), 2), ("b", ("d1", "d2"), 3), ("c", ("d3",), 1)]
    assert found["read"] == [("b", ("d1", "d2"), 3), ("c", ("d3",), 1)]
    assert found["no_rows"] == [] and found["semi"] == [("a", 0)]
    assert found["semi2"] == [("b", 1), ("c", 1)] and found["anti"] == [("d", 0)]
    assert found["join"] == sorted((i, w, ("d1",) if i == "a" else ("d1", "d2") if i == "b" else ("d3",),
                                    {"a": 2, "b": 3, "c": 1}[i]) for i, w in zip(LABELS["item"], LABELS["worker"]))
    assert found["union"] == sorted([("a", 0), ("b", 1), ("c", 1), ("d", 0)] + [(i, 7) for i in "abcd"])
    assert found["drop"] == [("a",), ("b",), ("c",), ("d",)]
    assert found["values"] == ["x", "y"] and found["runs"] == [0, 1]
    assert found["counts"] == {"d1": 3, "d2": 2, "d3": 1}
    assert found["totals"] == (3, 6, ["d1", "d2", "d3"])
    assert found["sums"] == {"n": [6.0, 3.0]}


def test_local_frames_keep_the_kind_and_order_of_their_first_table(tmp_path):
    frames = LocalFrames()
    touched = frames.distinct(LABELS, "item")
    assert isinstance(touched, pd.DataFrame) and list(touched["item"]) == ["b", "a", "c"]
    of_items = frames.semi_join(LABELS, touched.iloc[:1], ["item"])
    assert list(of_items.index) == [0, 1, 2] and list(of_items["day"]) == ["d2", "d1", "d2"]
    index = index_table()
    updated = frames.union([frames.anti_join(index, touched, "item"),
                            frames.with_constant(frames.select(touched, ["item"]), "run", 2, pa.int32())])
    assert isinstance(updated, pa.Table) and updated.schema == INDEX and updated.schema.metadata is None
    assert updated.to_pydict() == {"item": ["d", "b", "a", "c"], "run": [0, 2, 2, 2]}
    days = frames.grouped_sets(LABELS, "item", "day", ("days", "labels"))
    joined = frames.join(frames.adopt(pd.DataFrame({"item": ["c", "z", "a"]}), pa.schema([("item", pa.string())])),
                         days, "item")
    assert joined.column_names == ["item", "days", "labels"] and joined["item"].to_pylist() == ["c", "a"]


def test_local_frames_write_one_sorted_file_of_row_groups_and_read_only_the_groups_of_their_keys(tmp_path):
    frames = LocalFrames()
    table = pa.table({"item": [f"i{n:03d}" for n in range(10)][::-1], "labels": pa.array(range(10), pa.int64())})
    schema = table.schema
    frames.write(table, str(tmp_path / "s"), schema, sort_by="item", rows_per_group=3)
    assert frames.written(table, str(tmp_path / "s")) is table
    handle = pq.ParquetFile(os.path.join(tmp_path / "s", "part-00000.parquet"))
    assert handle.num_row_groups == 4 and handle.read()["item"].to_pylist() == sorted(table["item"].to_pylist())
    keys = pd.DataFrame({"item": ["i004"]})
    assert frames.read(str(tmp_path / "s"), "the state", keys=keys, schema=schema)["item"].to_pylist() == ["i004"]
    assert len(frames.read(str(tmp_path / "s"), "x", keys=pd.DataFrame({"item": ["zz"]}), schema=schema)) == 0
    with pytest.raises(InputError, match=r"cannot read the state at .*missing.*run a full refit"):
        frames.read(str(tmp_path / "missing"), "the state", keys=keys, schema=schema)


def test_ddl_of_arrow_schemas():
    assert ddl(INDEX) == "item string, run int"
    assert ddl(pa.schema([("r", pa.list_(pa.float64())), ("n", pa.int64())])) == "r array<double>, n long"
    with pytest.raises(ValueError, match="no Spark DDL for the Arrow type bool"):
        ddl(pa.schema([("b", pa.bool_())]))
    assert isinstance(frames_for(False), LocalFrames) and isinstance(frames_for(True, None), SparkFrames)


@pytest.mark.spark
@pytest.mark.slow
def test_spark_frames_give_the_local_frames_rows(spark, tmp_path):
    assert outcomes(SparkFrames(spark), tmp_path) == outcomes(LocalFrames(), tmp_path)
