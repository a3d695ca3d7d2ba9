"""An incremental night on a local master, by engine, side by side.

    source scripts/env.sh
    .venv/bin/python -m benchmarks.night_engine --workdir /tmp/night-engine [--repeats 1]

A 12-day lake of 10,000 new items and about 33,000 labels a day (``crowdspark.lake.LakeSpec(days=12,
items_per_day=10000, labels_per_item=3, n_workers=200, drifting_workers=3, spammers=2, revisit=0.1)``, gold
included) is written once under ``--workdir``; nights 1-11 run once with ``conf/nightly.toml --set
incremental.mode=on --set input.window_days=0 --engine local`` (nights may switch engines); each is written into
a new ``*-partial-*`` folder renamed into place when complete, and nothing is deleted.  Each repeat then runs
night 12, in fresh processes and each into its own copy of those eleven nights:

* ``crowdspark aggregate`` with those settings (``conf/nightly.toml`` names the spark engine: the night chooses);
* the same with ``engine.small_input_bytes=0`` (always distributed: Spark reads and fits);
* ``crowdspark aggregate --engine local``;
* ``spark-submit --master local[2] jobs/aggregate.py`` with those settings (the night chooses);
* ``spark-submit --master local[2]`` of an empty script: what starting spark-submit costs.

It prints each run's wall seconds, peak RSS, engine and the reason of the choice (``summary.json``'s
``engine_choice``), the medians, the ratio of each to ``--engine local``, and whether every night 12 gives the
answer of ``--engine local`` (labels, and posteriors to 1e-9, of ``read_items`` over the run root).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, load_average, machine, median, run_measured, same_answers

SPEC_ARGS = dict(days=12, items_per_day=10_000, labels_per_item=3, n_workers=200, drifting_workers=3, spammers=2,
                 revisit=0.1)
NIGHTLY = ["--config", str(ROOT / "conf" / "nightly.toml"), "--set", "incremental.mode=on", "--set",
           "input.window_days=0", "--quiet"]
LOCAL = "crowdspark aggregate --engine local"


def lake(workdir: Path) -> tuple[str, str, list[str]]:
    """The lake's labels and gold in ``workdir/data`` (written once, into a new folder renamed into place when
    complete), and its days."""
    from crowdspark.lake import LakeSpec, make_lake, write_lake

    spec = LakeSpec(**SPEC_ARGS)
    data = workdir / "data"
    if not data.exists():
        partial = Path(tempfile.mkdtemp(prefix="data-partial-", dir=workdir))
        write_lake(make_lake(spec), str(partial / "lake"))
        partial.rename(data)
    return str(data / "lake"), str(data / "lake_truth"), [spec.date(d) for d in range(spec.days)]


def night_args(labels: str, gold: str, out: str, day: str) -> list[str]:
    return ["--labels", labels, "--gold", gold, "--output", out, "--run-id", day, "--warm-start", out, *NIGHTLY]


def history(labels: str, gold: str, days: list[str], workdir: Path, env: dict[str, str]) -> Path:
    """The run root after nights 1-11 (run once, with the local engine, into a new folder renamed into place when
    complete)."""
    out = workdir / "nights"
    if not out.exists():
        partial = Path(tempfile.mkdtemp(prefix="nights-partial-", dir=workdir))
        for day in days[:-1]:
            subprocess.run([sys.executable, "-m", "crowdspark", "aggregate",
                            *night_args(labels, gold, str(partial / "runs"), day), "--engine", "local"],
                           check=True, env=env)
        (partial / "runs").rename(out)
        partial.rmdir()
    return out


def commands(labels: str, gold: str, day: str, out: Path) -> dict[str, tuple[list[str], Path | None]]:
    """Each way of running night 12, and the run root it writes into (``None``: writes nothing)."""
    bin_dir = Path(sys.executable).parent
    submit = [str(bin_dir / "spark-submit"), "--master", "local[2]"]
    cli = [sys.executable, "-m", "crowdspark", "aggregate"]
    roots = {name: out / name for name in ("chosen", "spark", "local", "submit")}
    return {
        "crowdspark aggregate, conf/nightly.toml": ([*cli, *night_args(labels, gold, str(roots["chosen"]), day)],
                                                    roots["chosen"]),
        "the same, engine.small_input_bytes=0": ([*cli, *night_args(labels, gold, str(roots["spark"]), day), "--set",
                                                  "engine.small_input_bytes=0"], roots["spark"]),
        LOCAL: ([*cli, *night_args(labels, gold, str(roots["local"]), day), "--engine", "local"], roots["local"]),
        "spark-submit local[2] jobs/aggregate.py, conf/nightly.toml": (
            [*submit, str(ROOT / "jobs" / "aggregate.py"), *night_args(labels, gold, str(roots["submit"]), day)],
            roots["submit"]),
        "spark-submit local[2], an empty script": ([*submit, str(out / "empty.py")], None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": str(ROOT)}
    labels, gold, days = lake(workdir)
    nights = history(labels, gold, days, workdir, env)
    print(machine())
    print(f"night {len(days)} ({days[-1]}) of the lake at {labels}, after nights 1-{len(days) - 1} at {nights}")
    print("| repeat | command | wall (s) | peak RSS (MiB) | engine | reason | load |")
    print("|---|---|---|---|---|---|---|")
    walls: dict[str, list[float]] = {}
    same: list[bool] = []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory(dir=workdir) as scratch:
            out = Path(scratch)
            (out / "empty.py").write_text("")
            runs = commands(labels, gold, days[-1], out)
            for name, (command, root) in runs.items():
                if root is not None:
                    shutil.copytree(nights, root)
                load = load_average().split()[0]
                wall, peak, _ = run_measured(command, env)
                walls.setdefault(name, []).append(wall)
                engine = reason = ""
                if root is not None:
                    summary = json.loads((root / f"run_id={days[-1]}" / "summary.json").read_text())
                    engine, reason = summary["engine"], summary.get("engine_choice", {}).get("reason", "")
                print(f"| {repeat + 1} | {name} | {wall:.1f} | {peak:.0f} | {engine} | {reason} | {load} |",
                      flush=True)
            local_root = runs[LOCAL][1]
            same.extend(same_answers(root, local_root) for _, root in runs.values() if root not in (None, local_root))
    local = median(walls[LOCAL])
    print("\n| command | median wall (s) | / --engine local |")
    print("|---|---|---|")
    for name, values in walls.items():
        print(f"| {name} | {median(values):.1f} | {median(values) / local:.2f} |")
    print(f"\nevery night 12 gives --engine local's answer: {all(same)}")


if __name__ == "__main__":
    main()
