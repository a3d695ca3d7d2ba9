"""The one-pass Spark reader (crowdspark.engine.spark.blocks) builds the local engine's blocks, and its errors."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from crowdspark.block import GoldSplit, build_blocks
from crowdspark.io.rules import MAX_CLASSES, Encoding, order_classes
from crowdspark.engine.spark.blocks import (
    PartitionSummary,
    _partition_pass,
    _remap_partition,
    merge_summaries,
    remapped_handles,
)
from tests.helpers import DATA

_FIELDS = ("item_ids", "item_keys", "offsets", "item_of_label", "worker", "label", "truth", "fixed")


class _Value:
    def __init__(self, value):
        self.value = value


def _rte_with_gold() -> pd.DataFrame:
    frame = pd.read_csv(DATA / "rte" / "labels.csv", dtype=str)
    gold = pd.read_csv(DATA / "rte" / "truth.csv", dtype=str)
    frame["truth"] = frame["item"].map(dict(zip(gold["item"], gold["truth"])))
    frame.loc[frame["item"].str.endswith("7"), "truth"] = None  # some items without gold
    return frame


def _passed(frame: pd.DataFrame, parts: int, max_labels: int, split: GoldSplit, spill_to=None) -> list[list]:
    """Each partition's rows (summary first) as the pass emits them, the frame split by item like a shuffle."""
    out = []
    shuffled = frame.sample(frac=1.0, random_state=1)
    part = shuffled["item"].map(hash) % parts
    for p in range(parts):
        table = pa.Table.from_pandas(shuffled[part == p], preserve_index=False)
        batches = iter(table.to_batches(max_chunksize=777))
        out.append([(b.column(0)[0].as_py(), b.column(1)[0].as_py())
                    for b in _partition_pass(batches, max_labels, split, spill_to)])
    return out


def _assert_same_blocks(got, expected) -> None:
    assert len(got) == len(expected) > 1
    for a, b in zip(got, expected):
        for name in _FIELDS:
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert a.duplicate_pairs == b.duplicate_pairs


@pytest.mark.parametrize("classes_order", ["sorted", "reversed"])
def test_the_pass_and_the_remap_build_the_local_engines_blocks(classes_order):
    """Partition dictionaries, then the run's encoding: the blocks of build_blocks, gold in the fit and held out,
    also when the configured class order is not the partitions' sorted order (labels re-sorted)."""
    frame = _rte_with_gold()
    split = GoldSplit(fit_fraction=0.5, seed=3)
    classes = order_classes(list(frame["label"].unique()))
    if classes_order == "reversed":
        classes = classes[::-1]
    enc = Encoding(tuple(sorted(frame["worker"].unique())), tuple(classes))
    parts = _passed(frame, 3, 400, split)
    summaries = [pickle.loads(rows[0][1]) for rows in parts]
    assert all(isinstance(s, PartitionSummary) and s.built for s in summaries)
    merged = merge_summaries(summaries)
    assert merged.workers.to_pylist() == list(enc.workers)
    assert merged.rows == len(frame) and merged.items == frame["item"].nunique()
    assert merged.gold_items == frame.dropna(subset=["truth"])["item"].nunique()
    assert merged.first_item == min(frame["item"])
    broadcast = _Value((pa.array(enc.workers, pa.string()), enc.classes))
    got = [b for rows in parts for b in _remap_partition(broadcast, iter(rows))]
    truth = enc.class_codes(frame["truth"].fillna("\0none").to_numpy(dtype=object))
    expected = []
    for rows in parts:  # the local engine's blocks of each partition's items
        items = {i for b in _remap_partition(broadcast, iter(rows)) for i in b.item_ids}
        mask = frame["item"].isin(items).to_numpy()
        expected += build_blocks(
            frame["item"].to_numpy(dtype=object)[mask], enc.worker_codes(frame["worker"].to_numpy(dtype=object)[mask]),
            enc.class_codes(frame["label"].to_numpy(dtype=object)[mask]), truth[mask], max_labels=400, split=split,
        )
    _assert_same_blocks(got, expected)
    assert any((b.fixed >= 0).any() for b in got) and any((b.truth >= 0).any() for b in got)


def test_spilled_blocks_are_remapped_when_a_worker_loads_them(tmp_path):
    """With a spill folder, the pass writes its blocks there and emits handles; the driver writes one remap file
    per partition, and loading a handle gives the block of the in-memory path; no pickled block is emitted."""
    from crowdspark.engine.spark.resident import BlockHandle, forget, make_spill_directory, resolve

    frame = _rte_with_gold()
    split = GoldSplit(fit_fraction=0.5, seed=3)
    classes = order_classes(list(frame["label"].unique()))[::-1]  # labels re-sorted within items on load
    enc = Encoding(tuple(sorted(frame["worker"].unique())), tuple(classes))
    broadcast = _Value((pa.array(enc.workers, pa.string()), enc.classes))
    expected = [b for rows in _passed(frame, 3, 400, split) for b in _remap_partition(broadcast, iter(rows))]
    directory = make_spill_directory(str(tmp_path), "engine")
    spilled = _passed(frame, 3, 400, split, (directory, "engine"))
    partitions = [(pickle.loads(rows[0][1]), [pickle.loads(payload) for _, payload in rows[1:]]) for rows in spilled]
    assert all(isinstance(h, BlockHandle) and h.remap is None for _, handles in partitions for h in handles)
    handles = [h for part in remapped_handles(partitions, enc) for h in part]
    assert len({h.remap for h in handles}) == 3 and len(list(Path(directory).glob("*.remap.npz"))) == 3
    try:
        _assert_same_blocks([resolve(h) for h in handles], expected)
    finally:
        forget("engine")


def test_a_partition_with_nulls_or_too_many_labels_builds_nothing_and_counts():
    frame = pd.DataFrame({"item": ["a", "b", None, "c"], "worker": ["w", None, "w", "v"], "label": list("xyxy")})
    rows = list(_partition_pass(iter(pa.Table.from_pandas(frame).to_batches()), 100, None))
    assert len(rows) == 1
    summary = pickle.loads(rows[0].column(1)[0].as_py())
    assert summary.nulls == {"item": 1, "worker": 1, "label": 0} and not summary.built and summary.rows == 4
    n = MAX_CLASSES + 5
    many = pd.DataFrame({"item": ["a"] * n, "worker": ["w"] * n, "label": [str(i) for i in range(n)]})
    rows = list(_partition_pass(iter(pa.Table.from_pandas(many).to_batches()), 100, None))
    summary = pickle.loads(rows[0].column(1)[0].as_py())
    assert len(rows) == 1 and not summary.built and len(summary.labels) == MAX_CLASSES + 1
    empty = list(_partition_pass(iter([]), 100, None))
    assert [(b.column(0)[0].as_py(), b.column(1)[0].as_py()) for b in empty] == [
        (0, pickle.dumps(PartitionSummary(rows=0, nulls={"item": 0, "worker": 0, "label": 0}), protocol=5))]
    broadcast = _Value((pa.array(["w"], pa.string()), ("x", "y")))
    assert list(_remap_partition(broadcast, iter([(0, empty[0].column(1)[0].as_py())]))) == []


def test_the_footers_count_local_parquet_rows_and_anything_else_is_counted_by_spark(spark, tmp_path):
    import pyarrow.parquet as pq

    from crowdspark.pipeline.prepare import _row_count, filtered_frame, footer_row_count

    frame = pd.read_csv(DATA / "rte" / "labels.csv", dtype=str)
    folder = tmp_path / "labels"
    folder.mkdir()
    for part, rows in enumerate((frame.iloc[:500], frame.iloc[500:])):
        pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), folder / f"part-{part}.parquet")
    raw = spark.read.parquet(str(folder))
    assert footer_row_count(raw, "parquet") == raw.count() == len(frame)
    assert footer_row_count(raw, "csv") is None
    selected = filtered_frame(raw, "label = '1'")
    assert _row_count(selected, selected, raw, False, "parquet") == selected.count() < len(frame)
    assert _row_count(raw, raw, raw, False, "parquet") == len(frame)


@pytest.mark.spark
def test_one_wave_reads_raise_the_split_size_only_when_nobody_set_it(spark, tmp_path):
    from crowdspark.engine.spark.blocks import LOCAL_MAX_SPLIT_BYTES, one_wave_reads

    key = "spark.sql.files.maxPartitionBytes"
    assert spark.conf.get(key) == "134217728b"  # Spark's default, as the session reports it
    # four files of ~300 KB: with a 100 KB split Spark reads them in more tasks than cores
    frame = pd.DataFrame({"item": [f"i{i:07d}" for i in range(40_000)], "worker": "w", "label": "a"})
    for part in range(4):
        frame.to_parquet(tmp_path / f"part-{part}.parquet")
    spark.conf.set("spark.sql.files.openCostInBytes", "1")
    try:
        with one_wave_reads(spark):
            assert spark.conf.get(key) == str(LOCAL_MAX_SPLIT_BYTES)
            tasks = spark.read.parquet(str(tmp_path)).rdd.getNumPartitions()
        assert spark.conf.get(key) == "134217728b"
        assert tasks == spark.sparkContext.defaultParallelism
        spark.conf.set(key, "100k")
        with one_wave_reads(spark):  # the session's own value is kept
            assert spark.conf.get(key) == "100k"
            assert spark.read.parquet(str(tmp_path)).rdd.getNumPartitions() > spark.sparkContext.defaultParallelism
        assert spark.conf.get(key) == "100k"
    finally:
        spark.conf.unset(key)
        spark.conf.unset("spark.sql.files.openCostInBytes")


@pytest.mark.spark
@pytest.mark.parametrize("tasks", [1, 2, 3, 9])
def test_handles_are_dealt_as_a_session_regroups_them(spark, tasks):
    from crowdspark.engine.spark.resident import BlockHandle
    from crowdspark.engine.spark.engine import _regroup
    from crowdspark.engine.spark.blocks import handle_rdd

    sizes = [3, 0, 2, 5, 1]
    partitions = [[BlockHandle(f"e/{p}-{j}", f"/x/{p}-{j}.npz") for j in range(n)] for p, n in enumerate(sizes)]
    dealt = handle_rdd(spark.sparkContext, partitions, tasks)
    assert dealt.getNumPartitions() == min(tasks, len(sizes))
    if tasks < len(sizes):  # what the session's shuffle makes of the pass's partitions, in the same order
        regrouped = _regroup(spark.sparkContext.parallelize(partitions, len(sizes)).flatMap(lambda x: x), tasks)
        assert dealt.glom().collect() == regrouped.glom().collect()
    assert sorted(h.key for h in dealt.collect()) == sorted(h.key for part in partitions for h in part)
