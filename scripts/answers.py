"""Record every algorithm's answers on every bundled dataset, or compare two such records.

A reshaping of the code must not change an answer.  This script runs ``crowdspark aggregate`` (the command
line, in this process, local engine, ``--seed 1``) for every algorithm of ``crowdspark algorithms`` on every
dataset under ``data/`` and stores, per run, the item labels, the posteriors and the run's metrics::

    .venv/bin/python scripts/answers.py record --output /tmp/answers-old.npz
    ... change the code ...
    .venv/bin/python scripts/answers.py record --output /tmp/answers-new.npz
    .venv/bin/python scripts/answers.py compare /tmp/answers-old.npz /tmp/answers-new.npz

``compare`` exits 1 unless every run's labels are identical, its posteriors agree within ``--atol``
(default 1e-9) and its error rate and NLL are equal to the same tolerance.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


def _algorithms() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "crowdspark", "algorithms", "--json"], check=True,
                         capture_output=True, text=True, cwd=ROOT)
    return list(json.loads(out.stdout))


def _datasets() -> list[str]:
    return sorted(p.parent.name for p in DATA.glob("*/labels.csv"))


#: options an algorithm needs to run at all: gold-mv uses gold in the fit (half the gold items, seeded split)
NEEDS = {"gold-mv": ["--set", "gold.fit_fraction=0.5"]}


def _run(algorithm: str, dataset: str, workdir: Path) -> tuple[pd.DataFrame, dict] | None:
    """The run's items and summary; None when the command line refuses the pair (exit code 2: ``kos`` on more
    than two classes)."""
    from crowdspark.cli import main

    output = workdir / f"{algorithm}-{dataset}"
    argv = ["aggregate", "--labels", str(DATA / dataset / "labels.csv"), "--gold", str(DATA / dataset / "truth.csv"),
            "--algorithm", algorithm, "--engine", "local", "--seed", "1", "--output", str(output), "--quiet",
            *NEEDS.get(algorithm, [])]
    code = main(argv)
    if code == 2:
        return None
    if code != 0:
        raise SystemExit(f"{algorithm} on {dataset} exited with {code}")
    items = pd.read_parquet(output / "items").sort_values("item", ignore_index=True)
    summary = json.loads((output / "summary.json").read_text())
    return items, summary


def record(output: str, algorithms: list[str], datasets: list[str]) -> None:
    arrays: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in datasets:
            for algorithm in algorithms:
                start = time.perf_counter()
                run = _run(algorithm, dataset, Path(tmp))
                key = f"{algorithm}|{dataset}"
                if run is None:
                    print(f"{key}: refused (exit code 2), not recorded", flush=True)
                    continue
                items, summary = run
                arrays[f"{key}|item"] = items["item"].to_numpy(dtype=str)
                arrays[f"{key}|label"] = items["label"].to_numpy(dtype=str)
                arrays[f"{key}|posterior"] = np.stack(items["posterior"].to_numpy())
                metrics = summary.get("metrics") or {}
                arrays[f"{key}|metrics"] = np.array([metrics.get("error_rate", np.nan), metrics.get("nll", np.nan)],
                                                    dtype=float)
                print(f"{key}: error {metrics.get('error_rate')} ({time.perf_counter() - start:.1f} s)", flush=True)
    np.savez_compressed(output, **arrays)
    print(f"wrote {output}")


def compare(old: str, new: str, atol: float) -> int:
    with np.load(old) as a, np.load(new) as b:
        keys = sorted({k.rsplit("|", 1)[0] for k in a.files} | {k.rsplit("|", 1)[0] for k in b.files})
        failures = 0
        for key in keys:
            if f"{key}|label" not in a.files or f"{key}|label" not in b.files:
                print(f"{key}: only in {'new' if f'{key}|label' in b.files else 'old'}")
                continue
            problems = []
            if not np.array_equal(a[f"{key}|item"], b[f"{key}|item"]):
                problems.append("items differ")
            else:
                changed = int((a[f"{key}|label"] != b[f"{key}|label"]).sum())
                if changed:
                    problems.append(f"{changed} labels differ")
                gap = float(np.max(np.abs(a[f"{key}|posterior"] - b[f"{key}|posterior"])))
                if not gap <= atol:
                    problems.append(f"posteriors differ by up to {gap:.3g}")
                metric_gap = np.abs(a[f"{key}|metrics"] - b[f"{key}|metrics"])
                if np.nanmax(metric_gap, initial=0.0) > atol:
                    problems.append(f"metrics {a[f'{key}|metrics'].tolist()} -> {b[f'{key}|metrics'].tolist()}")
            failures += bool(problems)
            print(f"{key}: {'; '.join(problems) if problems else 'same'}")
    print(f"{len(keys) - failures} of {len(keys)} runs give the same answers")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run every algorithm on every dataset and store the answers")
    rec.add_argument("--output", required=True, help="the .npz file to write")
    rec.add_argument("--algorithms", help="comma-separated (default: all)")
    rec.add_argument("--datasets", help="comma-separated (default: every folder of data/ with labels.csv)")
    cmp = sub.add_parser("compare", help="compare two records")
    cmp.add_argument("old")
    cmp.add_argument("new")
    cmp.add_argument("--atol", type=float, default=1e-9)
    args = parser.parse_args()
    if args.command == "record":
        algorithms = args.algorithms.split(",") if args.algorithms else _algorithms()
        datasets = args.datasets.split(",") if args.datasets else _datasets()
        record(args.output, algorithms, datasets)
        return 0
    return compare(args.old, args.new, args.atol)


if __name__ == "__main__":
    sys.exit(main())
