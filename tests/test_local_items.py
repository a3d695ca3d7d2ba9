"""The local engine's item table stays in Arrow from the blocks to the written files: the relabel queue cut
from it, and the table written, are those of the pandas table the API returns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from crowdspark.config import load_config
from crowdspark.pipeline import aggregate, aggregate_frames
from crowdspark.pipeline.quality import relabel_fold, relabel_queue
from tests.helpers import DATA


def _items(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "item": [f"i{j:05d}" for j in rng.permutation(n)],
        "label": rng.choice(["a", "b"], n),
        "confidence": rng.choice([0.5, 0.6, np.nan], n),
        "n_labels": rng.integers(1, 5, n),
        "margin": rng.choice([0.1, 0.3, np.nan], n),
        "relabel_gain": rng.choice([0.1, 0.2, np.nan], n),
    })


def _arrow(items: pd.DataFrame, nan_as_null: bool) -> pa.Table:
    return (pa.Table.from_pandas(items, preserve_index=False) if nan_as_null
            else pa.table({c: pa.array(items[c].to_numpy()) for c in items.columns}))


@pytest.mark.parametrize("budget", [0, 7, 300])
@pytest.mark.parametrize("nan_as_null", [False, True])
def test_arrow_relabel_queue_is_the_pandas_queue(budget, nan_as_null):
    items = _items(2000, seed=budget)
    table = _arrow(items, nan_as_null)
    queue = relabel_queue(table, budget)
    assert len(queue) == (budget or len(items))
    pd.testing.assert_frame_equal(queue, relabel_queue(items, budget))


@pytest.mark.parametrize("budget", [1, 7, 300, 5000])
@pytest.mark.parametrize("nan_as_null", [False, True])
def test_the_queue_of_the_rows_kept_by_folding_batches_is_the_whole_tables(budget, nan_as_null):
    items = _items(2000, seed=budget)
    table = _arrow(items, nan_as_null)
    cuts = np.sort(np.random.default_rng(budget).choice(np.arange(1, len(items)), 6, replace=False))
    kept = None
    for start, stop in zip([0, *cuts], [*cuts, len(items)]):
        kept = relabel_fold(budget, kept, table.slice(start, stop - start).combine_chunks().to_batches()[0])
    assert kept.num_rows == min(budget, len(items))
    pd.testing.assert_frame_equal(relabel_queue(kept, budget), relabel_queue(items, budget))


def test_written_items_are_the_returned_items(tmp_path):
    path = str(DATA / "rte" / "labels.csv")
    labels = pd.read_csv(path, dtype=str)
    config = load_config(engine_name="local")
    run = aggregate(config, str(path), output_dir=str(tmp_path / "out"))
    written = pd.read_parquet(tmp_path / "out" / "items")
    returned = aggregate_frames(config, labels).items
    assert isinstance(run.items, pd.DataFrame)
    assert list(written.columns) == list(returned.columns)
    assert written["item"].tolist() == returned["item"].tolist() == run.items["item"].tolist()
    assert written["label"].tolist() == returned["label"].tolist()
    np.testing.assert_allclose(np.stack(written["posterior"]), np.stack(returned["posterior"]), atol=1e-12)
    queue = pd.read_parquet(tmp_path / "out" / "relabel")
    expected = relabel_queue(returned, config.relabel.budget)
    assert queue["item"].tolist() == expected["item"].tolist()
