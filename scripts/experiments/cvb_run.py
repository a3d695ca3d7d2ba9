"""Measure IDBLA-CVB / CVB0 on the datasets under data/.

Usage::

    .venv/bin/python scripts/experiments/cvb_run.py [--datasets rte,temp] [--sequential rte,bluebird]

For each dataset: error rate and iterations of Dawid-Skene, CVB and CVB0 (parallel schedule, local engine);
for the datasets in ``--sequential`` also the paper's sequential schedule and the agreement of its labels
with the parallel ones.  Prints a markdown table.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings
from functools import partial
from pathlib import Path

import _data
import numpy as np
import pandas as pd
from cvb_sequential import fit_sequential

from crowdspark.block import Block
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import finish_fn, fit
from crowdspark.models.base import Model
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.models.idbla_cvb import IdblaCvb, IdblaCvb0

DATA = Path(__file__).resolve().parents[2] / "data"


def load(name: str, max_labels: int = 3000) -> tuple[list[Block], int, int]:
    """Blocks, K and C of ``data/<name>`` (labels.csv, truth.csv)."""
    return _data.load(name, max_labels)


def labels_of(results) -> tuple[np.ndarray, np.ndarray]:
    label = np.concatenate([r.label for _, r in results])
    truth = np.concatenate([b.truth for b, _ in results])
    return label, truth


def error(label: np.ndarray, truth: np.ndarray) -> float:
    has = truth >= 0
    return float(np.mean(label[has] != truth[has]))


def run(model: Model, blocks: list[Block]) -> tuple[np.ndarray, np.ndarray, object, float]:
    eng = LocalEngine(blocks)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = fit(model, eng)
    seconds = time.perf_counter() - t0
    label, truth = labels_of(eng.map_items(partial(finish_fn, model), res.params))
    return label, truth, res, seconds


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", default="rte,web_search_filtered,temp,bluebird,web_search")
    ap.add_argument("--sequential", default="rte,web_search_filtered,bluebird")
    ap.add_argument("--n-levels", type=int, default=2)
    ap.add_argument("--damping", type=float, default=0.0)
    ap.add_argument("--max-iter", type=int, default=200)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rows = []
    for name in args.datasets.split(","):
        blocks, K, C = load(name)
        ds_label, truth, ds_res, _ = run(DawidSkene(K, C), blocks)
        row = {"dataset": name, "ds": error(ds_label, truth)}
        for cls in (IdblaCvb, IdblaCvb0):
            model = cls(K, C, n_levels=args.n_levels, damping=args.damping, max_iter=args.max_iter, tol=args.tol)
            label, truth, res, sec = run(model, blocks)
            tag = "cvb" if cls is IdblaCvb else "cvb0"
            row[tag] = error(label, truth)
            row[tag + "_iter"] = f"{res.n_iter}{'' if res.converged else '*'}"
            row[tag + "_s"] = sec
            objective = np.array([h["objective"] for h in res.history])
            row[tag + "_obj_drops"] = int(np.sum(np.diff(objective) < -1e-9))
            row[tag + "_level0"] = res.history[-1]["level_share_0"]
            row[tag + "_damping"] = res.history[-1]["damping"]
            if name in args.sequential.split(","):
                t0 = time.perf_counter()
                sres = fit_sequential(blocks, model)
                slabel, _ = labels_of(sres.items(blocks, model))
                row[tag + "_seq"] = error(slabel, truth)
                row[tag + "_seq_iter"] = f"{sres.n_iter}{'' if sres.converged else '*'}"
                row[tag + "_agree"] = float(np.mean(slabel == label))
                row[tag + "_seq_s"] = time.perf_counter() - t0
        rows.append(row)
        print(row, flush=True)
    table = pd.DataFrame(rows)
    pct = [c for c in table.columns if c in ("ds", "cvb", "cvb0", "cvb_seq", "cvb0_seq", "cvb_agree", "cvb0_agree")]
    for c in pct:
        table[c] = (100 * table[c]).round(2)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()
