"""Synthetic labelling lakes: a crowd labelling new items day after day, written as dated partitions.

What a nightly job meets and :mod:`crowdspark.synthetic`'s one-shot generators do not: workers who join over
time, workers whose reliability drifts, spammers, a class that appears on some day, days without labels, and
items that receive labels again on a later day.  The lake is written as ``<root>/date=YYYY-MM-DD/part-0.parquet``
(columns ``item``, ``worker``, ``label``; the date is the folder, as in a Hive-partitioned lake) with the gold at
``<root>_truth/truth.parquet`` (``item``, ``truth``) and every worker's planted accuracy per day in
:class:`Lake` (for drift tests).

Notation: day ``d`` (0-based), worker ``k`` with accuracy ``acc[d, k]`` (the probability of the true class; the
other classes share the rest equally), spammers label uniformly at random.  Every draw comes from
``Philox(SeedSequence([seed, day, stream]))``, so a day's data do not depend on how many days are written.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from crowdspark.validation import check_float, check_int

__all__ = ["LakeSpec", "Lake", "make_lake", "write_lake"]


@dataclass(frozen=True)
class LakeSpec:
    """What the lake holds.

    Attributes
    ----------
    days : int
        Days of labels.
    items_per_day : int
        New items labelled each day.
    labels_per_item : int
        Distinct workers per item.
    n_workers : int
        Workers at the start.
    n_classes : int
        Classes ``"0"`` .. ``"C-1"``.
    start : str
        The first day, ``YYYY-MM-DD``.
    accuracy : tuple of float
        Range of the workers' accuracies (uniform).
    new_workers_per_day : int
        Workers who join each day.
    drifting_workers : int
        Workers whose accuracy moves linearly from ``drift[0]`` on the first day to ``drift[1]`` on the last.
    drift : tuple of float
    spammers : int
        Workers who label uniformly at random.
    new_class_day : int or None
        From this day on, a class ``"C"`` exists (its items are labelled like the others).
    missing_days : tuple of int
        Days without any label (no partition).
    revisit : float
        Share of each day's items that get a second round of labels the next day.
    seed : int
    """

    days: int = 14
    items_per_day: int = 200
    labels_per_item: int = 5
    n_workers: int = 40
    n_classes: int = 3
    start: str = "2026-11-01"
    accuracy: tuple[float, float] = (0.55, 0.9)
    new_workers_per_day: int = 0
    drifting_workers: int = 0
    drift: tuple[float, float] = (0.85, 0.4)
    spammers: int = 0
    new_class_day: int | None = None
    missing_days: tuple[int, ...] = ()
    revisit: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("days", self.days, minimum=1)
        check_int("items_per_day", self.items_per_day, minimum=1)
        check_int("n_classes", self.n_classes, minimum=2)
        check_int("labels_per_item", self.labels_per_item, minimum=1,
                  maximum=self.n_workers + self.spammers)
        check_float("revisit", self.revisit, minimum=0.0, maximum=1.0)
        _dt.date.fromisoformat(self.start)

    def date(self, day: int) -> str:
        return (_dt.date.fromisoformat(self.start) + _dt.timedelta(days=day)).isoformat()


@dataclass
class Lake:
    """A generated lake: labels with their ``date``, the gold, and the planted accuracies.

    Attributes
    ----------
    labels : DataFrame
        ``item``, ``worker``, ``label``, ``date`` (strings).
    truth : DataFrame
        ``item``, ``truth``.
    accuracy : DataFrame
        ``worker``, ``date``, ``accuracy`` (planted; NaN for spammers).
    drifting : list of str
        The drifting workers' ids.
    """

    labels: pd.DataFrame
    truth: pd.DataFrame
    accuracy: pd.DataFrame
    drifting: list[str] = field(default_factory=list)


def _rng(spec: LakeSpec, day: int, stream: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(np.random.SeedSequence([spec.seed, day, stream])))


def _accuracies(spec: LakeSpec) -> tuple[np.ndarray, int]:
    """acc[d, k] of every worker who ever exists (NaN: not yet joined; spammers last), and the spammers' start."""
    total = spec.n_workers + spec.new_workers_per_day * (spec.days - 1)
    base = _rng(spec, 0, 0).uniform(*spec.accuracy, size=total)  # stream 0: the workers; stream 1: the days
    acc = np.tile(base, (spec.days, 1))
    for day in range(spec.days):
        acc[day, spec.n_workers + spec.new_workers_per_day * day:] = np.nan
    if spec.drifting_workers:
        share = np.linspace(0.0, 1.0, spec.days)[:, None]
        acc[:, :spec.drifting_workers] = spec.drift[0] + (spec.drift[1] - spec.drift[0]) * share
    spam = np.full((spec.days, spec.spammers), np.nan)
    return np.hstack([acc, spam]), total


def _labels_of(spec: LakeSpec, rng: np.random.Generator, truth: np.ndarray, acc: np.ndarray, n_classes: int,
               first_spammer: int) -> tuple[np.ndarray, np.ndarray]:
    active = np.flatnonzero(~np.isnan(acc) | (np.arange(acc.size) >= first_spammer))
    workers = np.stack([rng.choice(active, spec.labels_per_item, replace=False) for _ in truth])
    correct = rng.random(workers.shape) < np.nan_to_num(acc[workers], nan=0.0)
    other = (truth[:, None] + rng.integers(1, n_classes, size=workers.shape)) % n_classes
    label = np.where(correct, truth[:, None], other)
    spam = workers >= first_spammer
    label[spam] = rng.integers(0, n_classes, size=int(spam.sum()))
    return workers, label


def make_lake(spec: LakeSpec) -> Lake:
    """Draw the lake of ``spec``."""
    acc, first_spammer = _accuracies(spec)
    worker_ids = np.array([f"w{k:04d}" for k in range(acc.shape[1])], dtype=object)
    rows, truths, revisits = [], [], None
    for day in range(spec.days):
        rng = _rng(spec, day, 1)
        n_classes = spec.n_classes + int(spec.new_class_day is not None and day >= spec.new_class_day)
        items = np.array([f"d{day:03d}-i{i:05d}" for i in range(spec.items_per_day)], dtype=object)
        truth = rng.integers(0, n_classes, size=items.size)
        truths.append(pd.DataFrame({"item": items, "truth": truth.astype(str)}))
        batch = [(items, truth)] + ([revisits] if revisits is not None else [])
        revisit = rng.random(items.size) < spec.revisit
        revisits = (items[revisit], truth[revisit]) if revisit.any() else None
        if day in spec.missing_days:
            continue
        for ids, classes in batch:
            workers, label = _labels_of(spec, rng, classes, acc[day], n_classes, first_spammer)
            rows.append(pd.DataFrame({
                "item": np.repeat(ids, spec.labels_per_item), "worker": worker_ids[workers.ravel()],
                "label": label.ravel().astype(str), "date": spec.date(day),
            }))
    accuracy = pd.DataFrame({
        "worker": np.tile(worker_ids, spec.days), "date": np.repeat([spec.date(d) for d in range(spec.days)],
                                                                    acc.shape[1]), "accuracy": acc.ravel(),
    })
    return Lake(labels=pd.concat(rows, ignore_index=True), truth=pd.concat(truths, ignore_index=True),
                accuracy=accuracy, drifting=list(worker_ids[:spec.drifting_workers]))


def write_lake(lake: Lake, root: str, days: list[str] | None = None) -> str:
    """Write ``lake`` (or only ``days`` of it) as ``<root>/date=<day>/part-0.parquet``, and its gold as
    ``<root>_truth/truth.parquet``; returns the gold's path."""
    for day, part in lake.labels.groupby("date"):
        if days is not None and day not in days:
            continue
        folder = os.path.join(root, f"date={day}")
        os.makedirs(folder, exist_ok=True)
        part.drop(columns="date").to_parquet(os.path.join(folder, "part-0.parquet"), index=False)
    gold = f"{root.rstrip('/')}_truth"
    os.makedirs(gold, exist_ok=True)
    lake.truth.to_parquet(os.path.join(gold, "truth.parquet"), index=False)
    return gold
