"""The local engine's data path side by side: one labels set, as Parquet and as CSV, through several trees.

    git worktree add --detach ../old 982ecf9 && (cd ../old && bash scripts/setup.sh)
    .venv/bin/python -m benchmarks.local_datapath --labels 10000000 --tree old=../old --tree main=../main

Every run is a fresh ``python -m crowdspark aggregate --engine local`` (``benchmarks.datapath.run``: Dawid-Skene,
``--iterations`` iterations, ``tol = 0``) on the synthetic Dawid-Skene Parquet set of ``benchmarks.common.ds_dataset``
and on the same labels written once as a CSV file without quotes.  Each tree runs with its own ``.venv`` (a tree
without one runs with this tree's, its own code first on the path).  The runs alternate (this tree, then each
``--tree``) ``--repeats`` times; the table gives medians of wall time, peak RSS and the phases of ``summary.json``,
and every tree's ratios to this tree.
"""

from __future__ import annotations

import argparse
import os
from datetime import date
from itertools import product
from pathlib import Path

from benchmarks.common import DATA, ROOT, ds_dataset, machine
from benchmarks.datapath import _median, _phases, _uptime, run


def csv_copy(parquet: str) -> str:
    """The labels of the Parquet set ``parquet`` as one CSV file (written once, next to it)."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    path = DATA / f"{Path(parquet).name}.csv"
    if not path.exists():
        table = pq.read_table(parquet, columns=["item", "worker", "label"])
        partial = path.with_suffix(".partial")
        with open(partial, "wb") as handle:
            handle.write(b"item,worker,label\n")
            pacsv.write_csv(table, handle, pacsv.WriteOptions(include_header=False, quoting_style="none"))
        partial.rename(path)
    return str(path)


def _with_venv(tree: Path) -> Path:
    """``tree``, given this tree's virtual environment when it has none of its own."""
    venv = tree / ".venv"
    if not venv.exists():
        venv.symlink_to(ROOT / ".venv")
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH", help="another tree to run")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    parquet = ds_dataset(None, args.labels)
    inputs = {"parquet": parquet, "csv": csv_copy(parquet)}
    trees = {"this": ROOT, **{n: _with_venv(Path(p).resolve()) for n, p in (t.split("=", 1) for t in args.tree)}}
    load_before = _uptime()
    runs: dict[tuple[str, str], list[dict]] = {(t, f): [] for f in inputs for t in trees}
    for _, (fmt, labels), (name, tree) in product(range(args.repeats), inputs.items(), trees.items()):
        result = run(tree, "local", labels, args.iterations, "1g")
        ok = "failed" not in result
        runs[(name, fmt)] += [result] if ok else []
        described = f"{result['wall_s']:.1f} s, {result['rss_mib']:.0f} MiB, {result['timings']}" if ok else result
        print(f"{name} {fmt}: {described}", flush=True)
    heads = {name: os.popen(f"git -C {tree} rev-parse --short HEAD").read().strip() for name, tree in trees.items()}
    print(f"\n{args.labels:,} labels, local engine, {args.iterations} Dawid-Skene iterations, {args.repeats} run(s) "
          f"each (medians); trees: {heads}; machine: {machine()}; load average before {load_before}, after "
          f"{_uptime()}; date: {date.today()}")
    print("| input | tree | end to end (s) | peak RSS (MiB) | phases (s) | time / this | RSS / this |")
    print("|---|---|---|---|---|---|---|")
    for (name, fmt), rs in runs.items():
        if not rs or not runs[("this", fmt)]:
            continue
        wall, rss = _median(rs, "wall_s"), _median(rs, "rss_mib")
        base_wall, base_rss = _median(runs[("this", fmt)], "wall_s"), _median(runs[("this", fmt)], "rss_mib")
        print(f"| {fmt} | {name} ({heads[name]}) | {wall:.1f} | {rss:.0f} | {_phases(rs)} | "
              f"{wall / base_wall:.2f} | {rss / base_rss:.2f} |")
    for (name, fmt), rs in runs.items():
        if name != "this" and rs and runs[("this", fmt)]:
            print(f"{fmt}: this / {name} end to end = "
                  f"{_median(runs[('this', fmt)], 'wall_s') / _median(rs, 'wall_s'):.2f}, peak RSS = "
                  f"{_median(runs[('this', fmt)], 'rss_mib') / _median(rs, 'rss_mib'):.2f}")


if __name__ == "__main__":
    main()
