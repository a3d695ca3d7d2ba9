"""The Python side of the Spark engine's block building: one partition's pass, this tree against another.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.partition_pass --labels 10000000 --old ../base --repeats 3
    .venv/bin/python -m benchmarks.partition_pass --labels 10000000 --old ../base --steps

One partition of the one-pass reader (:func:`crowdspark.engine.spark.blocks._partition_pass`) as Spark hands it
over: ``1 / --parts`` of the rows of the synthetic Dawid-Skene file (``benchmarks.common.ds_dataset``), in a
random order, in Arrow batches of 200k rows, with a ``truth`` column (gold on a third of the items) unless
``--no-gold``.  Each tree's pass runs in its own process (``PYTHONPATH`` = the tree), the trees alternate
``--repeats`` times; the table gives the median process (CPU) time, which a loaded machine disturbs less than
wall time, and the wall time.  Both trees' passes must emit the same summary and blocks (checked).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, ds_dataset, machine

_CHILD = r"""
import hashlib, json, pickle, sys, time
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from crowdspark.engine.spark.blocks import _partition_pass

path, parts, gold = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
table = pq.read_table(path)
table = table.slice(0, table.num_rows // parts)
table = table.take(pa.array(np.random.default_rng(0).permutation(table.num_rows)))
if gold:
    items = table["item"].to_numpy(zero_copy_only=False)
    number = np.array([int(i[1:]) for i in items])
    truth = np.where(number % 3 == 0, (number % 5).astype(str).astype(object), None)
    table = table.append_column("truth", pa.array(truth, pa.string()))
batches = table.to_batches(max_chunksize=200_000)
cpu, wall = time.process_time(), time.perf_counter()
rows = list(_partition_pass(iter(batches), 2_000_000, None))
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
digest = hashlib.sha256()
for row in rows:
    payload = pickle.loads(row.column(1)[0].as_py())
    for name, value in sorted(vars(payload).items()):
        if name.startswith("_"):
            continue
        if isinstance(value, np.ndarray):
            value = value.astype(str) if value.dtype == object else value
            digest.update(name.encode() + np.ascontiguousarray(value).tobytes())
        else:
            digest.update(name.encode() + repr(value.to_pylist() if hasattr(value, "to_pylist") else value).encode())
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "rows": table.num_rows, "digest": digest.hexdigest()}))
"""

# --steps: the pass's steps one by one on the same partition (after one whole pass, so imports are done),
# process time of each, the minimum of 3 rounds
_STEPS = _CHILD.split("cpu, wall = time.process_time()")[0] + r"""
import tempfile
import pyarrow.compute as pc
from crowdspark.block import _sorted_rows, blocks_from_codes
from crowdspark.engine.spark.resident import spill
from crowdspark.io.rules import sorted_codes
from crowdspark.rng import item_keys

list(_partition_pass(iter(batches), 2_000_000, None))
spill_folder = tempfile.TemporaryDirectory(prefix="crowdspark-blocks-bench-")
folder = spill_folder.name
best = {}
for _ in range(3):
    steps, clock = {}, time.process_time()
    def lap(name):
        global clock
        now = time.process_time()
        steps[name], clock = now - clock, now
    table = pa.Table.from_batches(batches)
    labels, label = sorted_codes(table["label"]); lap("label codes")
    if gold:
        truths, truth = sorted_codes(table["truth"]); lap("truth codes")
    workers, worker = sorted_codes(table["worker"]); lap("worker codes")
    items, codes = sorted_codes(table["item"]); lap("item codes")
    uniques = items.to_numpy(zero_copy_only=False).astype(object); lap("item ids to Python strings")
    _sorted_rows(codes, worker, label, len(uniques)); lap("sort of the rows (in blocks_from_codes)")
    item_keys(uniques); lap("item keys (in blocks_from_codes)")
    blocks = blocks_from_codes(codes, uniques, worker, label, None, 2_000_000, None); lap("blocks_from_codes, all of it")
    for block in blocks:
        spill(folder, "bench", block)
    lap("spill")
    best = {k: min(v, best.get(k, v)) for k, v in steps.items()}
spill_folder.cleanup()
print(json.dumps(best))
"""


def run(tree: Path, path: str, parts: int, gold: bool, child: str = _CHILD) -> dict:
    """One pass of ``tree``'s code in a fresh process (``child``: :data:`_STEPS` times its steps)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", child, path, str(parts), "1" if gold else "0"], env=env, cwd=tree,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def print_steps(trees: dict[str, Path], path: str, parts: int, gold: bool) -> None:
    """The table of the pass's steps in each tree (process time, s)."""
    steps = {name: run(tree, path, parts, gold, _STEPS) for name, tree in trees.items()}
    print(f"| step | {' | '.join(steps)} |")
    print(f"|---|{'---|' * len(steps)}")
    for step in steps["new"]:
        print(f"| {step} | {' | '.join(f'{s[step]:.3f}' for s in steps.values())} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=10_000_000)
    parser.add_argument("--parts", type=int, default=4, help="partitions of the file (the pass sees one)")
    parser.add_argument("--old", required=True, help="the other tree (with crowdspark/engine/spark/blocks.py)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-gold", action="store_true")
    parser.add_argument("--steps", action="store_true", help="time the pass's steps one by one instead")
    args = parser.parse_args()
    path = ds_dataset(None, args.labels)
    trees = {"new": ROOT, "old": Path(args.old).resolve()}
    if args.steps:
        print(f"load average before {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print_steps(trees, path, args.parts, not args.no_gold)
        print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.repeats):
        for name, tree in trees.items():
            runs[name].append(run(tree, path, args.parts, not args.no_gold))
            print(f"{name}: {runs[name][-1]}", flush=True)
    digests = {r["digest"] for rs in runs.values() for r in rs}
    rows = runs["new"][0]["rows"]
    print(f"\none partition of {rows:,} labels (1/{args.parts} of {args.labels:,}), gold: {not args.no_gold}, "
          f"{args.repeats} runs each (medians); machine: {machine()}; load average before {load_before}, after "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; same blocks: {len(digests) == 1}")
    print("| tree | process time (s) | wall (s) |")
    print("|---|---|---|")
    medians = {}
    for name, rs in runs.items():
        medians[name] = float(np.median([r["cpu_s"] for r in rs]))
        print(f"| {name} | {medians[name]:.2f} | {np.median([r['wall_s'] for r in rs]):.2f} |")
    print(f"process time new / old = {medians['new'] / medians['old']:.2f}")
    if len(digests) != 1:
        sys.exit("the trees' passes emit different blocks")


if __name__ == "__main__":
    main()
