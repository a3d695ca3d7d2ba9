"""The reproduction's datasets: bundled folders and the regenerated Synthetic set, with Table 1's statistics.

A dataset folder holds ``labels.csv`` (item, worker, label) and ``truth.csv`` (item, truth), read as strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from crowdspark.errors import ConfigError

__all__ = [
    "DEFAULT_DATASETS",
    "MIN_WORKER_LABELS",
    "SYNTHETIC",
    "Dataset",
    "load_folder",
    "synthetic_dataset",
    "resolve_datasets",
    "worker_accuracy",
    "dataset_stats",
]

DEFAULT_DATASETS = ("rte", "web_search_filtered", "web_search", "synthetic", "temp", "bluebird")
SYNTHETIC = "synthetic"
#: the paper's Web Search filter: workers with fewer labels are not shown as "single workers"
MIN_WORKER_LABELS = 30


@dataclass(frozen=True)
class Dataset:
    """Labels and gold of one dataset.

    Attributes
    ----------
    name : str
    labels : DataFrame
        String columns ``item``, ``worker``, ``label``.
    gold : DataFrame
        String columns ``item``, ``truth``.
    source : str
        Where it came from (a folder, or the generator and its seed).
    """

    name: str
    labels: pd.DataFrame = field(repr=False)
    gold: pd.DataFrame = field(repr=False)
    source: str = ""


def load_folder(path: str | Path, name: str | None = None) -> Dataset:
    """A dataset folder with ``labels.csv`` (item, worker, label) and ``truth.csv`` (item, truth).

    Raises
    ------
    ConfigError
        The folder or one of the two files does not exist.
    """
    folder = Path(path)
    missing = [f for f in ("labels.csv", "truth.csv") if not (folder / f).is_file()]
    if missing:
        raise ConfigError(
            f"dataset folder must contain labels.csv and truth.csv, but {folder} lacks {', '.join(missing)}"
        )
    labels = pd.read_csv(folder / "labels.csv", dtype=str)
    gold = pd.read_csv(folder / "truth.csv", dtype=str)
    return Dataset(name or folder.name, labels, gold[["item", "truth"]], str(folder))


def synthetic_dataset(seed: int = 0) -> Dataset:
    """The paper's Synthetic set (section 5.1.4) from :func:`crowdspark.synthetic.paper_synthetic`."""
    from crowdspark.synthetic import paper_synthetic

    labels, truth, _ = paper_synthetic(seed)
    return Dataset(SYNTHETIC, labels, truth[["item", "truth"]], f"paper_synthetic(seed={seed})")


def resolve_datasets(names: Sequence[str], data_root: str | Path, synthetic_seed: int = 0) -> list[Dataset]:
    """Load each named dataset: ``"synthetic"``, an existing folder path, or a folder under ``data_root``."""
    out = []
    for name in names:
        if name == SYNTHETIC:
            out.append(synthetic_dataset(synthetic_seed))
        elif Path(name).is_dir():
            out.append(load_folder(name))
        else:
            out.append(load_folder(Path(data_root) / name, name))
    return out


def worker_accuracy(dataset: Dataset) -> pd.DataFrame:
    """Empirical accuracy of each worker on the gold items.

    Returns
    -------
    DataFrame
        Index ``worker``; columns ``n_labels`` (labels on gold items) and ``accuracy``; sorted by accuracy,
        best first.
    """
    merged = dataset.labels.merge(dataset.gold, on="item", how="inner")
    merged["correct"] = merged["label"] == merged["truth"]
    table = merged.groupby("worker")["correct"].agg(n_labels="size", accuracy="mean")
    return table.sort_values(["accuracy", "n_labels"], ascending=False)


def dataset_stats(dataset: Dataset) -> dict[str, Any]:
    """Table 1 statistics: sizes and worker accuracies (all workers, and those with >= 30 labels)."""
    acc = worker_accuracy(dataset)
    active = acc[acc["n_labels"] >= MIN_WORKER_LABELS]
    return {
        "workers": int(dataset.labels["worker"].nunique()),
        "items": int(dataset.labels["item"].nunique()),
        "labels": int(len(dataset.labels)),
        "classes": int(dataset.labels["label"].nunique()),
        "gold_items": int(dataset.gold["item"].nunique()),
        "mean_accuracy": float(acc["accuracy"].mean()),
        "best_accuracy": float(acc["accuracy"].max()),
        "best_accuracy_min_labels": float(active["accuracy"].max()) if len(active) else None,
        "min_labels": MIN_WORKER_LABELS,
        "source": dataset.source,
    }
