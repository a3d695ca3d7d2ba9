"""Error rates of BCC, IDBLA and Fixed-IDBLA against Dawid-Skene on the real datasets.

Usage: ``python scripts/experiments/gibbs_eval.py [--seeds 10] [--data rte,temp] [--set key=value ...]``
``--set`` overrides a field of the IDBLA-family models (e.g. ``--set n_levels=3``); ``--models`` selects
models among ``ds,bcc,idbla,fixed-idbla,idbla-paper,fixed-paper``.  Prints one table per dataset:
mean, min, max error (%) over seeds, worst seed minus DS, per-level labeling error of seed 0 and seconds.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from dataclasses import fields, replace
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import load  # noqa: E402

from crowdspark.engine.local import LocalEngine  # noqa: E402
from crowdspark.engine.loop import finish_fn, fit  # noqa: E402
from crowdspark.metrics import gold_stats, level_error_stats  # noqa: E402
from crowdspark.models.dawid_skene import DawidSkene  # noqa: E402
from crowdspark.models.idbla_gibbs import Bcc, FixedIdbla, IdblaGibbs, paper_preset  # noqa: E402
from crowdspark.stats import sum_stats  # noqa: E402


def run(model, blocks):
    eng = LocalEngine(blocks)
    t0 = time.perf_counter()
    res = fit(model, eng)
    out = eng.map_items(partial(finish_fn, model), res.params)
    g = sum_stats(gold_stats(b, r.posterior, r.label) for b, r in out)
    err = float(g["gold_errors"]) / float(g["gold_n"])
    lev = None
    if "level" in out[0][1].extra:
        H = model.n_levels
        s = sum_stats(level_error_stats(b, r.extra["level"], H) for b, r in out)
        with np.errstate(invalid="ignore"):
            lev = (s["level_error_sum"] / s["level_gold_n"]).round(3).tolist(), s["level_gold_n"].tolist()
    summ = model.summary(res.params) if hasattr(model, "summary") else {}
    return err, lev, time.perf_counter() - t0, summ


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--data", default="rte,web_search_filtered,temp,bluebird")
    ap.add_argument("--models", default="ds,bcc,idbla,fixed-idbla")
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args(argv)
    overrides = {}
    for kv in args.set:
        k, v = kv.split("=", 1)
        try:
            overrides[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            overrides[k] = v
    for name in args.data.split(","):
        blocks, K, C = load(name)
        rows = {}
        for mname in args.models.split(","):
            errs, levs, secs, diag = [], None, 0.0, None
            for seed in range(args.seeds):
                if mname == "ds":
                    if seed:
                        errs.append(errs[0]); continue
                    m = DawidSkene(K, C, seed=seed, max_iter=200, tol=1e-7)
                else:
                    cls = {"bcc": Bcc, "idbla": IdblaGibbs, "fixed-idbla": FixedIdbla,
                           "idbla-paper": IdblaGibbs, "fixed-paper": FixedIdbla}[mname]
                    m = cls(K, C, seed=seed)
                    if mname.endswith("paper"):
                        m = paper_preset(m)
                    ov = {k: v for k, v in overrides.items() if k in {f.name for f in fields(m)}}
                    if mname == "bcc":
                        ov.pop("n_levels", None); ov.pop("diagonal_prior", None)
                    m = replace(m, **ov)
                err, lev, sec, summ = run(m, blocks)
                errs.append(err); secs += sec
                if seed == 0:
                    levs = lev
                    diag = {k: summ.get(k) for k in ("permuted_levels", "collapsed_levels", "level_sizes")}
            rows[mname] = (np.array(errs) * 100, levs, secs / args.seeds, diag)
        ds = rows.get("ds", (None,))[0]
        print(f"\n## {name} (K={K}, C={C})  overrides={overrides}")
        print("| model | mean | min | max | worst-DS | level err (seed 0) | s/run | diag |")
        print("|---|---|---|---|---|---|---|---|")
        for mname, (e, lev, sec, diag) in rows.items():
            worst = f"{e.max() - ds[0]:+.2f}" if ds is not None else ""
            print(f"| {mname} | {e.mean():.2f} | {e.min():.2f} | {e.max():.2f} | {worst} | {lev} | {sec:.2f} | {diag} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
