"""The files a local night writes into ``_incremental/``, row for row: the item state (one Parquet file sorted by
item, the Arrow schema of crowdspark.pipeline.item_state.STATE) and the index (one Arrow IPC file whose rows are
the previous index without the night's items, then those items in the order the night first read them), each
derived here from the lake and the night's ``items/``."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from crowdspark.config import load_config
from crowdspark.lake import LakeSpec
from crowdspark.pipeline import aggregate
from crowdspark.pipeline.item_state import INDEX, STATE, STATE_ROW_GROUP
from tests.helpers import written_lake

SPEC = LakeSpec(days=3, items_per_day=60, labels_per_item=4, n_workers=10, n_classes=3, revisit=0.4,
                new_workers_per_day=1, seed=5)


def expected_state(data, day: str, items: pd.DataFrame) -> pd.DataFrame:
    """The state rows of the night's items (``items/``): the days and number of their labels up to ``day``, the
    night as ``visited``, their posteriors (DS's responsibilities), sorted by item."""
    labels = data.labels[(data.labels["date"] <= day) & data.labels["item"].isin(items["item"])]
    grouped = labels.groupby("item")["date"]
    frame = pd.DataFrame({"days": grouped.apply(lambda d: sorted(set(d))), "labels": grouped.size()})
    frame = frame.join(items.set_index("item")["posterior"].rename("resp")).reset_index().sort_values("item")
    return frame.assign(visited=day)[STATE.names].reset_index(drop=True)


def read_index(run: str) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(os.path.join(run, "_incremental", "index.arrow"))).read_all()


def test_a_local_nights_state_and_index_files_hold_the_rows_derived_from_the_lake(tmp_path):
    labels, _, data = written_lake(tmp_path, SPEC)
    config = load_config(overrides=["input.date_column=date", "incremental.mode=on", "ds.tol=1e-10"],
                         algorithm="ds", engine_name="local")
    out, index = tmp_path / "runs", None
    for night in range(SPEC.days):
        day = SPEC.date(night)
        aggregate(config, labels, str(out), None, None, run_id=day)
        run = os.path.join(out, f"run_id={day}")
        items = pd.read_parquet(os.path.join(run, "items"))
        folder = os.path.join(run, "_incremental", "items")
        assert os.listdir(folder) == ["part-00000.parquet"]
        handle = pq.ParquetFile(os.path.join(folder, "part-00000.parquet"))
        assert handle.schema_arrow == STATE and handle.schema_arrow.metadata is None
        assert all(handle.metadata.row_group(g).num_rows <= STATE_ROW_GROUP for g in range(handle.num_row_groups))
        state = handle.read().to_pandas()
        expected = expected_state(data, day, items)
        assert state["item"].tolist() == expected["item"].tolist()
        for column in ("days", "resp"):
            assert [list(v) for v in state[column]] == [list(v) for v in expected[column]], column
        assert state[["labels", "visited"]].equals(expected[["labels", "visited"]])
        written = read_index(run)
        assert written.schema == INDEX and written.schema.metadata is None
        if night == 0:  # a full refit: every item, in the order of its items/ table, at the run itself
            rows = list(zip(items["item"], [0] * len(items)))
        else:  # the night's items, in the order its new labels name them, at its place in the chain
            touched = list(pd.unique(data.labels.loc[data.labels["date"] == day, "item"]))
            assert sorted(touched) == sorted(items["item"])
            rows = [(i, r) for i, r in index if i not in set(touched)] + [(i, night) for i in touched]
        assert list(zip(written["item"].to_pylist(), written["run"].to_pylist())) == rows
        index = rows
    assert np.isin(data.labels["item"].unique(), [i for i, _ in index]).all()
