"""Incremental nights against full refits, night by night on a simulated 90-day lake (docs/incremental.md).

    .venv/bin/python -m benchmarks.incremental quality --workdir /tmp/incremental-bench
    .venv/bin/python -m benchmarks.incremental cost --workdir /tmp/incremental-bench --repeat 5

``quality`` aggregates the lake (:data:`SPEC`: 90 days, drifting workers, spammers, new workers, revisited
items) every night three ways with Dawid-Skene on the local engine: incremental nights without decay,
incremental nights with ``incremental.decay`` (``--decay``), and a full refit of every day up to the night.  It
prints, over the last ``--last`` nights: the error rate of every item of each result against the planted truth,
how many of the new day's items get the full refit's label, and the mean absolute error of the drifting workers'
estimated accuracy against their planted accuracy of that day.

``cost`` times whole runs (``aggregate``: reading, fitting, writing) at equal iterations (``ds.max_iter`` fixed,
``ds.tol = 0``): an incremental night after 10, 30 and 90 days of history that continues a full refit of the
night before, the same night at the end of a chain of incremental nights since the first day (its answer spread
over every run since; ``_LATEST.json`` is pointed back at the night before each repeat, untimed, so the repeat
finds its previous run as a new night does), a full refit of the same night, and a cold run over that night's day alone, interleaved and
repeated; it prints medians and ranges and the ratios.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import machine
from crowdspark.config import load_config
from crowdspark.io.chain import read_items
from crowdspark.io.runs import LATEST
from crowdspark.lake import LakeSpec, make_lake, write_lake
from crowdspark.pipeline import aggregate

SPEC = LakeSpec(days=90, items_per_day=500, labels_per_item=5, n_workers=60, n_classes=3, accuracy=(0.55, 0.9),
                new_workers_per_day=1, drifting_workers=8, drift=(0.85, 0.4), spammers=3, revisit=0.2, seed=0)


def lake(workdir: Path):
    """The lake's data, written once under ``workdir/labels``."""
    data = make_lake(SPEC)
    if not (workdir / "labels").exists():
        write_lake(data, str(workdir / "labels"))
    return data


def nightly(*extra: str):
    return load_config(overrides=["input.date_column=date", "incremental.mode=on", *extra], algorithm="ds",
                       engine_name="local")


def night(config, workdir: Path, root: str, day: int, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return aggregate(config, str(workdir / "labels"), str(workdir / root), None, run_id=SPEC.date(day), **kwargs)


def _error(items: pd.DataFrame, truth: pd.Series) -> float:
    return float((items["label"].to_numpy() != truth.reindex(items["item"]).to_numpy()).mean())


def _drift_mae(workers: pd.DataFrame, planted: pd.Series, drifting: list[str], day: str) -> float:
    estimated = workers.set_index("worker")["accuracy"]
    return float(np.mean([abs(estimated[w] - planted[(w, day)]) for w in drifting if w in estimated.index]))


def quality(args) -> None:
    workdir = Path(args.workdir)
    data = lake(workdir)
    truth = data.truth.set_index("item")["truth"]
    planted = data.accuracy.set_index(["worker", "date"])["accuracy"]
    ways = {"incremental": nightly(), "decay": nightly(f"incremental.decay={args.decay}"), "full": nightly()}
    rows = []
    for d in range(SPEC.days):
        day, results, seconds = SPEC.date(d), {}, {}
        for name, config in ways.items():
            start = time.perf_counter()
            results[name] = night(config, workdir, f"q-{name}", d, full_refit=name == "full")
            seconds[name] = time.perf_counter() - start
        # an incremental night writes the items it fitted; its whole answer is read over its chain of runs
        whole = {name: read_items(str(workdir / f"q-{name}")) for name in results}
        items = {name: table.set_index("item").sort_index() for name, table in whole.items()}
        new = [i for i in items["full"].index if i.startswith(f"d{d:03d}-")]
        row = {"night": d + 1, "day": day}
        for name, r in results.items():
            row[f"error_{name}"] = _error(whole[name], truth)
            row[f"drift_{name}"] = _drift_mae(r.workers, planted, data.drifting, day)
            row[f"seconds_{name}"] = seconds[name]
        for name in results:
            row[f"new_error_{name}"] = float((items[name].loc[new, "label"] != truth.reindex(new)).mean())
        row["new_items"] = len(new)
        row["new_agree"] = int((items["incremental"].loc[new, "label"] == items["full"].loc[new, "label"]).sum())
        row["new_agree_decay"] = int((items["decay"].loc[new, "label"] == items["full"].loc[new, "label"]).sum())
        rows.append(row)
        print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    table = pd.DataFrame(rows)
    table.to_csv(workdir / "quality.csv", index=False)
    last = table.tail(args.last)
    gap = (last["error_incremental"] - last["error_full"]) * 100
    print(f"\nlast {args.last} nights (nights {last['night'].iloc[0]}-{last['night'].iloc[-1]}), {machine()}")
    print("| | incremental | incremental, decay %s | full refit |" % args.decay)
    print("|---|---|---|---|")
    print(f"| error rate, mean (%) | {last['error_incremental'].mean() * 100:.3f} | {last['error_decay'].mean() * 100:.3f} "
          f"| {last['error_full'].mean() * 100:.3f} |")
    print(f"| error minus full refit's, points: mean / largest | {gap.mean():.3f} / {gap.abs().max():.3f} | "
          f"{((last['error_decay'] - last['error_full']) * 100).mean():.3f} / "
          f"{((last['error_decay'] - last['error_full']) * 100).abs().max():.3f} | |")
    print(f"| the new day's items: error rate, mean (%) | {last['new_error_incremental'].mean() * 100:.3f} | "
          f"{last['new_error_decay'].mean() * 100:.3f} | {last['new_error_full'].mean() * 100:.3f} |")
    agree = last["new_agree"].sum() / last["new_items"].sum()
    agree_decay = last["new_agree_decay"].sum() / last["new_items"].sum()
    worst = (last["new_agree"] / last["new_items"]).min()
    print(f"| new day's items with the full refit's label: all / worst night (%) | {agree * 100:.2f} / {worst * 100:.2f} "
          f"| {agree_decay * 100:.2f} / {(last['new_agree_decay'] / last['new_items']).min() * 100:.2f} | |")
    print(f"| drifting workers' accuracy, mean absolute error | {last['drift_incremental'].mean():.4f} | "
          f"{last['drift_decay'].mean():.4f} | {last['drift_full'].mean():.4f} |")
    print(f"| decay's drift error / no decay's | | {last['drift_decay'].mean() / last['drift_incremental'].mean():.3f} | |")
    print(f"| seconds per night, median | {last['seconds_incremental'].median():.2f} | {last['seconds_decay'].median():.2f} "
          f"| {last['seconds_full'].median():.2f} |")


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def _point_latest_at(root: Path, day: int) -> None:
    """Point ``root``'s ``_LATEST.json`` back at night ``day`` (untimed), so that a repeated night finds the run
    before it as a new night does, from the pointer, instead of scanning every run of the root for the newest
    one older than itself (what a backfill does)."""
    run_id = SPEC.date(day)
    pointer = {"run_id": run_id, "as_of": run_id, "path": f"run_id={run_id}", "completed_at": "benchmark"}
    (root / LATEST).write_text(json.dumps(pointer), encoding="utf-8")


def cost(args) -> None:
    workdir = Path(args.workdir)
    lake(workdir)
    fixed = [f"ds.max_iter={args.iterations}", "ds.tol=0", "incremental.drift_workers=0"]
    config, cold = nightly(*fixed), load_config(overrides=fixed, algorithm="ds", engine_name="local")
    nights = [h for h in args.nights if h <= SPEC.days]
    for h in nights:  # night h continues from a full refit of night h - 1
        shutil.rmtree(workdir / f"c-{h}", ignore_errors=True)
        night(config, workdir, f"c-{h}", h - 2, full_refit=True)
    shutil.rmtree(workdir / "c-chain", ignore_errors=True)
    for d in range(max(nights) - 1):  # a full refit of the first day, then incremental nights
        night(config, workdir, "c-chain", d)
    times: dict[tuple[str, int], list[float]] = {}
    for repeat in range(args.repeat):
        for h in nights:
            day = SPEC.date(h - 1)
            runs = {
                "incremental": lambda: night(config, workdir, f"c-{h}", h - 1),
                "incremental, chain": lambda: night(config, workdir, "c-chain", h - 1),
                "full refit": lambda: night(config, workdir, f"c-full-{h}", h - 1, full_refit=True),
                "cold, one day": lambda: aggregate(cold, str(workdir / "labels" / f"date={day}"),
                                                   str(workdir / f"c-cold-{h}"), None),
            }
            for name, run in runs.items():
                if name == "incremental, chain":
                    _point_latest_at(workdir / "c-chain", h - 2)
                times.setdefault((name, h), []).append(_timed(run))
        print(f"repeat {repeat + 1}: " + ", ".join(f"{n} {h}: {t[-1]:.2f}" for (n, h), t in times.items()), flush=True)
    med = {key: statistics.median(value) for key, value in times.items()}
    print(f"\n{machine()}; {args.repeat} interleaved repeats, ds.max_iter={args.iterations}, ds.tol=0; seconds per "
          "whole run (median, range)")
    names = ("incremental", "incremental, chain", "full refit", "cold, one day")
    print("| history (days) | incremental night | incremental night, chain of nights | full refit | cold run over the "
          f"day alone | incremental / incremental at {nights[0]} days (chain) | incremental / cold (chain) |")
    print("|---|---|---|---|---|---|---|")
    for h in nights:
        cells = [f"{med[(n, h)]:.3f} ({min(times[(n, h)]):.3f}-{max(times[(n, h)]):.3f})" for n in names]
        inc, chain, cold = med[("incremental", h)], med[("incremental, chain", h)], med[("cold, one day", h)]
        first, first_chain = med[("incremental", nights[0])], med[("incremental, chain", nights[0])]
        print(f"| {h} | {' | '.join(cells)} | {inc / first:.2f} ({chain / first_chain:.2f}) | {inc / cold:.2f} "
              f"({chain / cold:.2f}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--workdir", required=True)
    q.add_argument("--decay", type=float, default=0.9)
    q.add_argument("--last", type=int, default=30)
    c = sub.add_parser("cost")
    c.add_argument("--workdir", required=True)
    c.add_argument("--repeat", type=int, default=5)
    c.add_argument("--iterations", type=int, default=10)
    c.add_argument("--nights", type=int, nargs="+", default=[10, 30, 90])
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.makedirs(args.workdir, exist_ok=True)
    {"quality": quality, "cost": cost}[args.command](args)


if __name__ == "__main__":
    main()
