"""Does the spammer flag find planted spammers of 20 labels?  Precision and recall on synthetic crowds.

For each number of classes, algorithm and seed: the project's Dawid-Skene generator
(:func:`crowdspark.synthetic.dawid_skene_data`, its default workers: diagonal ``Uniform(0.5, 0.9)``, equal
participation) labels ``--items`` items with 5 distinct workers each, so every worker has about 20 labels;
then ``--spammers`` uniform spammers give 20 labels each, on distinct random items, uniformly at random.  The
flag (``workers/``'s ``spammer``: spammer probability above ``quality.spammer_threshold``) is scored
against the planted spammers, summed over the seeds; the rank-one distance's old flag (``spammer_score``
below 0.1) is shown next to it.  The algorithm ``truth`` scores the workers' labels against the planted true
classes instead of inferred ones: what 20 labels can tell at best.

Example (docs/quality.md's table)::

    .venv/bin/python -m jobs.spammer_experiment --seeds 6
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd

from crowdspark.config import load_config
from crowdspark.pipeline import aggregate_frames
from crowdspark.pipeline.quality import worker_quality
from crowdspark.synthetic import dawid_skene_data

SPAMMER_LABELS = 20
LABELS_PER_ITEM = 5
RANK_ONE_THRESHOLD = 0.1


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6, help="seeds 0 .. SEEDS-1")
    parser.add_argument("--classes", type=int, nargs="+", default=[3, 4, 5, 6])
    parser.add_argument("--algorithms", nargs="+", default=["truth", "ds", "mv", "wawa"])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--workers", type=int, default=100, help="the generator's (non-spammer) workers")
    parser.add_argument("--spammers", type=int, default=10)
    return parser.parse_args(argv)


def planted_spammers(seed: int, n_classes: int, n_items: int = 400, n_workers: int = 100,
                     n_spammers: int = 10) -> tuple[pd.DataFrame, pd.DataFrame, set[str]]:
    """The generator's labels (``LABELS_PER_ITEM`` per item, equal participation) plus ``n_spammers`` uniform
    spammers of ``SPAMMER_LABELS`` labels each; returns ``(labels, truth, spammer ids)``."""
    labels, truth, _ = dawid_skene_data(n_items, n_workers, n_classes, LABELS_PER_ITEM, seed, activity_sigma=0.0)
    rng = np.random.default_rng([seed, n_classes, 7])
    items = truth["item"].to_numpy()
    spammers = [f"spammer{s:03d}" for s in range(n_spammers)]
    rows = [(item, worker, str(rng.integers(0, n_classes)))
            for worker in spammers for item in rng.choice(items, SPAMMER_LABELS, replace=False)]
    spam = pd.DataFrame(rows, columns=["item", "worker", "label"])
    return pd.concat([labels, spam], ignore_index=True), truth, set(spammers)


def workers_against_truth(labels: pd.DataFrame, truth: pd.DataFrame, n_classes: int,
                          threshold: float) -> pd.DataFrame:
    """The ``workers/`` quality columns of every worker from its labels against the true classes."""
    workers, worker = np.unique(labels["worker"].to_numpy(), return_inverse=True)
    true_class = truth.set_index("item")["truth"].astype(int).reindex(labels["item"]).to_numpy()
    counts = np.zeros((len(workers), n_classes, n_classes), dtype=np.int64)
    np.add.at(counts, (worker, true_class, labels["label"].astype(int).to_numpy()), 1)
    return pd.DataFrame({"worker": workers, **worker_quality({"worker_confusion": counts}, threshold)})


def flag_counts(workers: pd.DataFrame, spammers: set[str]) -> dict[str, int]:
    """Flagged, rightly flagged (by the flag and by the rank-one score) and planted, from a ``workers/``
    table."""
    flags = {"flag": workers["spammer"].to_numpy(),
             "rank-one": np.nan_to_num(workers["spammer_score"].to_numpy(), nan=1.0) < RANK_ONE_THRESHOLD}
    out = {"planted": len(spammers)}
    is_spammer = workers["worker"].isin(spammers).to_numpy()
    for name, flagged in flags.items():
        out[f"{name} flagged"] = int(flagged.sum())
        out[f"{name} right"] = int((flagged & is_spammer).sum())
    return out


def run(args: argparse.Namespace) -> pd.DataFrame:
    rows = []
    for n_classes in args.classes:
        for algorithm in args.algorithms:
            config = load_config(overrides=[f"algorithm={'mv' if algorithm == 'truth' else algorithm}",
                                            "engine.name=local"])
            total: dict[str, int] = {}
            for seed in range(args.seeds):
                labels, truth, spammers = planted_spammers(seed, n_classes, args.items, args.workers, args.spammers)
                if algorithm == "truth":
                    workers = workers_against_truth(labels, truth, n_classes, config.quality.spammer_threshold)
                else:
                    workers = aggregate_frames(config, labels).workers
                counts = flag_counts(workers, spammers)
                total = {k: total.get(k, 0) + v for k, v in counts.items()}
            row = {"classes": n_classes, "algorithm": algorithm}
            for name in ("flag", "rank-one"):
                row[f"{name} precision"] = total[f"{name} right"] / max(total[f"{name} flagged"], 1)
                row[f"{name} recall"] = total[f"{name} right"] / total["planted"]
            rows.append(row)
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    frame = run(args)
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
