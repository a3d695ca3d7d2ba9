"""The one fit loop: initialize, sweep until converged or out of sweeps, record why it stopped."""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from crowdspark.block import Block, block_counts
from crowdspark.engine.base import Engine
from crowdspark.engine.checkpoint import Checkpointer
from crowdspark.faces import display_key, setting
from crowdspark.models.base import ItemResult, Model, State, Update
from crowdspark.stats import Stats

__all__ = ["ConvergenceWarning", "FitResult", "WarmStart", "fit", "initialize", "COUNT_KEYS"]

log = logging.getLogger(__name__)

COUNT_KEYS = ("n_items", "n_labels", "duplicate_pairs", "n_gold_items", "n_fixed_items")


class ConvergenceWarning(UserWarning):
    """The fit stopped at its iteration limit before the change fell below ``tol``."""


@dataclass
class FitResult:
    """What a fit leaves on the driver (nothing here grows with the number of items).

    Attributes
    ----------
    params : Any
        Final global parameters.
    init_stats : Stats
        Summed statistics of the initialization pass (model-specific counts).
    counts : dict of str to int
        ``n_items``, ``n_labels``, ``duplicate_pairs``, ``n_gold_items`` (held-out gold), ``n_fixed_items``
        (gold in the fit).
    history : list of dict
        One entry per sweep: ``iteration``, ``objective``, ``change``, ``seconds`` and model extras.
    n_iter : int
        Sweeps run.
    converged : bool or None
        ``None`` for models that run a fixed number of sweeps (samplers).
    stop_reason : str
    """

    params: Any
    init_stats: Stats
    counts: dict[str, int]
    history: list[dict[str, float]] = field(default_factory=list)
    n_iter: int = 0
    converged: bool | None = None
    stop_reason: str = ""
    resumed_from: int | None = None
    warnings: list[str] = field(default_factory=list)


def _init(model: Model, block: Block, state: State, value: Any) -> tuple[State, Stats]:
    state, stats = model.init_block(block)
    stats.update(block_counts(block))
    return state, stats


def _init_round(model: Model, round: int, block: Block, state: State, params: Any) -> tuple[State, Stats]:
    return model.init_round(block, state, params, round)


def _step(model: Model, sweep: int, block: Block, state: State, params: Any) -> tuple[State, Stats]:
    return model.local_step(block, state, params, sweep)


def finish_fn(model: Model, block: Block, state: State, params: Any) -> ItemResult:
    """Block function producing the final per-item results (used by the engines' ``map_items``)."""
    return model.finish_block(block, state, params)


@dataclass(frozen=True)
class WarmStart:
    """A previous run's exported parameters and where each current worker was in it.

    Attributes
    ----------
    params : dict of str to ndarray
    old_index : ndarray of int64, shape (K,)
        ``-1`` for workers the previous run did not see.
    source : str
    parameters : dict
        The previous run's hyperparameters (e.g. its ``n_levels``).
    workers_only : bool
        A worker table (:mod:`crowdspark.io.worker_table`), not a saved model: ``params`` holds its
        ``confusion`` (K', C, C) and ``accuracy`` (K',), which the model turns into its worker parameters
        (``Model.worker_start``); the class and level values stay this run's own.
    """

    params: dict[str, Any]
    old_index: Any
    source: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    workers_only: bool = False

    def start(self, model: Model, params: Any) -> Any:
        """``params`` (the model's own start) with this warm start's values."""
        previous = self.params
        if self.workers_only:
            previous = model.worker_start(previous["confusion"], previous["accuracy"])
        return model.warm_start(params, previous, self.old_index, workers_only=self.workers_only)


def initialize(model: Model, engine: Engine, stateful: bool) -> tuple[Any, Stats, dict[str, int]]:
    """The model's initialization passes on the engine's blocks: ``(params, init_stats, counts)``."""
    t0 = time.perf_counter()
    init_stats = engine.map_reduce(partial(_init, model), None, stateful=stateful, sweep=0)
    counts = {key: int(init_stats.pop(key)) for key in COUNT_KEYS}
    params = model.init_params(init_stats)
    for round in range(1, model.n_init_rounds + 1):
        stats = engine.map_reduce(partial(_init_round, model, round), params, stateful=stateful, sweep=-round)
        params = model.init_update(stats, params, round)
    log.info(
        "%s: initialized on %d items, %d labels in %.2fs",
        model.name, counts["n_items"], counts["n_labels"], time.perf_counter() - t0,
    )
    return params, init_stats, counts


def fit(
    model: Model,
    engine: Engine,
    *,
    warm_start: WarmStart | None = None,
    checkpoint: Checkpointer | None = None,
    carried: Stats | None = None,
) -> FitResult:
    """Fit ``model`` on the blocks held by ``engine``.

    Parameters
    ----------
    model : Model
    engine : Engine
    warm_start : WarmStart, optional
        Replace the initial global parameters of known workers (and the class/level proportions) by a
        previous run's, after the model's own initialization.
    checkpoint : Checkpointer, optional
        Resume from its checkpoint if there is one, and save one every ``checkpoint.every`` sweeps.
    carried : Stats, optional
        Statistics of items the engine does not hold (the model's ``carried_stats``), added to every sweep's
        sum: an incremental run (:mod:`crowdspark.engine.carry`).

    Returns
    -------
    FitResult
    """
    if model.schedule.max_sweeps == 0 and model.n_init_rounds == 0:
        return _fit(model, engine, warm_start, checkpoint, carried)  # one pass: one plain job, no sweep session
    engine.begin_sweeps(model.stateful)
    try:
        return _fit(model, engine, warm_start, checkpoint, carried)
    finally:
        engine.end_sweeps()


def _fit(model: Model, engine: Engine, warm_start: WarmStart | None, checkpoint: Checkpointer | None,
         carried: Stats | None) -> FitResult:
    stateful = model.stateful
    schedule = model.schedule
    saved = checkpoint.load() if checkpoint is not None else None
    if saved is not None:
        params, init_stats, counts = saved["params"], saved["init_stats"], saved["counts"]
        if stateful:
            engine.load_states(saved["states"])
        result = FitResult(params=params, init_stats=init_stats, counts=counts, history=list(saved["history"]))
        result.n_iter = first = saved["sweep"]
        result.resumed_from = first
    else:
        params, init_stats, counts = initialize(model, engine, stateful)
        if warm_start is not None:
            params = warm_start.start(model, params)
            known = int((warm_start.old_index >= 0).sum())
            log.info("%s: warm start from %s (%d of %d workers known)", model.name, warm_start.source, known,
                     len(warm_start.old_index))
        result = FitResult(params=params, init_stats=init_stats, counts=counts)
        first = 0
    tol = schedule.tol
    if schedule.max_sweeps == 0:
        result.converged = True
        result.stop_reason = "one-pass model"
        return result
    if first and tol is not None and result.history and result.history[-1]["change"] < tol:
        result.converged = True
        result.stop_reason = f"converged before the checkpoint of iteration {first}"
        return result
    last = result.history[-1] if result.history else {}
    convergence = _Convergence(tol, None if last.get("next_stage") else last.get("objective"), schedule.stop)
    for sweep in range(first + 1, schedule.max_sweeps + 1):
        t1 = time.perf_counter()
        stats = engine.map_reduce(partial(_step, model, sweep), model.step_params(params), stateful=stateful,
                                  sweep=sweep)
        if carried is not None:
            stats = {**stats, **{key: stats[key] + value for key, value in carried.items()}}
        update = model.global_step(stats, params, sweep)
        change = convergence.change(update)
        converged = tol is not None and change < tol
        if not (converged and schedule.stop == "rise"):
            params = update.params  # a "rise" stop keeps the parameters of the sweep's E-step
        opened = model.next_stage(params) if converged else None
        if opened is not None:
            params, change, converged = opened, float("inf"), False
            convergence.restart()
            log.info("%s: converged at iteration %d; the next stage of the fit starts", model.name, sweep)
        seconds = time.perf_counter() - t1
        entry = {"iteration": sweep, "objective": update.objective, "change": change, "seconds": seconds}
        entry.update(update.extra)
        if opened is not None:
            entry["next_stage"] = 1.0
        result.history.append(entry)
        result.n_iter = sweep
        result.params = params
        log.info(
            "%s: iteration %d/%d objective %.6f change %.3g (%.2fs)",
            model.name, sweep, schedule.max_sweeps, update.objective, change, seconds,
        )
        if converged:
            result.converged = True
            result.stop_reason = f"change {change:.3g} < tol {tol:g} at iteration {sweep}"
            break
        if checkpoint is not None and checkpoint.due(sweep) and sweep < schedule.max_sweeps:
            driver_state = {"params": params, "init_stats": init_stats, "counts": counts, "history": result.history}
            checkpoint.save(sweep, driver_state, engine, stateful)
    else:
        if tol is None:
            result.stop_reason = f"ran all {schedule.max_sweeps} sweeps"
        else:
            result.converged = False
            last = result.history[-1]["change"]
            result.stop_reason = f"reached max_iter={schedule.max_sweeps} with change {last:.3g} >= tol {tol:g}"
            message = (
                f"{model.name} did not converge: {result.stop_reason}. "
                f"Increase {display_key(model.name + '.max_iter')} (e.g. {setting(model.name + '.max_iter', '...')}) "
                f"or loosen {display_key(model.name + '.tol')}."
            )
            warnings.warn(message, ConvergenceWarning, stacklevel=3)  # the caller of fit()
            log.warning(message)
    result.params = params
    return result


class _Convergence:
    """The change a sweep reports: the model's own (``Update.change``), else how much the objective per
    label moved since the previous sweep of the same stage (``inf`` for the first); ``nan`` for samplers.

    Parameters
    ----------
    tol : float or None
        The schedule's tolerance (``None``: a sampler, whose change is not measured).
    previous : float, optional
        The objective of the sweep before the first one this loop runs (a resumed fit).
    stop : {"change", "rise"}
        ``Schedule.stop``: with ``"rise"`` the change is the signed rise of the objective.
    """

    def __init__(self, tol: float | None, previous: float | None, stop: str = "change") -> None:
        self.tol = tol
        self.previous = previous
        self.stop = stop

    def change(self, update: Update) -> float:
        objective, previous = update.objective, self.previous
        self.previous = objective
        if update.change is not None:
            return float(update.change)
        if self.tol is None:
            return float("nan")
        if previous is None or not math.isfinite(previous):
            return float("inf")
        return objective - previous if self.stop == "rise" else abs(objective - previous)

    def restart(self) -> None:
        """A new stage starts: its first objective is not compared with the last stage's."""
        self.previous = None
