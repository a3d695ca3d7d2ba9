"""Which engine fits a run: the local engine on the driver when its predicted peak fits the driver's memory, else
the Spark engine.  The one rule behind ``crowdspark aggregate``, ``spark-submit jobs/aggregate.py`` and the
pyspark.ml face (docs/engines.md).

:func:`choose_engine` decides, in this order:

1. ``engine.name = "local"``: the local engine (``reason = "setting"``).
2. ``engine.small_input_bytes = 0``: the Spark engine, always (``"forced distributed"``).
3. The input is below ``engine.small_input_bytes`` (the caller says so): the local engine on any master
   (``"small input"``).
4. The master is not a local one (``local``, ``local[N]``, ``local[*]``): the Spark engine (``"cluster
   master"``): the driver of a cluster is often a small machine, and the data was meant for the cluster.
5. The predicted peak of the local engine's fit (:func:`predict_local`, from an :class:`InputEstimate`) is at
   most the driver's budget (:func:`crowdspark.engine.memory.configured_budget`: ``engine.max_memory``, else
   ``engine.memory_share`` of the host's cgroup limit or physical memory): the local engine (``"memory"``);
   above it, the Spark engine (``"memory"``), which on a local master can spill to disk.

An :class:`InputEstimate` comes from the files before anything is read (:func:`estimate_files`: the labels
from the Parquet footers' row counts, or from a CSV file's size over the bytes per line of its first MiB; the
items, workers and classes from the first rows, scaled to all the labels by the growth of their distinct
counts within the sample, :func:`_scaled`) or from a DataFrame's row count and a sample of its rows
(:func:`estimate_rows`).  Distinct counts grow at most linearly, so the scaled counts err high (towards
distributing) for inputs in random order, and are close for inputs ordered by item.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from crowdspark.engine.memory import (
    Budget,
    FitShape,
    Prediction,
    configured_budget,
    format_bytes,
    predict_configured,
)

__all__ = ["InputEstimate", "EngineChoice", "choose_engine", "estimate_files", "estimate_rows", "predict_local",
           "driver_master", "is_local_master", "SAMPLE_ROWS", "SAMPLE_BYTES", "READ_BYTES", "PROCESS_BYTES"]

log = logging.getLogger(__name__)

#: rows of the sample an estimate takes its items, workers and classes from
SAMPLE_ROWS = 200_000
#: bytes of a CSV file's head an estimate reads (its bytes per line and its sample)
SAMPLE_BYTES = 1 << 20
#: bytes per label the reader holds beside the fit's blocks while it reads and encodes (measured: Arrow's
#: dictionary columns and the codes, ``tests/test_engine_choice.py`` checks the whole prediction)
READ_BYTES = 24
#: bytes of the process before it reads (the interpreter, numpy, pandas, pyarrow and crowdspark: the peak RSS
#: of ``crowdspark aggregate --engine local`` on RTE's 8,000 labels, 158 MiB)
PROCESS_BYTES = 160 << 20
#: the masters whose executors run in the driver's process
_LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?")


@dataclass(frozen=True)
class InputEstimate:
    """The size of an input, before it is read.

    Attributes
    ----------
    n_labels, n_items, n_workers, n_classes : int
        L, and estimates of I, K and C (exact when ``sampled_labels == n_labels``).
    sampled_labels : int
        The rows the items, workers and classes were counted in.
    method : str
        How ``n_labels`` was found: ``parquet footers``, ``csv size``, ``rows``.
    """

    n_labels: int
    n_items: int
    n_workers: int
    n_classes: int
    sampled_labels: int
    method: str

    @property
    def shape(self) -> FitShape:
        return FitShape(self.n_items, self.n_workers, self.n_classes, self.n_labels)

    def to_dict(self) -> dict[str, Any]:
        return {"labels": self.n_labels, "items": self.n_items, "workers": self.n_workers,
                "classes": self.n_classes, "sampled_labels": self.sampled_labels, "method": self.method}


@dataclass(frozen=True)
class EngineChoice:
    """What :func:`choose_engine` decided, and why (``summary.json``'s ``engine_choice``).

    Attributes
    ----------
    engine : {"local", "spark"}
    reason : str
        ``setting``, ``forced distributed``, ``small input``, ``cluster master`` or ``memory``.
    detail : str
        The decision in a sentence (logged).
    master : str, optional
    estimate : InputEstimate, optional
    prediction : Prediction, optional
        The local engine's predicted peak on the driver's host.
    budget : Budget, optional
    """

    engine: str
    reason: str
    detail: str
    master: str | None = None
    estimate: InputEstimate | None = None
    prediction: Prediction | None = None
    budget: Budget | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"engine": self.engine, "reason": self.reason, "detail": self.detail,
                               "master": self.master}
        if self.estimate is not None:
            out["input"] = self.estimate.to_dict()
        if self.prediction is not None:
            out["predicted_peak_bytes"] = self.prediction.peak_bytes
        if self.budget is not None:
            out.update(budget_bytes=self.budget.bytes, budget_source=self.budget.kind,
                       budget_detail=self.budget.source)
        return out


def is_local_master(master: str | None) -> bool:
    """Whether ``master`` runs its executors in the driver's process (``local``, ``local[N]``, ``local[*]``,
    ``local[N,F]``); ``None`` (unknown) is not."""
    return master is not None and _LOCAL_MASTER.fullmatch(master.strip()) is not None


def driver_master(spark: Any = None, requested: str | None = None) -> str | None:
    """The Spark master the run has or would start: the session's, else ``requested`` (``--master``), else
    spark-submit's (read from the JVM it started, without starting a SparkContext), else the ``--master`` of
    ``PYSPARK_SUBMIT_ARGS``, else ``local[*]`` (what :func:`crowdspark.spark_session.build_session` starts
    from plain Python); ``None`` when spark-submit's settings do not say."""
    if spark is not None:
        return spark.sparkContext.master
    if requested:
        return requested
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # spark-submit started the JVM and this process
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()
        return SparkConf().get("spark.master", None)
    submit = os.environ.get("PYSPARK_SUBMIT_ARGS")
    if submit:
        found = re.search(r"--master[ =](\S+)", submit)
        return found.group(1) if found else None
    return "local[*]"


def _scaled(values: pd.Series, total: int) -> int:
    """The distinct ``values`` of a sample's rows, scaled to ``total`` rows: the power law ``d(n) = a n^b``
    through the distinct counts of the sample's first half and of the whole sample (``b = 1``: linear, for
    values that keep coming, such as the items of labels ordered by item; ``b`` near 0 for values the sample
    already holds nearly all of, such as the workers), at least the sample's count and at most ``total``."""
    sampled = len(values)
    count = int(values.nunique())
    if sampled >= total or sampled < 2:
        return count
    half = int(values.iloc[: sampled // 2].nunique())
    exponent = min(1.0, max(0.0, math.log(count / half) / math.log(sampled / (sampled // 2)))) if half else 1.0
    return int(min(total, max(count, math.ceil(count * (total / sampled) ** exponent))))


def _from_sample(sample: pd.DataFrame, columns: tuple[str, str, str], n_labels: int, n_classes: int,
                 method: str) -> InputEstimate:
    """An estimate from the first rows ``sample`` (columns item, worker, label) of ``n_labels`` labels;
    ``n_classes`` > 0 is the configured class set's size."""
    item, worker, label = columns
    n = len(sample)
    scaled = [_scaled(sample[c], n_labels) if c in sample.columns else n_labels for c in (item, worker)]
    classes = int(sample[label].nunique()) if label in sample.columns else 0
    return InputEstimate(
        n_labels=n_labels,
        n_items=scaled[0],
        n_workers=scaled[1],
        n_classes=max(n_classes, classes, 2),
        sampled_labels=min(n, n_labels),
        method=method,
    )


def _parquet_head(files: list[str], columns: tuple[str, ...]) -> tuple[int, pd.DataFrame]:
    """The labels in the footers of ``files``, and the first :data:`SAMPLE_ROWS` rows of ``columns``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    total, batches, taken = 0, [], 0
    for name in files:
        handle = pq.ParquetFile(name)
        total += handle.metadata.num_rows
        present = [c for c in columns if c in handle.schema_arrow.names]
        if taken < SAMPLE_ROWS and present:
            batch = next(handle.iter_batches(batch_size=SAMPLE_ROWS - taken, columns=present), None)
            if batch is not None:
                # Arrow-backed columns: their distinct counts run in Arrow, no Python string per cell
                batches.append(pa.Table.from_batches([batch]).to_pandas(types_mapper=pd.ArrowDtype))
                taken += batch.num_rows
    sample = pd.concat(batches, ignore_index=True) if batches else pd.DataFrame(columns=list(columns))
    return total, sample


def _csv_head(files: list[str]) -> tuple[int, pd.DataFrame]:
    """The labels of CSV ``files`` estimated from their sizes over the bytes per line of the first file's first
    and last :data:`SAMPLE_BYTES` (ids often grow longer down a file), and the rows of its head.  A compressed
    file counts ten times its size, over the bytes per line of its decompressed head."""
    import io

    sizes = [os.path.getsize(f) * (10 if f.endswith((".gz", ".bz2")) else 1) for f in files]
    first = files[0]
    tail = b""
    if first.endswith((".gz", ".bz2")):
        from crowdspark.io.pandas_reader import _open_text

        with _open_text(first) as text:
            head = text.read(SAMPLE_BYTES).encode()
    else:
        with open(first, "rb") as handle:
            head = handle.read(SAMPLE_BYTES)
            if sizes[0] > 2 * SAMPLE_BYTES:
                handle.seek(sizes[0] - SAMPLE_BYTES)
                tail = handle.read()
                tail = tail[tail.find(b"\n") + 1:]
    if len(head) == SAMPLE_BYTES:
        head = head[: head.rfind(b"\n") + 1]
    sample = pd.read_csv(io.BytesIO(head), dtype=str, keep_default_na=False)
    if len(files) == 1 and sizes[0] == len(head):
        return len(sample), sample
    lines = len(sample) + 1 + tail.count(b"\n")
    per_line = (len(head) + len(tail)) / lines
    return math.ceil(sum(sizes) / per_line), sample


def _estimate(files: tuple[str, ...], fmt: str, columns: tuple[str, str, str], n_classes: int) -> InputEstimate:
    if fmt == "parquet":
        total, sample = _parquet_head(list(files), columns)
        return _from_sample(sample, columns, total, n_classes, "parquet footers")
    if fmt == "csv":
        total, sample = _csv_head(list(files))
        return _from_sample(sample, columns, total, n_classes, "csv size")
    # JSON lines: about 60 bytes per label, every item and worker distinct (an upper bound)
    total = max(1, sum(os.path.getsize(f) for f in files) // 60)
    return InputEstimate(total, total, total, max(n_classes, 2), 0, "json size")


@functools.lru_cache(maxsize=8)
def _cached_estimate(key: tuple, fmt: str, columns: tuple[str, str, str], n_classes: int) -> InputEstimate:
    return _estimate(tuple(name for name, _, _ in key), fmt, columns, n_classes)


def estimate_files(files: list[str], fmt: str, columns: tuple[str, str, str], n_classes: int = 0) -> InputEstimate:
    """An :class:`InputEstimate` of local label ``files`` in ``fmt`` (``parquet``, ``csv``, ``json``), read from
    their footers or sizes and their first rows (see the module docstring); remembered per file, size and time.

    Parameters
    ----------
    files : list of str
    fmt : str
    columns : (str, str, str)
        The item, worker and label columns.
    n_classes : int
        The configured class set's size (0: none).
    """
    key = tuple((f, os.path.getsize(f), os.path.getmtime(f)) for f in files)
    return _cached_estimate(key, fmt, columns, n_classes)


def estimate_rows(n_rows: int, sample: pd.DataFrame, columns: tuple[str, str, str],
                  n_classes: int = 0) -> InputEstimate:
    """An :class:`InputEstimate` of a DataFrame of ``n_rows`` rows whose first rows are ``sample``."""
    return _from_sample(sample, columns, n_rows, n_classes, "rows")


def predict_local(config: Any, estimate: InputEstimate) -> Prediction | None:
    """The predicted peak of the process that reads and fits ``estimate``'s input with the local engine: the fit
    (:func:`crowdspark.engine.memory.predict_configured`), :data:`READ_BYTES` per label for the reader and
    :data:`PROCESS_BYTES`; ``None`` when the configured algorithm cannot run on that shape."""
    fit = predict_configured(config, estimate.shape, "local")
    if fit is None:
        return None
    read = READ_BYTES * estimate.n_labels
    parts = {**fit.parts, "read": read, "process": PROCESS_BYTES}
    return replace(fit, peak_bytes=fit.peak_bytes + read + PROCESS_BYTES, parts=parts)


def choose_engine(config: Any, master: str | None, *, small: bool = False,
                  estimate: InputEstimate | None = None, budget: Budget | None = None) -> EngineChoice:
    """The engine of a run (the rule of the module docstring).

    Parameters
    ----------
    config : RunConfig
    master : str or None
        The Spark master (:func:`driver_master`); ``None``: unknown, treated as a cluster.
    small : bool
        The input is below ``engine.small_input_bytes``.
    estimate : InputEstimate, optional
        The input's size; without it the rule cannot predict and distributes.
    budget : Budget, optional
        The driver's budget; default :func:`crowdspark.engine.memory.configured_budget` (tests inject one).
    """
    engine = config.engine
    if engine.name == "local":
        return EngineChoice("local", "setting", "engine.name = local", master)
    if not engine.small_input_bytes:
        return EngineChoice("spark", "forced distributed", "engine.small_input_bytes = 0: always distributed",
                            master)
    if small:
        return EngineChoice("local", "small input",
                            f"the input is below engine.small_input_bytes = {engine.small_input_bytes:,}", master)
    if not is_local_master(master):
        return EngineChoice("spark", "cluster master",
                            f"the master {master or '(unknown)'} is not local: inputs above "
                            f"engine.small_input_bytes = {engine.small_input_bytes:,} are distributed", master)
    if estimate is None:
        return EngineChoice("spark", "memory", "the input's size cannot be estimated before Spark reads it", master)
    budget = budget or configured_budget(config)
    prediction = predict_local(config, estimate)
    if prediction is None:
        return EngineChoice("spark", "memory", "no prediction for this algorithm on this input", master, estimate,
                            None, budget)
    fits = prediction.peak_bytes <= budget.bytes
    detail = (f"the local engine's predicted peak, {format_bytes(prediction.peak_bytes)} for about "
              f"{estimate.n_labels:,} labels, is {'within' if fits else 'above'} the driver's budget of "
              f"{format_bytes(budget.bytes)} ({budget.source})")
    return EngineChoice("local" if fits else "spark", "memory", detail, master, estimate, prediction, budget)
