"""Running a reproduction: fit every (dataset, method, seed), record its numbers, read and write the records.

Each run records the error rate against gold, two negative log-likelihoods, the per-level average labeling
error (paper 5.3.4), the iteration history of seed 0 and the wall-clock time.

The two NLLs
------------
* ``gold_nll``: ``metrics.nll`` of the run summary, the mean over gold items of ``-log posterior[gold]``
  (how well the posterior predicts the gold label).
* ``paper_nll``: the paper's Figure 3 quantity ``-log p(L | pi, T, Q)`` of the fitted model, computed for
  every model from its published outputs: ``T`` the predicted label of each item, ``Q`` its predicted
  level (models with levels), ``pi`` the worker table's ``level_confusion`` (K, H, C, C) or ``confusion``
  (K, C, C) (posterior means for the samplers, EM estimates for DS, vote-count estimates for MV).
  Reported per label (divided by the number of labels) so datasets share an axis; ``inf`` when a label
  has probability 0 under the fitted tables (majority vote's empirical tables can).  The samplers' own
  trace ``history[-1]["loglik"]`` (``log p(L | pi, T, Q)`` at the last sweep's draw) is kept as
  ``sampler_loglik``.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from crowdspark.errors import ConfigError, CrowdsparkError
from jobs.reproduce.datasets import DEFAULT_DATASETS, Dataset, dataset_stats, resolve_datasets, worker_accuracy
from jobs.reproduce.methods import Method, default_methods, parse_methods, run_params

__all__ = [
    "ReproduceConfig",
    "Fitted",
    "RunRecord",
    "Results",
    "fit_local",
    "fit_spark",
    "paper_loglik",
    "record_from_fit",
    "run_one",
    "run_experiments",
    "load_results",
    "jsonable",
]

log = logging.getLogger(__name__)

#: the keys of ``results.json`` that :func:`load_results` reads
RESULTS_MEASURED = ("config", "datasets", "methods", "worker_accuracy", "records")


@dataclass(frozen=True)
class ReproduceConfig:
    """Everything a reproduction needs.

    Parameters
    ----------
    datasets : tuple of str
        Names of folders under ``data_root``, paths to folders with ``labels.csv``/``truth.csv``, or
        ``"synthetic"`` (the paper's set from :func:`crowdspark.synthetic.paper_synthetic`).
    methods : tuple of str
        Method keys (:func:`jobs.reproduce.methods.parse_methods`); empty = every registered algorithm, the
        paper presets and the initialization ablation.
    runs : int
        Seeds ``0 .. runs - 1`` per (dataset, method).
    quick : bool
        Apply :data:`jobs.reproduce.methods.QUICK_PARAMS` (tests, smoke runs).
    engine : {"local", "spark"}
    data_root : str
        Folder holding the bundled datasets.
    synthetic_seed : int
        Seed of the generated Synthetic set (fixed across runs; the runs vary the model seed).
    ablation : bool
        Add ``<algorithm>:random-init`` for :data:`jobs.reproduce.methods.ABLATION_ALGORITHMS` when
        ``methods`` is empty.
    """

    datasets: tuple[str, ...] = DEFAULT_DATASETS
    methods: tuple[str, ...] = ()
    runs: int = 10
    quick: bool = False
    engine: str = "local"
    data_root: str = "data"
    synthetic_seed: int = 0
    ablation: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.runs, int) or self.runs < 1:
            raise ConfigError(f"runs must be an integer >= 1, but got {self.runs!r}")
        if self.engine not in ("local", "spark"):
            raise ConfigError(f"engine must be one of ['local', 'spark'], but got {self.engine!r}")
        if not self.datasets:
            raise ConfigError("datasets must name at least one dataset, but got none")


@dataclass
class Fitted:
    """A fitted model's outputs: summary, items (index ``item``), workers (index ``worker``)."""

    summary: dict[str, Any]
    items: pd.DataFrame
    workers: pd.DataFrame


@dataclass
class RunRecord:
    """The numbers of one (dataset, method, seed) run (``error`` is set when the run failed)."""

    dataset: str
    method: str
    algorithm: str
    seed: int
    seconds: float
    error_rate: float | None = None
    gold_nll: float | None = None
    paper_nll: float | None = None
    n_labels: int = 0
    sampler_loglik: float | None = None
    n_levels: int | None = None
    level_labeling_error: list[float | None] | None = None
    level_gold_items: list[int] | None = None
    iterations: int | None = None
    converged: bool | None = None
    curve: dict[str, list[float | None]] | None = None
    error: str | None = None


def fit_local(dataset: Dataset, algorithm: str, seed: int, params: Mapping[str, Any]) -> Fitted:
    """Fit on the local engine through :class:`crowdspark.api.Aggregator`."""
    from crowdspark.api import Aggregator

    agg = Aggregator(algorithm, seed=seed, **params).fit(dataset.labels, dataset.gold)
    return Fitted(agg.summary_, agg.items_, agg.workers_)


def fit_spark(spark: Any, dataset: Dataset, algorithm: str, seed: int, params: Mapping[str, Any]) -> Fitted:
    """Fit on the Spark engine through :func:`crowdspark.pipeline.fit_frames`.

    The (paper-sized) item table is collected to the driver to compute the paper's NLL.
    """
    from crowdspark.config import EngineConfig, RunConfig
    from crowdspark.pipeline import fit_frames

    config = RunConfig(algorithm=algorithm, seed=seed, engine=EngineConfig(name="spark"),
                       algorithms={algorithm: dict(params)})
    run = fit_frames(config, spark.createDataFrame(dataset.labels), spark.createDataFrame(dataset.gold),
                     labels_source=dataset.source, gold_source=dataset.source)
    try:
        items = run.items().toPandas().set_index("item")
    finally:
        run.close()
    return Fitted(run.summary, items, run.workers().set_index("worker"))


def _stack(column: pd.Series) -> np.ndarray:
    """One float array from a column of (nested) lists or arrays, shape (K, ...)."""
    return np.array([np.array(np.asarray(v).tolist(), dtype=float) for v in column])


def paper_loglik(labels: pd.DataFrame, fitted: Fitted) -> float:
    """``log p(L | pi, T, Q)`` of the fitted model (paper section 5.3.3), summed over labels.

    ``T``: each item's predicted label; ``Q``: its predicted level when the model has levels; ``pi``: the
    worker table's ``level_confusion`` (K, H, C, C) when present with item levels, else ``confusion``
    (K, C, C).  ``-inf`` when a label has probability 0.

    Parameters
    ----------
    labels : DataFrame
        ``item``, ``worker``, ``label`` (strings), the labels the model was fitted on.
    fitted : Fitted
    """
    classes = {c: i for i, c in enumerate(fitted.summary["classes"])}
    workers, items = fitted.workers, fitted.items
    k = workers.index.get_indexer(labels["worker"])
    row = items.index.get_indexer(labels["item"])
    t = items["label"].map(classes).to_numpy()[row]
    c = labels["label"].map(classes).to_numpy()
    if "level_confusion" in workers.columns and "level" in items.columns:
        pi = _stack(workers["level_confusion"])
        h = items["level"].to_numpy(dtype=np.int64)[row]
    else:
        pi = _stack(workers["confusion"])[:, None]
        h = np.zeros(len(labels), dtype=np.int64)
    p = pi[k, h, t, c]
    with np.errstate(divide="ignore"):
        return float(np.log(p).sum())


def _finite(value: Any) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


def _curve(history: Sequence[Mapping[str, Any]]) -> dict[str, list[float | None]]:
    """Per-iteration ``objective`` and, when recorded, ``error`` and ``loglik``."""
    keys = ["objective"] + [k for k in ("error", "loglik") if history and k in history[0]]
    return {k: [_finite(h.get(k)) for h in history] for k in keys}


def record_from_fit(dataset: Dataset, method: Method, seed: int, fitted: Fitted, seconds: float,
                    keep_curve: bool) -> RunRecord:
    """Turn a fit into a :class:`RunRecord`."""
    summary = fitted.summary
    metrics = summary.get("metrics") or {}
    history = summary.get("history") or []
    loglik = paper_loglik(dataset.labels, fitted)
    n_labels = int(len(dataset.labels))
    levels = metrics.get("level_labeling_error")
    return RunRecord(
        dataset=dataset.name,
        method=method.key,
        algorithm=method.algorithm,
        seed=seed,
        seconds=round(seconds, 4),
        error_rate=metrics.get("error_rate"),
        gold_nll=metrics.get("nll"),
        paper_nll=(-loglik / n_labels) if math.isfinite(loglik) else math.inf,
        n_labels=n_labels,
        sampler_loglik=_finite(history[-1].get("loglik")) if history else None,
        n_levels=len(levels) if levels is not None else None,
        level_labeling_error=levels,
        level_gold_items=metrics.get("level_gold_items"),
        iterations=summary.get("iterations"),
        converged=summary.get("converged"),
        curve=_curve(history) if keep_curve and history else None,
    )


def run_one(dataset: Dataset, method: Method, seed: int, quick: bool, spark: Any = None,
            keep_curve: bool = False) -> RunRecord:
    """Fit one method with one seed on one dataset; a failure is recorded, not raised.

    Parameters
    ----------
    spark : SparkSession, optional
        Use the Spark engine; ``None`` = local engine.
    keep_curve : bool
        Keep the per-iteration history (objective, error, loglik) in the record.
    """
    params = run_params(method, quick)
    start = time.perf_counter()
    try:
        if spark is None:
            fitted = fit_local(dataset, method.algorithm, seed, params)
        else:
            fitted = fit_spark(spark, dataset, method.algorithm, seed, params)
    except Exception as exc:  # noqa: BLE001 - one failing fit must not end a long reproduction; it is recorded
        seconds = time.perf_counter() - start
        log.error("%s on %s seed %d failed: %s: %s", method.key, dataset.name, seed, type(exc).__name__, exc,
                  exc_info=not isinstance(exc, CrowdsparkError))
        return RunRecord(dataset.name, method.key, method.algorithm, seed, round(seconds, 4),
                         error=f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - start
    return record_from_fit(dataset, method, seed, fitted, seconds, keep_curve)


@dataclass
class Results:
    """Everything a reproduction measured (serialized to ``results.json``)."""

    config: dict[str, Any]
    datasets: dict[str, dict[str, Any]]
    methods: list[dict[str, Any]]
    records: list[RunRecord]
    worker_accuracy: dict[str, list[dict[str, Any]]]
    started: str = ""
    seconds: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def method_keys(self) -> list[str]:
        """The method keys in the order they ran."""
        return [m["key"] for m in self.methods]

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly view of what was measured (the report adds aggregates, claims and the paper's numbers)."""
        return {
            "config": self.config,
            "started": self.started,
            "seconds": self.seconds,
            "meta": self.meta,
            "datasets": self.datasets,
            "methods": self.methods,
            "worker_accuracy": self.worker_accuracy,
            "records": [jsonable(asdict(r)) for r in self.records],
        }


def _bad_results(path: str | Path, problem: str) -> ConfigError:
    return ConfigError(f"results file must be the results.json an earlier run wrote, but {path} {problem}")


def _read_results(path: str | Path) -> dict[str, Any]:
    """The JSON object of ``path``, with the keys :func:`load_results` needs."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad_results(path, f"cannot be read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise _bad_results(path, f"is not JSON: {exc}") from exc
    missing = [k for k in RESULTS_MEASURED if not isinstance(data, dict) or k not in data]
    if missing:
        raise _bad_results(path, f"lacks {', '.join(missing)}")
    return data


def _record(rec: Any, path: str | Path) -> RunRecord:
    try:
        fields = dict(rec)
        if fields.get("paper_nll") == "inf":
            fields["paper_nll"] = math.inf
        return RunRecord(**fields)
    except (TypeError, ValueError) as exc:
        raise _bad_results(path, f"has a record that is not a run's: {exc}") from exc


def load_results(path: str | Path) -> Results:
    """Read a ``results.json`` back (to re-render a report without running again).

    Raises
    ------
    ConfigError
        ``path`` cannot be read, is not JSON, or lacks what a run writes.
    """
    data = _read_results(path)
    records = [_record(rec, path) for rec in data["records"]]
    return Results(config=data["config"], datasets=data["datasets"], methods=data["methods"], records=records,
                   worker_accuracy=data["worker_accuracy"], started=data.get("started", ""),
                   seconds=data.get("seconds", 0.0), meta=data.get("meta", {}))


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers and non-finite floats as ``"inf"``/``"-inf"``/``None``."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, np.generic):
        return jsonable(value.item())
    return value


def _log_progress(done: int, total: int, rec: RunRecord) -> None:
    outcome = f"error {rec.error_rate:.4f}" if rec.error_rate is not None else f"FAILED ({rec.error})"
    log.info("[%d/%d] %s on %s seed %d: %s (%.1f s)", done, total, rec.method, rec.dataset, rec.seed, outcome,
             rec.seconds)


def _run_all(datasets: Sequence[Dataset], methods: Sequence[Method], config: ReproduceConfig,
             spark: Any) -> list[RunRecord]:
    """Every (dataset, method, seed) in that order; seed 0 keeps its iteration curve."""
    total = len(datasets) * len(methods) * config.runs
    log.info("reproducing: %d datasets x %d methods x %d runs = %d fits (%s engine%s)", len(datasets),
             len(methods), config.runs, total, config.engine, ", quick" if config.quick else "")
    records: list[RunRecord] = []
    for dataset in datasets:
        for method in methods:
            for seed in range(config.runs):
                records.append(run_one(dataset, method, seed, config.quick, spark, keep_curve=seed == 0))
                _log_progress(len(records), total, records[-1])
    return records


def run_experiments(config: ReproduceConfig, spark: Any = None) -> Results:
    """Run every (dataset, method, seed) of ``config``, logging one progress line per run.

    Parameters
    ----------
    config : ReproduceConfig
    spark : SparkSession, optional
        Required when ``config.engine == "spark"``.
    """
    if config.engine == "spark" and spark is None:
        raise ConfigError("engine 'spark' needs a SparkSession, but got none")
    methods = parse_methods(config.methods) if config.methods else default_methods(config.ablation)
    datasets = resolve_datasets(config.datasets, config.data_root, config.synthetic_seed)
    started, t0 = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.perf_counter()
    records = _run_all(datasets, methods, config, spark if config.engine == "spark" else None)
    return Results(
        config=jsonable(asdict(config)),
        datasets={d.name: dataset_stats(d) for d in datasets},
        methods=[{"key": m.key, "algorithm": m.algorithm, "params": dict(m.params)} for m in methods],
        records=records,
        worker_accuracy={d.name: worker_accuracy(d).reset_index().to_dict("records") for d in datasets},
        started=started,
        seconds=round(time.perf_counter() - t0, 2),
    )
