"""A Python worker's first touch of its blocks, and the per-item quality columns: this tree against another.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.first_touch --old ../base --repeats 2

What a sweep session's task does first at 100M labels on two cores: it reads 13 blocks of 3.85M labels
(385k items, 100k workers, 5 classes; synthetic, built in the process) from their spill files, builds their
incidence matrices and initializes Dawid-Skene on each, keeping them all.  Then ``quality.item_quality`` on one
block (the item table's quality columns).  Each tree runs in its own fresh process (``PYTHONPATH`` = the tree),
the trees alternate ``--repeats`` times; the table gives the medians of each step's wall time and the process's
peak RSS.  Both trees must give the same DS statistics and quality columns (checked).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, load_average, machine

_CHILD = r"""
import hashlib, json, os, resource, sys, tempfile, time
import numpy as np
from crowdspark.block import blocks_from_codes
from crowdspark.engine.spark.resident import read_block, write_block
from crowdspark.models.common import incidence
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.quality import item_quality

n_items, n_workers, n_classes, per_item, n_blocks = (int(a) for a in sys.argv[1:6])
rng = np.random.default_rng(0)
codes = np.repeat(np.arange(n_items), per_item)
worker = rng.integers(0, n_workers, codes.size)
truth = rng.integers(0, n_classes, n_items)
label = np.where(rng.random(codes.size) < 0.7, truth[codes], rng.integers(0, n_classes, codes.size))
uniques = np.array([f"i{j:09d}" for j in range(n_items)], dtype=object)
[block] = blocks_from_codes(codes, uniques, worker, label, None, max_labels=codes.size)
folder = tempfile.TemporaryDirectory(prefix="crowdspark-first-touch-")
paths = [os.path.join(folder.name, f"b{i}.npz") for i in range(n_blocks)]
for path in paths:
    write_block(path, block)
del block, codes, worker, label, uniques
model = DawidSkene(n_workers, n_classes)
steps = {"read the spill files": 0.0, "build the incidence matrices": 0.0, "initialize DS": 0.0}
blocks, total = [], None
for path in paths:
    t0 = time.perf_counter()
    held = read_block(path)
    t1 = time.perf_counter()
    incidence(held, n_workers, n_classes)
    t2 = time.perf_counter()
    _, stats = model.init_block(held)
    t3 = time.perf_counter()
    blocks.append(held)
    total = stats if total is None else {k: total[k] + stats[k] for k in stats}
    steps["read the spill files"] += t1 - t0
    steps["build the incidence matrices"] += t2 - t1
    steps["initialize DS"] += t3 - t2
steps["peak RSS (MiB)"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
result = model.finish_block(blocks[0], None, model.init_params(total))
confusion = np.full((n_classes, n_classes), 0.1) + 0.5 * np.eye(n_classes)
times = []
for _ in range(5):
    t0 = time.perf_counter()
    columns = item_quality(blocks[0], result.posterior, result.label, confusion)
    times.append(time.perf_counter() - t0)
steps["item_quality, one block (best of 5)"] = min(times)
digest = hashlib.sha256(total["confusion"].tobytes())
for name in sorted(columns):
    digest.update(name.encode() + np.ascontiguousarray(columns[name]).tobytes())
print(json.dumps({"steps": steps, "digest": digest.hexdigest()}))
folder.cleanup()
"""


def run(tree: Path, args: argparse.Namespace) -> dict:
    """One fresh process of ``tree``'s code."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    sizes = [args.items, args.workers, args.classes, args.labels_per_item, args.blocks]
    out = subprocess.run([sys.executable, "-c", _CHILD, *map(str, sizes)], env=env, cwd=tree, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=True, help="the other tree")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--items", type=int, default=385_000, help="items per block")
    parser.add_argument("--labels-per-item", type=int, default=10)
    parser.add_argument("--workers", type=int, default=100_000)
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=13, help="blocks one worker holds")
    args = parser.parse_args()
    trees = {"new": ROOT, "old": Path(args.old).resolve()}
    before = load_average()
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.repeats):
        for name, tree in trees.items():
            runs[name].append(run(tree, args))
            print(f"{name}: {runs[name][-1]['steps']}", flush=True)
    digests = {r["digest"] for rs in runs.values() for r in rs}
    print(f"\n{args.blocks} blocks of {args.items * args.labels_per_item:,} labels ({args.items:,} items, "
          f"{args.workers:,} workers, {args.classes} classes), {args.repeats} runs each (medians); machine: "
          f"{machine()}; load average before {before}, after {load_average()}; same results: {len(digests) == 1}")
    print(f"| step | {' | '.join(trees)} |")
    print(f"|---|{'---|' * len(trees)}")
    for step in runs["new"][0]["steps"]:
        cells = [float(np.median([r["steps"][step] for r in runs[name]])) for name in trees]
        print(f"| {step} | {' | '.join(f'{c:.3f}' if c < 100 else f'{c:.0f}' for c in cells)} |")
    if len(digests) != 1:
        sys.exit("the trees give different statistics or quality columns")


if __name__ == "__main__":
    main()
