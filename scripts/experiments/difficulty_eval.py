"""Error rates of difficulty Dawid-Skene (``dds``) against every other algorithm, on every bundled dataset
and on the paper-style synthetic set.

Usage::

    .venv/bin/python scripts/experiments/difficulty_eval.py [--seeds 10] [--data rte,temp,...,synthetic]
        [--models mv,ds,bcc,idbla,fixed-idbla,dds,dds-H2,dds-bic] [--variant NAME:key=value,key=value ...]

* Real datasets: stochastic models (bcc, idbla, fixed-idbla) run with seeds ``0..seeds-1``; EM models (ds,
  dds) start from majority vote and are deterministic (the seed only breaks exact ties), so they run once.
* ``synthetic``: :func:`crowdspark.synthetic.paper_synthetic` with data seeds ``0..seeds-1`` (each model
  with the same seed as the data); the cell is the mean over the data seeds and "worst - DS" is taken per
  data seed.  ``planted`` (not in the default list): the same with the planted-difficulty set of
  ``tests/test_difficulty_model.py`` (10 workers on all 800 items, 4 classes, half the items at 80% noise).
* ``dds`` is what ``--algorithm dds`` runs: :class:`DifficultyDawidSkene` with H chosen among 1 and 2 by
  BIC (``DifficultyDawidSkene.auto_levels``); ``dds-H2`` fixes H = 2;
  ``dds-bic`` chooses H in 1..3 by BIC (:func:`crowdspark.engine.select.choose_levels`); ``--variant name:key=value,...`` adds a
  ``dds`` column with other fields (e.g. ``--variant w3:n_levels=3,noise=worker``); a variant with
  ``bic=1`` chooses H in 1..3 by BIC, with ``bic=auto`` among 1 and 2 as ``dds`` does.
* DS uses its defaults (smoothing 0.5, max_iter 100, tol 1e-6).

Prints the error table (%), the mean over datasets, and per dataset the worst run of each dds column minus
DS, then the chosen H, noise weights ``w``, class penalties ``d`` (levels >= 1) and level proportions of
each dds column.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import load  # noqa: E402

from crowdspark.block import Block, build_blocks  # noqa: E402
from crowdspark.engine.local import LocalEngine  # noqa: E402
from crowdspark.engine.loop import finish_fn, fit  # noqa: E402
from crowdspark.engine.select import choose_levels  # noqa: E402
from crowdspark.models.dawid_skene import DawidSkene  # noqa: E402
from crowdspark.models.difficulty_ds import DifficultyDawidSkene  # noqa: E402
from crowdspark.models.idbla_gibbs import Bcc, FixedIdbla, IdblaGibbs  # noqa: E402
from crowdspark.models.majority_vote import MajorityVote  # noqa: E402
from crowdspark.synthetic import idbla_data, paper_synthetic  # noqa: E402

REAL = ("rte", "web_search", "web_search_filtered", "temp", "bluebird")
STOCHASTIC = {"bcc": Bcc, "idbla": IdblaGibbs, "fixed-idbla": FixedIdbla}


def planted_blocks(seed: int) -> tuple[list[Block], int, int]:
    """Blocks, K and C of the planted-difficulty set of ``tests/test_difficulty_model.py`` (``PLANTED``) with
    data seed ``seed``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.test_difficulty_model import PLANTED, frames_to_coded_blocks

    labels, truth, _ = idbla_data(**{**PLANTED, "seed": seed})
    blocks, K, _ = frames_to_coded_blocks(labels, truth)
    return blocks, K, PLANTED["n_classes"]


def synthetic_blocks(seed: int) -> tuple[list[Block], int, int]:
    """Blocks, K and C of ``paper_synthetic(seed)``."""
    labels, truth, _ = paper_synthetic(seed)
    classes = [str(c) for c in range(5)]
    workers = sorted(labels.worker.unique())
    worker = pd.Index(workers).get_indexer(labels.worker)
    label = pd.Index(classes).get_indexer(labels.label)
    gold = pd.Index(classes).get_indexer(labels.item.map(dict(zip(truth.item, truth.truth))))
    return build_blocks(labels.item.to_numpy(), worker, label, gold), len(workers), len(classes)


#: generated datasets, one per data seed
GENERATED = {"synthetic": synthetic_blocks, "planted": planted_blocks}


def error_of(model, blocks: list[Block]) -> tuple[float, dict]:
    """Error (%) over gold items and the model's summary."""
    engine = LocalEngine(blocks)
    result = fit(model, engine)
    out = engine.map_items(partial(finish_fn, model), result.params)
    wrong = sum(int(((b.truth >= 0) & (r.label != b.truth)).sum()) for b, r in out)
    total = sum(int((b.truth >= 0).sum()) for b, _ in out)
    return 100.0 * wrong / total, model.summary(result.params)


def dds_error(fields: dict, blocks: list[Block], K: int, C: int, seed: int) -> tuple[float, str]:
    """Error of a dds configuration (H by BIC when ``fields["bic"]``: among 1..3, among the H it lists, or
    among ``DifficultyDawidSkene.auto_levels`` for ``"auto"``) and a note (H, w, d, beta)."""
    fields = dict(fields)
    bic = fields.pop("bic", False)
    if bic:
        def make(h: int) -> DifficultyDawidSkene:
            return DifficultyDawidSkene(K, C, seed=seed, **{**fields, "n_levels": h})

        if bic == "auto":
            levels = DifficultyDawidSkene.auto_levels
        else:
            levels = tuple(bic) if isinstance(bic, (tuple, list)) else (1, 2, 3)
        choice = choose_levels(make, LocalEngine(blocks), levels)
        fields["n_levels"] = choice.chosen
    err, summary = error_of(DifficultyDawidSkene(K, C, seed=seed, **fields), blocks)
    w = np.round(summary["level_noise"], 2).tolist()
    beta = np.round(summary["level_proportions"], 2).tolist()
    d = np.round(summary["level_penalty"][1:], 2).tolist()
    return err, f"H={len(w)} w={w} d={d} beta={beta}"


def run_dataset(name: str, models: list[str], variants: dict[str, dict], n_seeds: int) -> dict[str, list]:
    """Per model: list of (error, note) over seeds (one entry for deterministic models on real data)."""
    synthetic = name in GENERATED
    data = [GENERATED[name](s) for s in range(n_seeds)] if synthetic else [load(name)] * n_seeds
    out: dict[str, list] = {m: [] for m in models}
    out.update({v: [] for v in variants})
    for seed in range(n_seeds):
        blocks, K, C = data[seed]
        first = seed == 0
        for m in models:
            if m in STOCHASTIC:
                out[m].append((error_of(STOCHASTIC[m](K, C, seed=seed), blocks)[0], ""))
            elif synthetic or first:
                if m == "mv":
                    out[m].append((error_of(MajorityVote(K, C, seed=seed), blocks)[0], ""))
                elif m == "ds":
                    out[m].append((error_of(DawidSkene(K, C, seed=seed), blocks)[0], ""))
                elif m == "dds":
                    out[m].append(dds_error({"bic": DifficultyDawidSkene.auto_levels}, blocks, K, C, seed))
                elif m == "dds-H2":
                    out[m].append(dds_error({"n_levels": 2}, blocks, K, C, seed))
                elif m == "dds-bic":
                    out[m].append(dds_error({"bic": True}, blocks, K, C, seed))
        for v, fields in variants.items():
            if synthetic or first:
                out[v].append(dds_error(fields, blocks, K, C, seed))
    return out


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, body = text.partition(":")
    fields = {}
    for item in filter(None, body.split(",")):
        key, value = item.split("=", 1)
        try:
            fields[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            fields[key] = value
    return name, fields


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--data", default=",".join(REAL + ("synthetic",)))
    parser.add_argument("--models", default="mv,ds,bcc,idbla,fixed-idbla,dds,dds-H2,dds-bic")
    parser.add_argument("--variant", action="append", default=[])
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    models = args.models.split(",")
    variants = dict(parse_variant(v) for v in args.variant)
    columns = models + list(variants)
    dds_columns = [c for c in columns if c.startswith("dds") or c in variants]
    table, notes = {}, {}
    for name in args.data.split(","):
        t0 = time.perf_counter()
        runs = run_dataset(name, models, variants, args.seeds)
        table[name] = runs
        notes[name] = {c: runs[c][0][1] for c in dds_columns}
        print(f"[{name}: {time.perf_counter() - t0:.0f}s]", file=sys.stderr, flush=True)
    print("| data | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    means = {c: [] for c in columns}
    for name, runs in table.items():
        cells = []
        for c in columns:
            mean = float(np.mean([e for e, _ in runs[c]]))
            means[c].append(mean)
            cells.append(f"{mean:.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("| **mean** | " + " | ".join(f"**{np.mean(means[c]):.2f}**" for c in columns) + " |")
    if "ds" in columns:
        print("\nworst run minus DS (points; synthetic: per data seed)")
        print("| data | " + " | ".join(dds_columns) + " |")
        print("|---" * (len(dds_columns) + 1) + "|")
        for name, runs in table.items():
            ds = np.array([e for e, _ in runs["ds"]])
            cells = []
            for c in dds_columns:
                e = np.array([x for x, _ in runs[c]])
                cells.append(f"{np.max(e - ds[: len(e)] if len(ds) == len(e) else e - ds[0]):+.2f}")
            print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nfitted levels (first run)")
    for name, by in notes.items():
        print(f"- {name}: " + "; ".join(f"{c}: {n}" for c, n in by.items()))


if __name__ == "__main__":
    main()
