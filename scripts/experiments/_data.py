"""Load a dataset of ``data/<name>`` into blocks (experiment helper, not library code)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from crowdspark.block import Block, build_blocks

DATA = Path(__file__).resolve().parents[2] / "data"


def load(name: str, max_labels: int = 100_000) -> tuple[list[Block], int, int]:
    """Blocks, K and C of ``data/<name>``."""
    df = pd.read_csv(DATA / name / "labels.csv", dtype=str)
    gold = pd.read_csv(DATA / name / "truth.csv", dtype=str)
    workers = sorted(df.worker.unique())
    classes = sorted(df.label.unique(), key=float)
    w = pd.Index(workers).get_indexer(df.worker)
    lab = pd.Index(classes).get_indexer(df.label)
    g = df.item.map(dict(zip(gold.item, gold.truth)))
    t = pd.Index(classes).get_indexer(g.fillna("__"))
    return build_blocks(df.item.values, w, lab, t, max_labels=max_labels), len(workers), len(classes)
