"""The Spark engine's item table written from the tasks that hold the blocks (a local master, a local Parquet
output) is the table Spark's own writer wrote before, and the local engine's; the relabel queue cut from the
rows those tasks keep is the queue Spark cuts from the written table."""

from __future__ import annotations

import json
import os
import zlib
from functools import partial

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from crowdspark.config import load_config
from crowdspark.engine.loop import finish_fn, fit
from crowdspark.engine.spark.engine import SparkEngine
from crowdspark.io.tables import item_schema, remove_unfinished_parts, write_parquet_part
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.pipeline import aggregate
from crowdspark.pipeline.quality import RELABEL_COLUMNS, relabel_fold, relabel_queue
from crowdspark.pipeline.tasks import block_item_batch
from tests.helpers import DATA, load_dataset

pytestmark = pytest.mark.spark

RTE = str(DATA / "rte" / "labels.csv"), str(DATA / "rte" / "truth.csv")


def _run(spark, engine: str, out, algorithm: str, *overrides: str) -> dict:
    config = load_config(overrides=["engine.small_input_bytes=0", "spark.partitions=3", *overrides],
                         algorithm=algorithm, engine_name=engine, seed=11)
    return aggregate(config, RTE[0], str(out), gold_path=RTE[1], spark=spark).summary


def _pandas(path) -> pd.DataFrame:
    return pd.read_parquet(path).sort_values("item").reset_index(drop=True)


def _spark_rows(spark, path, schema=None) -> list:
    reader = spark.read if schema is None else spark.read.schema(schema)
    return sorted(reader.parquet(str(path)).collect(), key=lambda row: row["item"])


#: what differs between two runs of the same input: times, memory, where the output is
_VOLATILE = {"timings", "seconds", "memory", "output"}


def _stable(value):
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _same_summary(a: dict, b: dict) -> None:
    assert json.dumps(_stable(a), sort_keys=True, default=str) == json.dumps(_stable(b), sort_keys=True, default=str)


@pytest.mark.parametrize("algorithm", ["ds", "dds"])
def test_tasks_write_the_table_spark_wrote_and_the_local_engine_writes(spark, tmp_path, monkeypatch, algorithm):
    new = _run(spark, "spark", tmp_path / "new", algorithm)
    with monkeypatch.context() as patch:  # today's path elsewhere: Spark's writer
        patch.setattr(SparkEngine, "write_items", lambda *args: None)
        old = _run(spark, "spark", tmp_path / "old", algorithm)
    _run(None, "local", tmp_path / "local", algorithm)
    names = sorted(os.listdir(tmp_path / "new" / "items"))
    # one file per partition of the engine's blocks: the pass's 3, dealt over the local master's slots
    assert names == [f"part-{p:05d}.parquet" for p in range(min(3, spark.sparkContext.defaultParallelism))]
    a, b, c = (_pandas(tmp_path / name / "items") for name in ("new", "old", "local"))
    assert len(a) == new["counts"]["items"]
    pd.testing.assert_frame_equal(a, b)  # columns, dtypes and values
    assert list(a.columns) == list(c.columns) and (a.dtypes == c.dtypes).all()
    assert a["item"].tolist() == c["item"].tolist() and a["label"].tolist() == c["label"].tolist()
    np.testing.assert_allclose(np.stack(a["posterior"]), np.stack(c["posterior"]), rtol=0, atol=1e-9)
    for schema in (None, spark.read.parquet(str(tmp_path / "old" / "items")).schema):
        frames = [spark.read.parquet(str(tmp_path / name / "items")) if schema is None else
                  spark.read.schema(schema).parquet(str(tmp_path / name / "items")) for name in ("new", "old", "local")]
        assert frames[0].schema == frames[1].schema == frames[2].schema
        assert _spark_rows(spark, tmp_path / "new" / "items", schema) == _spark_rows(spark, tmp_path / "old" / "items", schema)
    pd.testing.assert_frame_equal(_pandas(tmp_path / "new" / "relabel"), _pandas(tmp_path / "old" / "relabel"))
    _same_summary(new, old)


def test_csv_output_is_written_by_spark_as_before(spark, tmp_path):
    _run(spark, "spark", tmp_path / "csv", "ds", "output.format=csv")
    _run(spark, "spark", tmp_path / "parquet", "ds")
    names = os.listdir(tmp_path / "csv" / "items")
    assert "_SUCCESS" in names and all(n.endswith(".csv") for n in names if not n.startswith(("_", ".")))
    csv = pd.concat([pd.read_csv(tmp_path / "csv" / "items" / n, dtype=str) for n in names if n.endswith(".csv")])
    parquet = _pandas(tmp_path / "parquet" / "items")
    assert csv.sort_values("item")["label"].tolist() == parquet["label"].tolist()


def _fail_at(item: str, to_batch, block, result):
    """``to_batch``, except that the first attempt at the block whose first item is ``item`` fails."""
    from pyspark import TaskContext

    if TaskContext.get().attemptNumber() == 0 and str(block.item_ids[0]) == item:
        raise RuntimeError("injected failure after the partition's first block")
    return to_batch(block, result)


def test_a_retried_task_replaces_its_file_and_only_local_outputs_are_written_here(spark, tmp_path, monkeypatch):
    blocks, encoding = load_dataset("rte", max_labels=2000)
    assert len(blocks) >= 4
    engine = SparkEngine(spark.sparkContext.parallelize(blocks, 2))
    try:
        model = DawidSkene(len(encoding.workers), len(encoding.classes))
        params = fit(model, engine).params
        fn, schema = partial(finish_fn, model), item_schema({})
        to_batch = partial(block_item_batch, classes=encoding.classes, extras={})
        failing = partial(_fail_at, str(blocks[1].item_ids[0]), to_batch)  # partition 0's second block
        rows = engine.write_items(fn, params, failing, schema, str(tmp_path / "items")).rows
        assert rows == sum(len(block.item_ids) for block in blocks)
        assert sorted(os.listdir(tmp_path / "items")) == ["part-00000.parquet", "part-00001.parquet"]
        expected = engine.items(fn, params, to_batch, schema).toPandas().sort_values("item").reset_index(drop=True)
        pd.testing.assert_frame_equal(_pandas(tmp_path / "items"), expected)
        monkeypatch.chdir(tmp_path)  # a relative folder is the driver's
        assert engine.write_items(fn, params, to_batch, schema, "relative/items").rows == rows
        assert sorted(os.listdir(tmp_path / "relative" / "items")) == ["part-00000.parquet", "part-00001.parquet"]
        assert engine.write_items(fn, params, to_batch, schema, "hdfs://namenode/out/items") is None
        engine.local = False  # a cluster master: its executors do not share the driver's disk
        assert engine.write_items(fn, params, to_batch, schema, str(tmp_path / "cluster")) is None
        assert not (tmp_path / "cluster").exists()
    finally:
        engine.close()


def test_a_part_is_renamed_into_place_and_unfinished_files_are_removed(tmp_path):
    schema = pa.schema([("item", pa.string()), ("n", pa.int64())])
    batch = pa.RecordBatch.from_pydict({"item": ["a", "b"], "n": pa.array([1, 2], pa.int32())})
    assert write_parquet_part([batch], str(tmp_path), 3, schema, "7") == 2
    assert write_parquet_part([batch, batch], f"file://{tmp_path}", 3, schema, "8") == 4
    assert write_parquet_part([], str(tmp_path), 4, schema, "9") == 0
    assert sorted(os.listdir(tmp_path)) == ["part-00003.parquet", "part-00004.parquet"]
    table = pd.read_parquet(tmp_path)
    assert table["item"].tolist() == ["a", "b", "a", "b"] and str(table["n"].dtype) == "int64"

    def broken():
        yield batch
        raise RuntimeError("the task died")

    with pytest.raises(RuntimeError, match="the task died"):
        write_parquet_part(broken(), str(tmp_path), 5, schema, "10")
    (tmp_path / "_unfinished-00006-11.parquet").write_bytes(b"left by a killed attempt")
    assert remove_unfinished_parts(str(tmp_path)) == ["_unfinished-00006-11.parquet"]
    assert sorted(os.listdir(tmp_path)) == ["part-00003.parquet", "part-00004.parquet"]


def _without_head(write_items):
    """``SparkEngine.write_items`` that keeps nothing: ``relabel/`` is then cut by Spark from the written items."""
    return lambda engine, fn, value, to_batch, schema, directory, head=None: write_items(engine, fn, value, to_batch,
                                                                                         schema, directory)


@pytest.mark.parametrize("budget", [7, 500, 5000])
def test_the_queue_of_the_tasks_rows_is_sparks_queue_of_the_written_items(spark, tmp_path, monkeypatch, budget):
    """RTE has 800 items in 3 partitions: 500 is more than a partition holds, 5000 more than the table."""
    new = _run(spark, "spark", tmp_path / "new", "ds", f"relabel.budget={budget}")
    with monkeypatch.context() as patch:
        patch.setattr(SparkEngine, "write_items", _without_head(SparkEngine.write_items))
        old = _run(spark, "spark", tmp_path / "old", "ds", f"relabel.budget={budget}")
    queue, expected = (pd.read_parquet(tmp_path / name / "relabel") for name in ("new", "old"))
    assert len(queue) == min(budget, new["counts"]["items"])
    pd.testing.assert_frame_equal(queue, expected)  # rows, order, ranks, dtypes
    assert list(queue.columns) == list(RELABEL_COLUMNS)
    assert [f for f in os.listdir(tmp_path / "new" / "relabel") if f.endswith(".parquet")] == ["part-00000.parquet"]
    read = [spark.read.parquet(str(tmp_path / name / "relabel")) for name in ("new", "old")]
    assert read[0].schema == read[1].schema and read[0].collect() == read[1].orderBy("rank").collect()
    _same_summary(new, old)


#: a margin and a confidence from few values, NaN among them: most items tie on both, the item id decides
_TIED = np.array([0.0, 0.25, np.nan])


def _tied_batch(block, result):
    """The relabel columns of a block's items, ``margin`` and ``confidence`` a function of the item id only."""
    ids = [str(item) for item in block.item_ids]
    code = np.array([zlib.crc32(item.encode()) for item in ids], dtype=np.int64)
    return pa.RecordBatch.from_pydict({
        "item": pa.array(ids, pa.string()),
        "label": pa.array(np.where(code % 2 == 0, "a", "b").astype(object), pa.string()),
        "confidence": pa.array(_TIED[code % 3]),
        "n_labels": pa.array(code % 5, pa.int64()),
        "margin": pa.array(_TIED[(code // 3) % 3]),
        "relabel_gain": pa.array(code % 7 / 7.0),
    })


_TIED_SCHEMA = ("item string, label string, confidence double, n_labels long, margin double, "
                "relabel_gain double")


def test_each_partitions_first_rows_hold_the_queue_with_ties_nan_and_empty_partitions(spark, tmp_path):
    blocks, encoding = load_dataset("rte", max_labels=2000)
    n_items = sum(len(block.item_ids) for block in blocks)
    engine = SparkEngine(spark.sparkContext.parallelize(blocks, len(blocks) + 2))  # two partitions without a block
    try:
        model = DawidSkene(len(encoding.workers), len(encoding.classes))
        params = fit(model, engine).params
        fn = partial(finish_fn, model)
        for budget in (1, 13, len(blocks[0].item_ids) + 1, n_items + 1):
            folder = str(tmp_path / f"items-{budget}")
            written = engine.write_items(fn, params, _tied_batch, _TIED_SCHEMA, folder, partial(relabel_fold, budget))
            assert written.rows == n_items
            assert written.kept.num_rows <= budget * len(blocks)
            assert written.kept.column_names == list(RELABEL_COLUMNS[1:])
            queue = relabel_queue(written.kept, budget)
            expected = relabel_queue(spark.read.schema(_TIED_SCHEMA).parquet(folder), budget).toPandas()
            pd.testing.assert_frame_equal(queue, expected)
            assert len(queue) == min(budget, n_items)
        margins = queue["margin"].to_numpy()
        assert np.isnan(margins).sum() > 0 and not np.isnan(margins[:-np.isnan(margins).sum()]).any()
        assert queue.duplicated(["margin", "confidence"]).sum() > n_items / 2  # the item id orders most rows
        assert engine.write_items(fn, params, _tied_batch, _TIED_SCHEMA, str(tmp_path / "plain")).kept is None
    finally:
        engine.close()
