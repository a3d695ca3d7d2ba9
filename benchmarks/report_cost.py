"""What the run report costs on the driver: wall time and peak memory of ``crowdspark report``.

    .venv/bin/python -m benchmarks.report_cost --items 100000 500000

For each size, synthetic Dawid-Skene labels (``--labels-per-item`` per item, ``--workers`` workers, 3 classes)
and their truth are written under a temporary folder; two ``ds`` nights run on the local engine with gold (the
first on 80% of the labels, the second on all of them, warm-started from the first); then ``crowdspark report``
runs in a fresh process on each night: the first has no previous run, the second also compares with the first
(the only part that holds item-level columns in memory). Prints one row per report, with the load average.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import machine, run_measured
from crowdspark.synthetic import dawid_skene_data

_CLI = [sys.executable, "-m", "crowdspark"]


def _write_data(folder: Path, items: int, workers: int, labels_per_item: int) -> None:
    labels, truth, _ = dawid_skene_data(items, workers, 3, labels_per_item, seed=1)
    labels = labels.astype(str)
    labels.to_parquet(folder / "labels.parquet", index=False)
    labels.iloc[: len(labels) * 4 // 5].to_parquet(folder / "labels_first.parquet", index=False)
    truth.astype(str).to_parquet(folder / "truth.parquet", index=False)


def _nights(folder: Path) -> None:
    root = folder / "runs"
    for run_id, labels in (("2026-11-01", "labels_first.parquet"), ("2026-11-02", "labels.parquet")):
        subprocess.run([*_CLI, "aggregate", "--quiet", "--engine", "local", "--algorithm", "ds",
                        "--labels", str(folder / labels), "--gold", str(folder / "truth.parquet"),
                        "--output", str(root), "--run-id", run_id, "--warm-start", str(root)],
                       check=True, capture_output=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[100_000, 500_000])
    parser.add_argument("--workers", type=int, default=2000)
    parser.add_argument("--labels-per-item", type=int, default=5)
    args = parser.parse_args(argv)
    print(machine())
    print(f"load average before: {os.getloadavg()}")
    print("| items | labels | report of | wall s | peak RSS MiB |")
    print("|---|---|---|---|---|")
    for items in args.items:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            _write_data(folder, items, args.workers, args.labels_per_item)
            _nights(folder)
            for run_id, what in (("2026-11-01", "a first night (no previous run)"),
                                 ("2026-11-02", "a warm-started night (with the comparison)")):
                run = folder / "runs" / f"run_id={run_id}"
                wall, peak, _ = run_measured([*_CLI, "report", str(run)], dict(os.environ))
                print(f"| {items:,} | {items * args.labels_per_item:,} | {what} | {wall:.1f} | {peak:.0f} |",
                      flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
