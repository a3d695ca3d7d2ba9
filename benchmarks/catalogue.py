"""The aggregator catalogue against crowd-kit, side by side: error rates, fit times, label agreement, and the
cost of one iteration at 1M labels.

    bash scripts/setup.sh && .venv/bin/pip install crowd-kit     # the optional `bench` extra
    source scripts/env.sh
    .venv/bin/python -m benchmarks.catalogue quality              # the 12 datasets of data/
    .venv/bin/python -m benchmarks.catalogue speed --labels 1000000

The methods are the registry's (``crowdspark.models.registry.algorithm_names``): a method crowd-kit also has
(:data:`CROWDKIT`) gets a crowd-kit column beside it, the others are crowdspark-only columns, so a model
registered later is measured without a change here.

``quality``: on each dataset, each method's error rate on the gold items and its fit time (crowdspark: the
pandas API on the local engine, reading and checking the frame included; crowd-kit: ``fit`` and the
labels), with each library's defaults.  Then with crowdspark's parameters matched to crowd-kit's (the
model's ``crowd-kit`` preset where it has one, else its defaults): the error, and the share of items on
which both give the same label among the items whose top two posteriors are not tied (in crowdspark's
posterior, and in crowd-kit's where it gives one).  crowd-kit 1.4.2's Wawa, ZeroBasedSkill and MMSR fail
in ``predict`` under scikit-learn >= 1.6 (``check_is_fitted``); their labels are then taken the way their
``predict`` takes them, a ``MajorityVote`` weighted by the fitted ``skills_``.  crowd-kit's MMSR is skipped
where it would take minutes (:data:`MMSR_LIMIT`): its covariance loops over worker pairs with vectors of
I items, and its sign step solves a dense eigenproblem of (K + P)^2 entries, P the worker pairs of
positive covariance.

``speed``: synthetic Dawid-Skene labels (``benchmarks.common.ds_dataset``; 5 classes, 2 for KOS), each
method crowd-kit also has and the project added after ``mv`` and ``ds``; the median seconds of one
crowdspark iteration on the Spark engine (local[2]) against crowd-kit's ``(fit(n_iter=N) - fit(n_iter=1)) /
(N - 1)``, in one run (GLAD: crowd-kit's loop body timed on its own N times, :func:`crowdkit_glad_iteration`).
A one-pass method (Wawa) has no iteration: it compares whole fits with their answers (crowdspark: the fit,
one Spark job, and the pass that computes the answers, on blocks already cached; crowd-kit: ``fit`` and the
labels), and prints beside them the fit's job alone and the median of N more fits on the same engine (its
one pass on resident blocks, what the median iteration measures for an iterative method) against the median
of N crowd-kit ``fit`` calls.  Most of crowdspark's figure is then Spark's fixed cost
of two jobs, not the work on the labels.  M-MSR's iterations run on the driver
over the K x K covariance: its crowdspark figure is the driver's time per iteration of that fit, crowd-kit's
the time per iteration of its own loop given the same covariance (its construction of that matrix loops
over worker pairs in Python, and its sign step needs (K + P)^2 floats: neither completes at this size).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
import warnings
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.common import DATA, ROOT, ds_dataset, machine, median, spark_session

DATASETS = ("rte", "web_search", "web_search_filtered", "temp", "bluebird", "cf", "dog", "music_genre", "product",
            "sentiment_zheng", "sp", "trec2011")

#: crowdspark algorithm name -> crowd-kit class name, for the methods both have
CROWDKIT = {"mv": "MajorityVote", "ds": "DawidSkene", "one-coin": "OneCoinDawidSkene", "glad": "GLAD",
            "mace": "MACE", "wawa": "Wawa", "zbs": "ZeroBasedSkill", "kos": "KOS", "mmsr": "MMSR"}
#: methods that take two classes only
BINARY = ("kos",)
#: largest crowd-kit MMSR matrices (entries) this benchmark lets it build: its pair loop costs K^2 vector
#: operations over I items and its sign step a dense eigenproblem of (K + P)^2 entries (minutes beyond these)
MMSR_LIMIT = {"K x I": 10**6, "(K + P)^2": 10**7}
_TIED = 1e-9
#: crowd-kit methods whose answer depends on the order of the rows: crowd-kit 1.4.2's MACE adds its strategy
#: counts up by worker and label in sorted order and stores them by order of first appearance, so its labels
#: are compared with parameters matched on the frame sorted by worker and label, where both orders agree
ROW_ORDER = ("mace",)
#: crowd-kit parameters of the per-iteration comparison: one MACE restart (its default 10 run 10 fits, and
#: they are the same fit, docs/catalogue.md), so that ``fit(n_iter=N) - fit(n_iter=1)`` is N - 1 iterations
ITERATION_PARAMS = {"mace": {"n_restarts": 1}}


def load(name: str) -> tuple[pd.DataFrame, pd.Series]:
    """A dataset's labels (columns item, worker, label) and gold (item -> truth), labels as integers when
    every one is an integer (crowd-kit then orders the classes as crowdspark does)."""
    labels = pd.read_csv(ROOT / "data" / name / "labels.csv", dtype=str)
    gold = pd.read_csv(ROOT / "data" / name / "truth.csv", dtype=str).set_index("item")["truth"]
    try:
        labels["label"], gold = labels["label"].astype(int), gold.astype(int)
    except ValueError:
        pass
    return labels, gold


def methods() -> tuple[list[str], list[str]]:
    """The registry's algorithms: those crowd-kit has too, and the crowdspark-only ones."""
    from crowdspark.models.registry import algorithm_names

    names = algorithm_names()
    return [n for n in names if n in CROWDKIT], [n for n in names if n not in CROWDKIT]


def has_preset(name: str) -> bool:
    """Whether the algorithm has a ``crowd-kit`` preset (parameters matched to crowd-kit's)."""
    from crowdspark.models.registry import model_class

    return "crowd-kit" in model_class(name).presets


def error(labels: pd.Series, gold: pd.Series) -> float:
    gold = gold[gold.index.isin(labels.index)]
    return float((labels.loc[gold.index].astype(str) != gold.astype(str)).mean() * 100)


def untied(probas: pd.DataFrame) -> pd.Series:
    """Items whose top two posteriors differ by more than 1e-9."""
    values = np.sort(probas.to_numpy(dtype=float), axis=1)
    gap = values[:, -1] - values[:, -2] if values.shape[1] > 1 else np.ones(len(values))
    return pd.Series(gap > _TIED, index=probas.index)


def ours(name: str, labels: pd.DataFrame, matched: bool, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """crowdspark's fit on the pandas API (local engine): labels, posteriors, seconds; ``extra`` parameters
    beside the matched ones (``--matched``)."""
    from crowdspark.api import Aggregator

    params = {"preset": "crowd-kit"} if matched and has_preset(name) else {}
    params.update(extra or {})
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = Aggregator(name, seed=0, **params).fit(labels)
    seconds = time.perf_counter() - start
    return {"labels": fitted.labels_, "probas": fitted.probas_, "seconds": seconds, "preset": bool(params)}


def crowdkit_model(name: str, **params: Any) -> Any:
    """crowd-kit's aggregator for the crowdspark algorithm ``name``."""
    import crowdkit.aggregation as ck

    return getattr(ck, CROWDKIT[name])(**params)


def _seconds(call: Any) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def crowdkit_labels(name: str, frame: pd.DataFrame, **params: Any) -> tuple[pd.Series, pd.DataFrame | None, Any]:
    """crowd-kit's labels, posteriors (or None) and fitted object for ``frame`` (a ``task`` column)."""
    import crowdkit.aggregation as ck

    model = crowdkit_model(name, **params)
    try:
        labels = model.fit_predict(frame)
    except AttributeError:
        if getattr(model, "skills_", None) is None:
            raise
        vote = ck.MajorityVote().fit(frame, skills=model.skills_)  # what their predict does
        return vote.labels_, vote.probas_, model
    probas = getattr(model, "probas_", None)
    return labels, probas if isinstance(probas, pd.DataFrame) else None, model


def mmsr_feasible(labels: pd.DataFrame) -> tuple[bool, str]:
    """Whether crowd-kit's MMSR fits in memory here, with the sizes that decide it."""
    from crowdspark.block import build_blocks
    from crowdspark.io.rules import Encoding, order_classes
    from crowdspark.models.mmsr import Mmsr
    from crowdspark.stats import sum_stats

    enc = Encoding(workers=tuple(sorted(labels["worker"].unique())),
                   classes=tuple(order_classes([str(v) for v in labels["label"].unique()])))
    blocks = build_blocks(labels["item"].to_numpy(dtype=object), enc.worker_codes(labels["worker"].to_numpy(object)),
                          enc.class_codes(labels["label"].astype(str).to_numpy(object)))
    model = Mmsr(enc.n_workers, enc.n_classes)
    stats = sum_stats(model.init_block(b)[1] for b in blocks)
    positive = int(np.triu(model.covariance(stats["common"], stats["agree"]) > 0, 1).sum())
    k, i = enc.n_workers, labels["item"].nunique()
    ok = k * i <= MMSR_LIMIT["K x I"] and (k + positive) ** 2 <= MMSR_LIMIT["(K + P)^2"]
    return ok, f"K x I = {k * i:.2g}, (K + P)^2 = {(k + positive) ** 2:.2g}"


#: where ``quality`` keeps crowd-kit's results (labels, posteriors, seconds) by method and frame, so that a
#: rerun after a change in crowdspark does not refit crowd-kit (its GLAD takes minutes per dataset)
CROWDKIT_CACHE = DATA / "crowdkit"


def _cache_path(name: str, labels: pd.DataFrame) -> Path:
    digest = hashlib.sha256(pd.util.hash_pandas_object(labels, index=False).to_numpy().tobytes()).hexdigest()[:16]
    return CROWDKIT_CACHE / f"{name}-{digest}.pkl"


def theirs(name: str, labels: pd.DataFrame) -> dict[str, Any]:
    """crowd-kit's fit with its defaults: labels, posteriors (or None), seconds; or the reason it did not run.
    Read from :data:`CROWDKIT_CACHE` when this method has been fitted on the same frame before."""
    path = _cache_path(name, labels)
    if path.exists():
        return pd.read_pickle(path)
    result = _fit_theirs(name, labels)
    if "skipped" not in result:
        path.parent.mkdir(parents=True, exist_ok=True)
        pd.to_pickle(result, path)
    return result


def _fit_theirs(name: str, labels: pd.DataFrame) -> dict[str, Any]:
    frame = labels.rename(columns={"item": "task"})
    if name == "mmsr":
        ok, sizes = mmsr_feasible(labels)
        if not ok:
            return {"skipped": f"crowd-kit MMSR beyond this benchmark's limits {MMSR_LIMIT} ({sizes})"}
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            predicted, probas, _ = crowdkit_labels(name, frame)
        except Exception as exc:  # a crowd-kit failure is a result of the benchmark, not its end
            return {"skipped": f"{type(exc).__name__}: {exc}"}
    return {"labels": predicted, "probas": probas, "seconds": time.perf_counter() - start}


def agreement(a: dict[str, Any], b: dict[str, Any]) -> float:
    """% of items with the same label among those untied in both posteriors (crowd-kit's where it has one)."""
    keep = untied(a["probas"])
    if b.get("probas") is not None:
        keep &= untied(b["probas"]).reindex(keep.index, fill_value=False)
    items = keep.index[keep.to_numpy()]
    items = items[items.isin(b["labels"].index)]
    same = a["labels"].loc[items].astype(str).to_numpy() == b["labels"].loc[items].astype(str).to_numpy()
    return float(same.mean() * 100) if len(items) else float("nan")


def chosen(names: list[str] | None) -> tuple[list[str], list[str]]:
    """:func:`methods`, kept to ``names`` when given (``--methods``)."""
    both, only = methods()
    if names:
        both, only = [m for m in both if m in names], [m for m in only if m in names]
    return both, only


def matched_params(settings: list[str]) -> dict[str, dict[str, Any]]:
    """``--matched`` settings ``<method>.<parameter>=<value>`` by method (values: JSON, else strings)."""
    by_method: dict[str, dict[str, Any]] = {}
    for setting in settings:
        key, _, value = setting.partition("=")
        method, _, param = key.partition(".")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        by_method.setdefault(method, {})[param] = parsed
    return by_method


def quality(datasets: list[str], names: list[str] | None = None,
            extra: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    both, only = chosen(names)
    extra = extra or {}
    rows = {}
    for name in datasets:
        labels, gold = load(name)
        n_classes = labels["label"].nunique()
        row: dict[str, Any] = {}
        for method in both + only:
            if method in BINARY and n_classes > 2:
                continue
            default = ours(method, labels, matched=False)
            cell = {"err": error(default["labels"], gold), "s": default["seconds"]}
            if method in CROWDKIT:
                ck = theirs(method, labels)
                if "skipped" in ck:
                    cell["ck_skipped"] = ck["skipped"]
                else:
                    cell.update(ck_err=error(ck["labels"], gold), ck_s=ck["seconds"])
                    matched = (ours(method, labels, matched=True, extra=extra.get(method))
                               if has_preset(method) or method in extra else default)
                    if method in ROW_ORDER:
                        ck = theirs(method, labels.sort_values(["worker", "label"], kind="stable"))
                    cell.update(matched_err=error(matched["labels"], gold), agree=agreement(matched, ck),
                                preset=matched["preset"])
            row[method] = cell
            print(name, method, {k: v for k, v in cell.items() if not isinstance(v, float) or np.isfinite(v)},
                  flush=True)
        rows[name] = row
    return {"both": both, "only": only, "rows": rows}


def _fmt(value: Any, digits: int = 2) -> str:
    return "-" if value is None or (isinstance(value, float) and not np.isfinite(value)) else f"{value:.{digits}f}"


def print_quality(result: dict[str, Any]) -> None:
    both, only, rows = result["both"], result["only"], result["rows"]
    print("\nError % on the gold items, defaults (crowdspark / crowd-kit; `-`: not run, see the notes):")
    print("| dataset | " + " | ".join(both + only) + " |")
    print("|---|" + "---|" * (len(both) + len(only)))
    means = {m: ([], []) for m in both + only}
    for name, row in rows.items():
        cells = []
        for m in both:
            c = row.get(m, {})
            cells.append(f"{_fmt(c.get('err'))} / {_fmt(c.get('ck_err'))}")
        cells += [_fmt(row.get(m, {}).get("err")) for m in only]
        print(f"| {name} | " + " | ".join(cells) + " |")
        for m in both + only:
            c = row.get(m, {})
            if "err" in c and (m in only or "ck_err" in c):
                means[m][0].append(c["err"])
                if "ck_err" in c:
                    means[m][1].append(c["ck_err"])
    mean_cells = [f"{_fmt(np.mean(means[m][0]) if means[m][0] else None)} / "
                  f"{_fmt(np.mean(means[m][1]) if means[m][1] else None)} ({len(means[m][1])})" for m in both]
    mean_cells += [f"{_fmt(np.mean(means[m][0]) if means[m][0] else None)} ({len(means[m][0])})" for m in only]
    print("| **mean (datasets)** | " + " | ".join(mean_cells) + " |")

    print("\nFit seconds (crowdspark pandas API, local engine / crowd-kit):")
    print("| dataset | " + " | ".join(both) + " |")
    print("|---|" + "---|" * len(both))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{_fmt(row.get(m, {}).get('s'))} / {_fmt(row.get(m, {}).get('ck_s'))}"
                                           for m in both) + " |")

    print("\nParameters matched to crowd-kit's: crowdspark's error % and label agreement % on items untied in "
          "both posteriors (* = the crowd-kit preset):")
    print("| dataset | " + " | ".join(both) + " |")
    print("|---|" + "---|" * len(both))
    for name, row in rows.items():
        cells = []
        for m in both:
            c = row.get(m, {})
            cells.append("-" if "agree" not in c else
                         f"{_fmt(c['matched_err'])}{'*' if c['preset'] else ''}, {_fmt(c['agree'])}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    notes = {(n, m): c["ck_skipped"] for n, row in rows.items() for m, c in row.items() if "ck_skipped" in c}
    for (name, method), why in notes.items():
        print(f"- {name}, {method}: crowd-kit not run: {why}")


def crowdkit_iteration(name: str, frame: pd.DataFrame, n_iter: int, **params: Any) -> float:
    """crowd-kit's seconds per iteration: ``(fit(n_iter=N) - fit(n_iter=1)) / (N - 1)``."""
    import crowdkit.aggregation as ck

    def run(n: int) -> float:
        start = time.perf_counter()
        getattr(ck, CROWDKIT[name])(n_iter=n, **params).fit(frame)
        return time.perf_counter() - start

    return (run(n_iter) - run(1)) / (n_iter - 1)


def crowdkit_glad_iteration(frame: pd.DataFrame, n_iter: int) -> dict[str, float]:
    """crowd-kit's GLAD, one iteration of its loop as its ``fit`` runs it (E-step, conjugate-gradient M-step,
    objective), timed on its own ``n_iter`` times after its initialization: the median wall-clock and CPU
    seconds.  A whole ``fit(n_iter=N)`` at 1M labels takes hours, and ``fit(N) - fit(1)`` needs two of them."""
    from crowdkit.aggregation import GLAD

    model = GLAD(silent=True)
    data = frame.filter(["task", "worker", "label"])
    model._init(data)
    data = model._e_step(model._join_all(data, model.alphas_, model.betas_, model.priors_))
    wall, cpu = [], []
    for _ in range(n_iter):
        start, start_cpu = time.perf_counter(), time.process_time()
        data = model._m_step(model._e_step(data))
        model._compute_Q(data)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        print(f"crowd-kit GLAD iteration: {wall[-1]:.1f} s wall, {cpu[-1]:.1f} s CPU", flush=True)
    return {"wall": median(wall), "cpu": median(cpu)}


class _LoopDone(Exception):
    """crowd-kit's M-MSR loop has run; its sign step is not."""


def _stop(*args: Any) -> None:
    raise _LoopDone


def crowdkit_mmsr_iteration(cov: np.ndarray, common: np.ndarray, n_items: int, n_classes: int,
                            n_iter: int) -> float:
    """crowd-kit's M-MSR loop per iteration, given the covariance (its own construction of it is skipped)."""
    from crowdkit.aggregation import MMSR

    def run(n: int) -> float:
        model = MMSR(n_iter=n, tol=0.0)
        model._covariation_matrix, model._n_common_tasks = cov, common
        model._sparsity = np.min(np.sign(common).sum(axis=0))
        model._n_tasks, model._n_labels = n_items, n_classes
        model._sign_determination_valid = _stop  # its sign step after the loop needs (K + P)^2 floats
        start = time.perf_counter()
        try:
            model._m_msr()
        except _LoopDone:
            pass
        return time.perf_counter() - start

    return (run(n_iter) - run(1)) / (n_iter - 1)


def spark_fit(spark, path: str, name: str, params: dict[str, Any], partitions: int = 2,
              refits: int = 0) -> dict[str, Any]:
    """crowdspark on the Spark engine, blocks cached first: per-iteration seconds, the seconds of the fit and
    of the pass that computes the answers, the fit and the model; with ``refits``, also the median seconds
    of that many more fits on the same engine (``refit``: a one-pass model's pass on resident blocks, as the
    median iteration is for an iterative model)."""
    from crowdspark.config import InputConfig
    from crowdspark.engine.loop import fit
    from crowdspark.engine.spark.engine import SparkEngine
    from crowdspark.io.spark_reader import block_rdd, prepare_labels_spark, read_spark_frame
    from crowdspark.models.registry import build_model
    from crowdspark.pipeline.fit import evaluate

    labels = prepare_labels_spark(read_spark_frame(spark, path, "parquet", "labels"), InputConfig(), path)
    engine = SparkEngine(block_rdd(labels, None, partitions, 2_000_000))
    engine.materialize()  # reading and block building are not part of the fit
    model = build_model(name, params, labels.encoding.n_workers, labels.encoding.n_classes, 0)
    try:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = fit(model, engine)
            fitted = time.perf_counter() - start
            evaluate(model, engine, result.params)  # the answers: one more pass (finish_block)
        total = time.perf_counter() - start
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            again = [_seconds(lambda: fit(model, engine)) for _ in range(refits)]
    finally:
        engine.close()
    return {"iteration": median([h["seconds"] for h in result.history]), "total": total, "fit": fitted,
            "refit": median(again) if again else None, "result": result, "model": model}


def mmsr_driver_iteration(model: Any, init_stats: dict[str, np.ndarray], n_iter: int) -> tuple[float, dict]:
    """Seconds per M-MSR iteration on the driver (``n_iter`` iterations, tol 0) and the inputs crowd-kit needs."""
    from crowdspark.models.mmsr import msr_fit

    common, agree = init_stats["common"], init_stats["agree"]
    cov = model.covariance(common, agree)
    observed = common > 0
    trim = max(int(observed.sum(axis=0).min()) // 2 - 1, 0)
    start = time.perf_counter()
    msr_fit(cov, observed, trim, int(init_stats["items"]), n_iter, 0.0)
    seconds = (time.perf_counter() - start) / n_iter
    return seconds, {"cov": cov, "common": common, "n_items": int(init_stats["items"])}


def speed(n_labels: int, n_iter: int, names: list[str] | None = None, preset: bool = False) -> list[dict[str, Any]]:
    import crowdkit.aggregation  # noqa: F401 - imported before any timing, not inside the first one

    both, _ = chosen(names)
    new = [m for m in both if m not in ("mv", "ds")]
    spark = spark_session("local[2]")
    paths = {c: ds_dataset(spark, n_labels, n_classes=c) for c in (2, 5)}
    rows = []
    for name in new:
        extra: dict[str, float] = {}
        n_classes = 2 if name in BINARY else 5
        path = paths[n_classes]
        frame = pd.read_parquet(path).rename(columns={"item": "task"})
        if name == "mmsr":
            fitted = spark_fit(spark, path, name, {})
            ours_s, inputs = mmsr_driver_iteration(fitted["model"], fitted["result"].init_stats, n_iter)
            theirs_s = crowdkit_mmsr_iteration(inputs["cov"], inputs["common"], inputs["n_items"], n_classes, n_iter)
            what = "one M-MSR iteration (driver, K x K)"
        elif name == "wawa":
            fitted = spark_fit(spark, path, name, {}, refits=n_iter)
            ours_s = fitted["total"]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                theirs_fits = [_seconds(lambda: crowdkit_model(name).fit(frame)) for _ in range(n_iter)]
                theirs_s = _seconds(lambda: crowdkit_labels(name, frame))
            theirs_fit = median(theirs_fits)
            what = (f"whole fit and answers (fit alone: crowdspark's one Spark job {fitted['fit']:.3f} s, crowd-kit's "
                    f"`fit` {theirs_fit:.3f} s, {theirs_fit / fitted['fit']:.1f}x; the pass again on resident blocks, "
                    f"median of {n_iter}: {fitted['refit']:.3f} s, {theirs_fit / fitted['refit']:.1f}x)")
            extra = {"refit_s": fitted["refit"], "crowdkit_fit_s": theirs_fit}
        elif preset and has_preset(name) and name == "glad":
            fitted = spark_fit(spark, path, name, {"preset": "crowd-kit", "max_iter": n_iter, "tol": 0.0})
            em = max(h.get("em_iteration", 0.0) for h in fitted["result"].history)
            ours_s = fitted["fit"] / em
            extra = {"passes_per_em_iteration": len(fitted["result"].history) / em}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                glad = crowdkit_glad_iteration(frame, n_iter)
            theirs_s, extra["crowdkit_cpu_s"] = glad["wall"], glad["cpu"]
            what = (f"one EM iteration, the crowd-kit preset (crowd-kit's M-step: "
                    f"{extra['passes_per_em_iteration']:.0f} passes each)")
        else:
            fitted = spark_fit(spark, path, name, {"max_iter": n_iter + 1, "tol": 0.0})
            ours_s = fitted["iteration"]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if name == "glad":
                    glad = crowdkit_glad_iteration(frame, n_iter)
                    theirs_s, extra = glad["wall"], {"crowdkit_cpu_s": glad["cpu"]}
                else:
                    theirs_s = crowdkit_iteration(name, frame, n_iter, **ITERATION_PARAMS.get(name, {}))
            what = "one iteration"
        row = {"method": name, "classes": n_classes, "what": what, "crowdspark_s": ours_s, "crowdkit_s": theirs_s,
               "ratio": theirs_s / ours_s, "spark_fit_s": fitted["total"], **extra}
        print(row, flush=True)
        rows.append(row)
    spark.stop()
    return rows


def print_speed(rows: list[dict[str, Any]], n_labels: int, n_iter: int) -> None:
    print(f"\n{n_labels:,} synthetic labels; crowdspark on the Spark engine, local[2]; {n_iter} iterations")
    print("| method | classes | measure | crowdspark Spark local[2] (s) | crowd-kit (s) | crowd-kit / crowdspark | "
          "crowdspark whole fit on Spark (s) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['method']} | {r['classes']} | {r['what']} | {r['crowdspark_s']:.4f} | {r['crowdkit_s']:.3f} | "
              f"{r['ratio']:.1f}x | {r['spark_fit_s']:.2f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    q = sub.add_parser("quality", help="error rates, fit times and agreement on the bundled datasets")
    q.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    q.add_argument("--matched", nargs="+", default=[], metavar="METHOD.PARAM=VALUE",
                   help="parameters added to a method's matched fit, beside its crowd-kit preset")
    s = sub.add_parser("speed", help="one iteration at N synthetic labels, Spark local[2] against crowd-kit")
    s.add_argument("--labels", type=int, default=1_000_000)
    s.add_argument("--iterations", type=int, default=5)
    s.add_argument("--preset", action="store_true",
                   help="GLAD with its crowd-kit preset (crowd-kit's M-step), per EM iteration of the whole fit")
    for p in (q, s):
        p.add_argument("--json", help="also write the results to this file")
        p.add_argument("--methods", nargs="+", help="only these registered algorithms (default: all)")
    args = parser.parse_args(argv)
    import crowdkit

    print(f"machine: {machine()}; date: {date.today()}; crowd-kit {crowdkit.__version__ if hasattr(crowdkit, '__version__') else ''}")
    if args.command == "quality":
        result: Any = quality(args.datasets, args.methods, matched_params(args.matched))
        print_quality(result)
    else:
        result = speed(args.labels, args.iterations, args.methods, args.preset)
        print_speed(result, args.labels, args.iterations)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2, default=str)


if __name__ == "__main__":
    main()
