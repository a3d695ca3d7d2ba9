"""What the run report costs on the driver: wall time and peak memory of ``crowdspark report``.

    .venv/bin/python -m benchmarks.report_cost --items 100000 500000
    source scripts/env.sh && .venv/bin/python -m benchmarks.report_cost --items --spark-labels 10000000

For each size, synthetic Dawid-Skene labels (``--labels-per-item`` per item, ``--workers`` workers, 3 classes)
and their truth are written under a temporary folder; two ``ds`` nights run on the local engine with gold (the
first on 80% of the labels, the second on all of them, warm-started from the first); then ``crowdspark report``
runs in a fresh process on each night: the first has no previous run, the second also compares with the first
(the only part that holds item-level columns in memory). Then the history page of a run root of
``--history-nights`` nights (the second night's ``summary.json``, ``workers/`` and ``relabel/`` linked into that
many ``run_id=`` folders): ``crowdspark report ROOT --history``. Prints one row per page, with the load average.

``--spark-labels N`` measures the pages side by side with the run they describe: one ``spark-submit --master
local[2] jobs/aggregate.py`` Dawid-Skene night with gold on the benchmarks' synthetic data of N labels (10 per
item, 10,000 workers, 5 classes; :func:`benchmarks.common.ds_dataset`), then its report, then the history page
of ``--history-nights`` copies of it, and the pages' share of the run's wall time and CPU time (user + system
of each command's process tree: the wall time of a page on a shared machine is its CPU time stretched by the
load, while the run also waits on the JVM); then the CPU time of each page built in one process after its
imports; then the next night of the same job into the root of those nights with ``--report`` (and
``nightly.keep_runs=0``), which writes its report and the root's history page (of ``--history-nights`` + 1
nights) in its own process, and logs each page's CPU seconds: the pages' share of the rest of that run's CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, ds_dataset, machine, run_measured
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


def _history_root(night: Path, root: Path, nights: int) -> None:
    """A run root of ``nights`` nights, each the tables of ``night`` (linked, not copied: what the history page
    reads, and the items and gold counts a later night's report compares with), dated one day apart."""
    import datetime as dt
    import json
    import shutil

    from crowdspark.io.sink import make_run_root

    make_run_root(str(root))
    summary = json.loads((night / "summary.json").read_text())
    for n in range(nights):
        day = (dt.date(2026, 1, 1) + dt.timedelta(days=n)).isoformat()
        run = root / f"run_id={day}"
        for table in ("workers", "relabel", "items", "gold_workers"):
            if (night / table).is_dir():
                shutil.copytree(night / table, run / table, copy_function=os.link)
        summary["inputs"] = {**summary.get("inputs", {}), "as_of": day, "run_id": day}
        (run / "summary.json").write_text(json.dumps(summary))
        shutil.copy(night / "_CROWDSPARK.json", run / "_CROWDSPARK.json")


def _measured(command: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds (user + system of the command's whole process tree, which the wrapper of
    :func:`run_measured` waits for), peak RSS MiB and stdout of ``command``."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, peak, out = run_measured(command, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, peak, out


def _pages_logged(out: str) -> dict[str, float]:
    """The CPU seconds the log of an ``aggregate --report`` run under spark-submit (whose Python writes its log
    to stdout) gives each page it wrote."""
    import re

    pages = {m.group(1): float(m.group(2)) for m in re.finditer(
        r"crowdspark\.cli: (report|history page) written to .* \(([0-9.]+) CPU s\)", out)}
    if set(pages) != {"report", "history page"}:
        raise RuntimeError(f"the run did not log both pages it writes: {out[-3000:]}")
    return pages


#: CPU seconds of each page built in a process that has imported what it needs (the run's own process writes
#: the pages so with ``aggregate --report``): the pages' work without the interpreter's start and the imports
_AFTER_IMPORTS = (
    "import sys, time; import crowdspark.cli, crowdspark.report.facts, crowdspark.report.page, "
    "crowdspark.report.history, crowdspark.report.history_page, crowdspark.io.lock; "
    "from crowdspark.report import build_history, build_report; start = time.process_time(); "
    "build_report(sys.argv[1]); middle = time.process_time(); build_history(sys.argv[2]); "
    "print(middle - start, time.process_time() - middle)"
)


def _spark_side_by_side(labels: int, nights: int) -> None:
    """One spark-submit night of ``labels`` labels, its report and a history of ``nights`` copies of it."""
    path = ds_dataset(None, labels, n_workers=10_000)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        command = [str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]", "--driver-memory",
                   "8g", str(ROOT / "jobs" / "aggregate.py"), "--labels", path, "--gold", path + "-truth",
                   "--algorithm", "ds", "--quiet", "--output", str(root), "--run-id", "2026-11-01"]
        run = _measured(command, env)
        night = root / "run_id=2026-11-01"
        report = _measured([*_CLI, "report", str(night)], dict(os.environ))
        history = Path(tmp) / "history"
        _history_root(night, history, nights)
        pages = _measured([*_CLI, "report", str(history), "--history"], dict(os.environ))
        warm = [float(x) for x in subprocess.run([sys.executable, "-c", _AFTER_IMPORTS, str(night), str(history)],
                                                 check=True, capture_output=True, text=True).stdout.split()]
        # the next night of the same job into the root of those nights, writing its report and the root's history
        # page itself (aggregate --report); the pages' CPU is the process time the run logs for each
        nightly = [*command[:command.index("--output")], "--output", str(history), "--run-id", "2026-12-01",
                   "--report", "--set", "nightly.keep_runs=0"]
        nightly.remove("--quiet")
        job = _measured(nightly, env)
    print("| what | wall s | CPU s | peak RSS MiB |\n|---|---|---|---|")
    for what, (wall, cpu, peak, _) in ((f"spark-submit --master local[2], ds, {labels:,} labels, gold", run),
                                       ("crowdspark report of that night", report),
                                       (f"crowdspark report --history of {nights} such nights", pages),
                                       (f"the same spark-submit with --report into the root of {nights} nights",
                                        job)):
        print(f"| {what} | {wall:.1f} | {cpu:.1f} | {peak:.0f} |")
    for unit, k in (("wall", 0), ("CPU", 1)):
        print(f"pages / run, {unit}: report {report[k] / run[k]:.3f}, history {pages[k] / run[k]:.3f}, "
              f"both {(report[k] + pages[k]) / run[k]:.3f}")
    print(f"after the imports (as aggregate --report writes them in the run's process), CPU s: report {warm[0]:.2f}, "
          f"history {warm[1]:.2f}; pages / run {warm[0] / run[1]:.3f}, {warm[1] / run[1]:.3f}, "
          f"both {sum(warm) / run[1]:.3f}")
    written = _pages_logged(job[3])
    print(f"aggregate --report, the pages' CPU s as the run logs them: report {written['report']:.2f}, history page "
          f"{written['history page']:.2f}; pages / the rest of that run's CPU "
          f"{sum(written.values()) / (job[1] - sum(written.values())):.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="*", default=[100_000, 500_000])
    parser.add_argument("--workers", type=int, default=2000)
    parser.add_argument("--labels-per-item", type=int, default=5)
    parser.add_argument("--history-nights", type=int, default=90)
    parser.add_argument("--spark-labels", type=int, help="also measure the pages next to a spark-submit night")
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
            history = folder / "history"
            _history_root(folder / "runs" / "run_id=2026-11-02", history, args.history_nights)
            wall, peak, _ = run_measured([*_CLI, "report", str(history), "--history"], dict(os.environ))
            print(f"| {items:,} | {items * args.labels_per_item:,} | the history of {args.history_nights} such nights "
                  f"| {wall:.1f} | {peak:.0f} |", flush=True)
    if args.spark_labels:
        _spark_side_by_side(args.spark_labels, args.history_nights)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
