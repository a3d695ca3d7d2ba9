"""Shared pieces of the benchmarks: datasets on disk, engines, timing of fits."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"


def same_answers(a: str | Path, b: str | Path) -> bool:
    """Whether two results (or run roots: their whole answer, :func:`crowdspark.io.chain.read_items`) have the same
    items, item labels and posteriors (1e-9)."""
    from crowdspark.io.chain import read_items

    x, y = (read_items(str(p)).sort_values("item", ignore_index=True) for p in (a, b))
    return bool(len(x) == len(y) and (x["item"] == y["item"]).all() and (x["label"] == y["label"]).all()
                and np.allclose(np.stack(x["posterior"]), np.stack(y["posterior"]), rtol=0, atol=1e-9))


def machine() -> str:
    """A one-line description of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            names = [line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {sys.version.split()[0]}, {platform.system()}"


def spark_session(master: str = "local[2]"):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from crowdspark.spark_session import build_session

    spark = build_session(
        "crowdspark-bench", master=master, conf={"spark.driver.memory": "8g", "spark.sql.shuffle.partitions": "8"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def ds_dataset(
    spark, n_labels: int, labels_per_item: int = 10, n_classes: int = 5, seed: int = 0, n_workers: int = 0
) -> str:
    """Path of a synthetic Dawid-Skene Parquet dataset with ``n_labels`` labels (generated once).

    ``n_workers = 0``: one worker per 100 items, between 1k and 100k.  ``spark = None`` starts a session
    only if the data must be generated.
    """
    from crowdspark.synthetic import write_parquet

    n_items = n_labels // labels_per_item
    n_workers = n_workers or int(min(100_000, max(1_000, n_items // 100)))
    path = DATA / f"ds-{n_labels}-k{n_workers}-c{n_classes}-s{seed}"
    if not (path / "_SUCCESS").exists():
        write_parquet(spark or spark_session(), str(path), "ds", n_items, n_workers, n_classes, labels_per_item, seed,
                      truth_path=str(path) + "-truth")
    return str(path)


def timed_fit(model, engine) -> tuple[list[float], float]:
    """Per-iteration seconds and total seconds of a fit (no convergence warning)."""
    from crowdspark.engine.loop import fit

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fit(model, engine)
    return [h["seconds"] for h in result.history], time.perf_counter() - start


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def median(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")


# a wrapper process whose only children are the command's: its RUSAGE_CHILDREN peak is the largest process
# of that command's tree alone (the benchmark's own RUSAGE_CHILDREN would also hold earlier commands' peaks)
_WRAPPER = (
    "import resource, subprocess, sys; proc = subprocess.run(sys.argv[1:], check=True, capture_output=True, "
    "text=True); sys.stdout.write(proc.stdout); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def run_measured(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run ``command``; wall seconds, peak RSS (MiB) of the largest process of its tree, and its stdout."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _WRAPPER, *command], check=True, env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    *lines, peak_kib = proc.stdout.rstrip("\n").split("\n")
    return wall, int(peak_kib) / 1024, "\n".join(lines)
