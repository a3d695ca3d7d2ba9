"""The memory a fit needs, predicted before anything large is allocated, and the budget it must fit in.

A model declares its large arrays (:meth:`crowdspark.models.base.Model.footprint`: cells of its global
parameters, cells per item of a sweep's tables and of its kept state, cells per label); :func:`predict_fit`
turns them, with the shape of the input (items I, workers K, classes C, labels L), into the peak bytes of
the fit on each host:

* the local engine holds everything in one process: the blocks (:data:`LABEL_BYTES` per label), the
  states, the sweep tables (:data:`ITEM_COPIES` copies) of the blocks its threads compute at once (one per
  usable core, :class:`~crowdspark.engine.local.LocalEngine`) and the global parameters
  (:data:`PARAM_COPIES` copies: the parameters, the summed statistics, the new parameters and the
  temporaries of the M-step; :data:`ONE_PASS_COPIES` for a model without sweeps);
* on the Spark engine the driver holds the global parameters only (:data:`PARAM_COPIES`), and each executor
  task one block with a copy of the parameters it receives and of the statistics it returns.

The quality signals (``quality.enabled``) add per-worker (K, C, C) count tables after the fit
(:data:`QUALITY_COPIES` copies beside the parameters), whatever the model.

The constants were measured (``tests/test_memory.py`` checks them;
``docs/decisions/0243-memory-prediction.md``): the prediction is within a factor :data:`ACCURACY` of the
measured peak (tracemalloc's peak
of the fit, which counts every numpy array), and errs high rather than low where the parameters dominate.

:func:`memory_budget` is what the driver's host can give: ``engine.max_memory`` when it is set, else
``engine.memory_share`` of the smallest of the physical memory, the cgroup's limit (v2 or v1) and the
address space the process may still map (``ulimit -v``).  :func:`check_fit_memory` refuses a prediction
above the budget with a :class:`~crowdspark.errors.ConfigError` that gives both figures, what drives the
prediction, and the fixes.
"""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from crowdspark.block import DEFAULT_MAX_BLOCK_LABELS
from crowdspark.errors import ConfigError
from crowdspark.faces import setting
from crowdspark.models.base import Footprint, Model

__all__ = ["FitShape", "Prediction", "Budget", "predict_fit", "host_memory", "memory_budget",
           "check_fit_memory", "format_bytes", "configured_models", "predict_configured", "configured_budget",
           "check_configured", "PARAM_COPIES", "ONE_PASS_COPIES", "ITEM_COPIES", "LABEL_BYTES", "QUALITY_COPIES",
           "ACCURACY"]

#: copies of the global parameters at the peak of a sweep (old and new parameters, the summed statistics, the
#: block's statistics and the M-step's temporaries)
PARAM_COPIES = 5.0
#: copies of the global parameters of a one-pass model (no sweeps: the parameters, a block's statistics, their sum)
ONE_PASS_COPIES = 2.5
#: copies of a block's per-item sweep tables at the peak of a sweep (log scores, posterior, their temporaries)
ITEM_COPIES = 4.0
#: bytes per label a block holds (item, worker and class codes, the incidence matrix's indices and values)
LABEL_BYTES = 48
#: copies of a (K, C, C) table the quality signals hold at once (the agreement counts, the workers' confusions)
QUALITY_COPIES = 7.0
#: the stated accuracy: the measured peak is within [prediction / ACCURACY, prediction * ACCURACY]
ACCURACY = 2.0
#: bytes of a float64 cell
CELL = 8
#: a limit at or above this many bytes means "no limit" (cgroup v1 writes 2**63 rounded to a page)
_UNLIMITED = 1 << 60


@dataclass(frozen=True)
class FitShape:
    """What the size of a fit depends on, known after the input is prepared and before the model allocates.

    Attributes
    ----------
    n_items, n_workers, n_classes, n_labels : int
        I, K, C and L (an upper bound is fine: on Spark, I may be given as L).
    """

    n_items: int
    n_workers: int
    n_classes: int
    n_labels: int


@dataclass(frozen=True)
class Prediction:
    """The predicted peak of a fit.

    Attributes
    ----------
    peak_bytes : int
        On the driver's host (the whole fit on the local engine; the global parameters on Spark).
    executor_bytes : int
        On Spark, one executor task (one block); 0 on the local engine.
    engine : str
        ``local`` or ``spark``.
    parts : dict of str to int
        The bytes of each part of ``peak_bytes`` (``params``, ``items``, ``labels``, ``quality``).
    drivers : str
        What drives the prediction, e.g. ``"the (K, C, C) table of 1,000 workers x 999 x 999 classes"``.
    """

    peak_bytes: int
    executor_bytes: int
    engine: str
    parts: dict[str, int]
    drivers: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly view (``summary.json``'s ``memory``)."""
        return {"predicted_peak_bytes": self.peak_bytes, "predicted_executor_bytes": self.executor_bytes,
                "engine": self.engine, "parts": dict(self.parts), "drivers": self.drivers,
                "accuracy_factor": ACCURACY}


@dataclass(frozen=True)
class Budget:
    """The memory a fit may use on the driver's host.

    Attributes
    ----------
    bytes : int
    source : str
        Where it comes from, in words (the setting, or the share of which limit).
    """

    bytes: int
    source: str

    @property
    def kind(self) -> str:
        """Where the budget comes from, in a word: ``setting``, ``cgroup``, ``physical``, ``ulimit`` or
        ``unknown``."""
        if self.source.startswith("engine.max_memory"):
            return "setting"
        for word, kind in (("cgroup", "cgroup"), ("ulimit", "ulimit"), ("physical", "physical")):
            if word in self.source:
                return kind
        return "unknown"

    def to_dict(self) -> dict[str, Any]:
        return {"budget_bytes": self.bytes, "budget_source": self.source}


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units with three significant figures: ``"7.43 GiB"``."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def _describe(largest: tuple[tuple[str, int], ...]) -> str:
    """``(("workers", 1000), ("classes", 999), ("classes", 999))`` -> ``"1,000 workers x 999 x 999 classes"``:
    each size, its name once at the end of a run of the same name."""
    words = []
    for j, (name, size) in enumerate(largest):
        last = j + 1 == len(largest) or largest[j + 1][0] != name
        words.append(f"{size:,} {name}" if last else f"{size:,}")
    return " x ".join(words)


def predict_fit(model: Model, shape: FitShape, engine: str = "local", quality: bool = True,
                max_block_labels: int = DEFAULT_MAX_BLOCK_LABELS, threads: int | None = None) -> Prediction:
    """The peak bytes of fitting ``model`` on ``shape`` (see the module docstring).

    Parameters
    ----------
    model : Model
        Built for the run's K and C (building allocates nothing).
    shape : FitShape
    engine : {"local", "spark"}
    quality : bool
        Whether the run computes the quality signals.
    max_block_labels : int
        ``engine.max_block_labels``: the largest block, whose sweep tables are the ones alive at once.
    threads : int, optional
        Blocks the local engine computes at once (default: :func:`~crowdspark.engine.local.usable_cores`).

    Returns
    -------
    Prediction
    """
    fp: Footprint = model.footprint()
    i, k, c, m = shape.n_items, shape.n_workers, shape.n_classes, shape.n_labels
    block_share = min(1.0, max_block_labels / m) if m else 1.0
    block_items = math.ceil(i * block_share)
    block_labels = min(m, max_block_labels)
    params = (PARAM_COPIES if model.schedule.max_sweeps else ONE_PASS_COPIES) * CELL * fp.params
    quality_bytes = QUALITY_COPIES * CELL * k * c * c if quality else 0.0
    drivers = f"the parameters' largest table, {_describe(fp.largest)}" if fp.largest else "the parameters"
    if quality and k * c * c > fp.params:
        table = (("workers", k), ("classes", c), ("classes", c))
        drivers = f"the quality signals' (K, C, C) tables, {_describe(table)}"

    def host(items: int, labels: int, block_i: int) -> dict[str, int]:
        data = LABEL_BYTES * labels + CELL * (fp.state * items + fp.label * labels)
        return {"labels": int(data), "items": int(ITEM_COPIES * CELL * fp.item * block_i), "params": int(params)}

    if engine == "local":
        if threads is None:
            from crowdspark.engine.local import usable_cores

            threads = usable_cores()
        at_once = max(1, min(threads, math.ceil(m / max_block_labels)))
        parts = host(i, m, block_items * at_once)
        fit_peak = sum(parts.values())
        after = parts["labels"] + CELL * fp.params + quality_bytes  # the quality pass, after the fit
        parts["quality"] = int(max(0.0, after - fit_peak))
        return Prediction(int(fit_peak + parts["quality"]), 0, engine, parts, drivers)
    parts = {"params": int(params), "quality": int(max(0.0, CELL * fp.params + quality_bytes - params))}
    executor = host(block_items, block_labels, block_items)
    executor["params"] = int(2 * CELL * fp.params)  # the parameters received and the statistics returned
    return Prediction(sum(parts.values()), sum(executor.values()), engine, parts, drivers)


def _read_limit(path: str) -> int | None:
    """The number in a cgroup file, ``None`` when the file is missing or says ``max``."""
    try:
        with open(path) as handle:
            text = handle.read().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    value = int(text)
    return value if value < _UNLIMITED else None


def _cgroup_limit(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup") -> int | None:
    """The smallest memory limit of this process's cgroup and its parents (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), also under the namespaced root where the cgroup's own path is not mounted."""
    try:
        with open(proc) as handle:
            lines = handle.read().splitlines()
    except OSError:
        lines = []
    candidates: list[str] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, path = parts[1], parts[2].strip("/")
        if controllers == "":  # v2
            base, file = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, file = os.path.join(root, "memory"), "memory.limit_in_bytes"
        else:
            continue
        steps = path.split("/") if path else []
        for depth in range(len(steps), -1, -1):
            candidates.append(os.path.join(base, *steps[:depth], file))
    candidates += [os.path.join(root, "memory.max"), os.path.join(root, "memory", "memory.limit_in_bytes")]
    limits = [v for v in (_read_limit(p) for p in dict.fromkeys(candidates)) if v is not None]
    return min(limits) if limits else None


def _mapped_bytes() -> int:
    """The process's virtual size now (what ``ulimit -v`` counts), 0 where /proc does not say."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def host_memory() -> tuple[int, str]:
    """The memory available to this process's host, and which limit it is: the smallest of the physical
    memory, the cgroup's limit and the address space still free under ``ulimit -v``."""
    found: list[tuple[int, str]] = []
    try:
        found.append((os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "physical memory"))
    except (ValueError, OSError):
        pass
    cgroup = _cgroup_limit()
    if cgroup is not None:
        found.append((cgroup, "cgroup memory limit"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        found.append((max(0, soft - _mapped_bytes()), f"address space left under ulimit -v {format_bytes(soft)}"))
    if not found:
        return _UNLIMITED, "no known limit"
    return min(found)


def memory_budget(max_memory: int = 0, share: float = 0.8,
                  host: Callable[[], tuple[int, str]] = host_memory) -> Budget:
    """``max_memory`` bytes when it is set (> 0), else ``share`` of :func:`host_memory`.

    Parameters
    ----------
    max_memory : int
        ``engine.max_memory`` in bytes; 0: from the host.
    share : float
        ``engine.memory_share``.
    """
    if max_memory > 0:
        return Budget(max_memory, f"engine.max_memory = {format_bytes(max_memory)}")
    total, source = host()
    return Budget(int(share * total), f"engine.memory_share = {share:g} of the {source} ({format_bytes(total)})")


def _alternatives(fits: Callable[[str, bool], bool | None], names: Iterable[str], quality: bool) -> str:
    """The fix that names the algorithms whose prediction fits (``fits(name, quality)``: whether it does,
    ``None`` when the algorithm cannot run on this input)."""
    fitting = [n for n in names if fits(n, quality)]
    if fitting:
        return f"choose an algorithm with fewer parameters that fits: {', '.join(fitting)}"
    if quality:
        fitting = [n for n in names if fits(n, False)]
        if fitting:
            return (f"choose an algorithm with fewer parameters, {', '.join(fitting)}, and switch the quality "
                    f"signals off, which hold (K, C, C) tables ({setting('quality.enabled', False)})")
    return "no algorithm fits this input in this budget"


def check_fit_memory(algorithm: str, prediction: Prediction, budget: Budget, shape: FitShape,
                     fits: Callable[[str, bool], bool | None] | None = None, names: Iterable[str] = (),
                     quality: bool = True) -> None:
    """Refuse a fit whose predicted peak is above the budget, before it allocates.

    Parameters
    ----------
    algorithm : str
    prediction : Prediction
    budget : Budget
    shape : FitShape
    fits : callable, optional
        ``fits(name, quality) -> bool or None`` for the other algorithms (see :func:`_alternatives`).
    names : iterable of str
        The algorithms ``fits`` is asked about.
    quality : bool
        Whether this run computes the quality signals.

    Raises
    ------
    ConfigError
        Naming the predicted figure, the budget, what drives the prediction and the fixes.
    """
    if prediction.peak_bytes <= budget.bytes:
        return
    alternative = _alternatives(fits, names, quality) if fits is not None else ""
    raise ConfigError(
        f"{algorithm} would need about {format_bytes(prediction.peak_bytes)} on the driver's host to fit "
        f"{shape.n_labels:,} labels of {shape.n_items:,} items by {shape.n_workers:,} workers in "
        f"{shape.n_classes:,} classes ({prediction.engine} engine; predicted within a factor {ACCURACY:g}), more "
        f"than the budget of {format_bytes(budget.bytes)} ({budget.source}); what drives it: {prediction.drivers}. "
        f"Fix: {alternative + '; ' if alternative else ''}or fewer classes (merge rare classes in the labels: "
        f"the (K, C, C) tables grow with the square of C); or, if the host has the memory, raise the budget "
        f"({setting('engine.max_memory', f'{math.ceil(prediction.peak_bytes * 1.25 / (1 << 30))}g')})"
    )


def configured_models(config: Any, algorithm: str, n_workers: int, n_classes: int) -> list[Model]:
    """The models the run of ``config`` would fit with ``algorithm``, for a prediction: one, or one per H a
    choice of levels compares (the largest last; the choice keeps every candidate's fit); empty when the
    algorithm cannot run with these K and C."""
    from crowdspark.engine.select import level_plan
    from crowdspark.models.registry import build_model, model_class

    params = config.algorithm_params(algorithm)
    try:
        plan = level_plan(model_class(algorithm), params)
        if plan.candidates is None:
            return [build_model(algorithm, plan.params, n_workers, n_classes, config.seed)]
        return [build_model(algorithm, {**plan.params, "n_levels": h}, n_workers, n_classes, config.seed)
                for h in sorted(plan.candidates)]
    except ConfigError:
        return []


def predict_configured(config: Any, shape: FitShape, engine: str, algorithm: str | None = None) -> Prediction | None:
    """:func:`predict_fit` of the run that ``config`` (a :class:`~crowdspark.config.RunConfig`) configures, with
    its algorithm or ``algorithm``; ``None`` when that algorithm cannot run on this input."""
    name = algorithm or config.algorithm
    models = configured_models(config, name, shape.n_workers, shape.n_classes)
    if not models:
        return None
    largest = predict_fit(models[-1], shape, engine, bool(config.quality.enabled), config.engine.max_block_labels)
    kept = sum(CELL * m.footprint().params for m in models[:-1])  # the fits of the other candidates H
    if not kept:
        return largest
    parts = {**largest.parts, "other_levels": int(kept)}
    return replace(largest, peak_bytes=largest.peak_bytes + int(kept), parts=parts)


def configured_budget(config: Any) -> Budget:
    """:func:`memory_budget` of ``config.engine`` (``max_memory``, ``memory_share``)."""
    return memory_budget(config.engine.max_memory_bytes, config.engine.memory_share)


def check_configured(config: Any, shape: FitShape, engine: str) -> dict[str, Any]:
    """Predict the configured fit's peak, check it against the budget, and say both for ``summary.json``.

    Raises
    ------
    ConfigError
        When the prediction is above the budget (:func:`check_fit_memory`).
    """
    from crowdspark.models.registry import algorithm_names, model_class

    prediction = predict_configured(config, shape, engine)
    budget = configured_budget(config)
    if prediction is None:  # the model refuses this input itself, with its own message, when it is built
        return budget.to_dict()

    def fits(name: str, quality: bool) -> bool | None:
        if model_class(name).needs_fit_gold:
            return None
        other = replace(config, quality=replace(config.quality, enabled=quality))
        predicted = predict_configured(other, shape, engine, name)
        return predicted is not None and predicted.peak_bytes <= budget.bytes

    others = [n for n in algorithm_names() if n != config.algorithm]
    check_fit_memory(config.algorithm, prediction, budget, shape, fits, others, bool(config.quality.enabled))
    return {**prediction.to_dict(), **budget.to_dict()}
