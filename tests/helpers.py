"""Small helpers shared by tests (not fixtures)."""

from __future__ import annotations

import pickle
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from crowdspark.block import Block, GoldSplit, build_blocks
from crowdspark.io.rules import Encoding, order_classes

DATA = Path(__file__).resolve().parents[1] / "data"


def load_dataset(name: str, max_labels: int = 2_000_000) -> tuple[list[Block], Encoding]:
    """Blocks and encoding of a bundled dataset, with its gold labels."""
    labels = pd.read_csv(DATA / name / "labels.csv", dtype=str)
    gold = pd.read_csv(DATA / name / "truth.csv", dtype=str)
    return frames_to_blocks(labels, gold, max_labels)


def frames_to_blocks(labels: pd.DataFrame, gold: pd.DataFrame | None = None, max_labels: int = 2_000_000,
                     split: GoldSplit | None = None):
    enc = Encoding(
        workers=tuple(sorted(labels["worker"].unique())),
        classes=tuple(order_classes(list(labels["label"].unique()))),
    )
    truth = None
    if gold is not None:
        truth = labels["item"].map(dict(zip(gold["item"], gold["truth"]))).to_numpy(dtype=object)
        truth = enc.class_codes(np.where(pd.isna(truth), "\0none", truth).astype(object))
    blocks = build_blocks(
        labels["item"].to_numpy(dtype=object),
        enc.worker_codes(labels["worker"].to_numpy(dtype=object)),
        enc.class_codes(labels["label"].to_numpy(dtype=object)),
        truth,
        max_labels=max_labels,
        split=split,
    )
    return blocks, enc


def fitted_answers(model, blocks, engine=None):
    """The fit of ``model`` on ``engine`` (a local engine over ``blocks`` by default) and its ``(ids, labels,
    posteriors)`` sorted by item id."""
    from crowdspark.engine.local import LocalEngine
    from crowdspark.engine.loop import finish_fn, fit

    engine = engine or LocalEngine(blocks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fit(model, engine)
    if isinstance(engine, LocalEngine):
        pairs = engine.map_items(partial(finish_fn, model), result.params)
    else:
        pairs = [pickle.loads(row[0]) for row in engine.item_blobs(partial(finish_fn, model), result.params).collect()]
    ids = np.concatenate([b.item_ids for b, _ in pairs]).astype(str)
    labels = np.concatenate([r.label for _, r in pairs])
    post = np.concatenate([r.posterior for _, r in pairs])
    order = np.argsort(ids, kind="stable")
    return result, ids[order], labels[order], post[order]


def error_rate(results) -> float:
    """Error over gold items of ``[(block, ItemResult), ...]``."""
    wrong = sum(int(((b.truth >= 0) & (r.label != b.truth)).sum()) for b, r in results)
    total = sum(int((b.truth >= 0).sum()) for b, _ in results)
    return wrong / total


def by_item(results) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Item ids, labels and posteriors of ``[(block, ItemResult), ...]``, sorted by item id."""
    ids = np.concatenate([b.item_ids for b, _ in results])
    labels = np.concatenate([r.label for _, r in results])
    post = np.concatenate([r.posterior for _, r in results])
    order = np.argsort(ids.astype(str), kind="stable")
    return ids[order], labels[order], post[order]


def written_lake(root, spec) -> tuple[str, str, object]:
    """``crowdspark.lake`` lake of ``spec`` written under ``root``: ``(labels folder, gold path, Lake)``."""
    from crowdspark.lake import make_lake, write_lake

    data = make_lake(spec)
    gold = write_lake(data, str(root / "labels"))
    return str(root / "labels"), gold, data
