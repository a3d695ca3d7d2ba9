"""IDBLA-CVB with the paper's sequential schedule, for comparison with the parallel one the engines run.

The paper updates one item at a time and puts its new factors into the global tables before the next item
(section 4.3).  That is not a sum of block statistics, so it cannot run on the engines; this module runs it
on one process with the library's initialization (:func:`crowdspark.engine.loop.initialize`), update
equations, objective and stopping rule, and the fixed ``model.damping`` (the sequential schedule does not
oscillate, so no adaptive damping).  Slow: a Python loop over items, vectorized over each item's labels.

Used by ``cvb_run.py`` (``--sequential``) and ``tests/test_idbla_cvb.py``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from crowdspark.block import Block
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import FitResult, initialize
from crowdspark.models.base import ItemResult
from crowdspark.models.common import argmax_random_ties, tie_uniforms
from crowdspark.models.idbla_cvb import (
    SECOND_ORDER_KEYS,
    TABLE_KEYS,
    IdblaCvb,
    cvb_tables,
    cvb_update,
    step_stats,
    sweep_stats,
    tables_to_params,
)
from crowdspark.stats import Stats, sum_stats

__all__ = ["SequentialFit", "fit_sequential"]

log = logging.getLogger(__name__)


@dataclass
class SequentialFit(FitResult):
    """The fit loop's :class:`~crowdspark.engine.loop.FitResult` plus the final per-block states (``lam``,
    ``rho``, ``T``, ``Q`` ...) in block order; its history adds ``table_drift`` per sweep (the largest
    difference between the incrementally kept tables and the tables recomputed from scratch)."""

    states: list[dict[str, np.ndarray]] = field(default_factory=list)

    def items(self, blocks: list[Block], model: IdblaCvb) -> list[tuple[Block, ItemResult]]:
        """Per-item results of every block (``model.finish_block``), in block order."""
        return [(b, model.finish_block(b, s, self.params)) for b, s in zip(blocks, self.states)]


def _item_view(block: Block, i: int) -> Block:
    lo, hi = int(block.offsets[i]), int(block.offsets[i + 1])
    return Block(
        item_ids=block.item_ids[i : i + 1],
        item_keys=block.item_keys[i : i + 1],
        offsets=np.array([0, hi - lo], dtype=np.int64),
        item_of_label=np.zeros(hi - lo, dtype=np.int32),
        worker=block.worker[lo:hi],
        label=block.label[lo:hi],
        truth=block.truth[i : i + 1],
    )


def _add_tables(tables: dict[str, np.ndarray], part: Stats, sign: float) -> None:
    for key, value in part.items():
        tables[key] += sign * value
        if key + "_dot" in tables:
            tables[key + "_dot"] += sign * value.sum(axis=-1, keepdims=True)


def _sequential_sweep(model: IdblaCvb, blocks: list[Block], states: list[dict], tables: dict) -> None:
    """Update every item in block order, one at a time, keeping ``tables`` exact (in place)."""
    priors = model.priors
    for block, state in zip(blocks, states):
        lam, rho = state["lam"].copy(), state["rho"].copy()
        for i in range(block.n_items):
            item = _item_view(block, i)
            lo, hi = int(block.offsets[i]), int(block.offsets[i + 1])
            mult = (state["mult_class"][lo:hi], state["mult_worker"][lo:hi])
            old = cvb_tables(item, lam[i : i + 1], rho[i : i + 1], model.n_workers, model.correction)
            _add_tables(tables, old, -1.0)
            lam_i, rho_i = cvb_update(item, tables, lam[i : i + 1], rho[i : i + 1], mult, priors, exclude=False)
            _add_tables(tables, cvb_tables(item, lam_i, rho_i, model.n_workers, model.correction), 1.0)
            lam[i], rho[i] = lam_i[0], rho_i[0]
        state["lam_new"], state["rho_new"] = lam, rho


def _sweep_statistics(model: IdblaCvb, blocks: list[Block], states: list[dict]) -> Stats:
    """Move every block's new factors into its state and sum the sweep's statistics (as ``local_step``)."""
    parts = []
    for block, state in zip(blocks, states):
        lam, rho = state.pop("lam_new"), state.pop("rho_new")
        label = argmax_random_ties(lam, tie_uniforms(block, model.seed))
        step = lam - state["lam"]
        stats = sweep_stats(block, state["lam"], lam, rho, label, model.n_workers, model.correction)
        stats.update(step_stats(step, state.get("step")))
        parts.append(stats)
        state.update(lam=lam, rho=rho, T=label, Q=rho.argmax(axis=1).astype(np.int32), step=step)
    return sum_stats(parts)


def fit_sequential(blocks: list[Block], model: IdblaCvb) -> SequentialFit:
    """Fit ``model`` with the paper's sequential schedule (see the module docstring)."""
    engine = LocalEngine(blocks)
    params, init_stats, counts = initialize(model, engine, stateful=True)
    result = SequentialFit(params=params, init_stats=init_stats, counts=counts, states=list(engine.states))
    table_keys = [k for k in TABLE_KEYS + SECOND_ORDER_KEYS if k in params]
    schedule = model.schedule
    for sweep in range(1, schedule.max_sweeps + 1):
        t0 = time.perf_counter()
        tables = tables_to_params({k: params[k] for k in table_keys})
        states = [dict(s) for s in result.states]
        _sequential_sweep(model, blocks, states, tables)
        update = model.global_step(_sweep_statistics(model, blocks, states), params, sweep)
        params = update.params
        result.states = states
        drift = max(float(np.abs(tables[k] - params[k]).max()) for k in table_keys)
        entry = {"iteration": sweep, "objective": update.objective, "change": update.change,
                 "seconds": time.perf_counter() - t0, "table_drift": drift}
        entry.update(update.extra)
        result.history.append(entry)
        result.n_iter = sweep
        log.info("%s sequential: iteration %d change %.3g", model.name, sweep, update.change)
        if update.change < schedule.tol:
            result.converged = True
            result.stop_reason = f"change {update.change:.3g} < tol {schedule.tol:g} at iteration {sweep}"
            break
    else:
        result.converged = False
        result.stop_reason = f"reached max_iter={schedule.max_sweeps} with change {result.history[-1]['change']:.3g}"
    result.params = params
    return result
