"""The item table built from a block's results (``crowdspark.io.tables.item_batch``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from crowdspark.io.tables import item_batch, item_frame
from crowdspark.models.base import ItemResult


def _result(n: int) -> ItemResult:
    rng = np.random.default_rng(n)
    posterior = rng.dirichlet(np.ones(3), n) if n else np.zeros((0, 3))
    return ItemResult(
        posterior=posterior,
        label=posterior.argmax(axis=1).astype(np.int32) if n else np.zeros(0, np.int32),
        extra={"level": np.arange(n, dtype=np.int64) % 2, "level_posterior": np.full((n, 2), 0.5), "epsilon": np.ones(n)},
    )


@pytest.mark.parametrize("n", [0, 1, 5])
def test_item_batch_columns_types_and_values(n):
    result = _result(n)
    ids = np.array([f"item{i}" for i in range(n)], dtype=object)
    batch = item_batch(ids, result, ("a", "b", "c"), {"level": "int", "level_posterior": "array<double>", "epsilon": "double"})
    assert batch.schema.names == ["item", "label", "confidence", "posterior", "level", "level_posterior", "epsilon"]
    assert batch.schema.field("level").type == pa.int32()  # the model's declared Spark type, not numpy's int64
    assert batch.schema.field("posterior").type == pa.list_(pa.float64())
    assert batch.num_rows == n
    assert batch.column("item").to_pylist() == ids.tolist()
    assert batch.column("label").to_pylist() == [("a", "b", "c")[k] for k in result.label]
    posterior = batch.column("posterior").to_pylist()
    assert posterior == result.posterior.tolist()
    assert batch.column("confidence").to_pylist() == [row[k] for row, k in zip(posterior, result.label)]
    frame = item_frame(ids, result, ("a", "b", "c"))
    assert frame.shape == (n, 7)
    if n:
        np.testing.assert_array_equal(np.stack(frame["level_posterior"]), result.extra["level_posterior"])
