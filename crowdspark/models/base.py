"""The kernel protocol every model implements.

A model is a small, frozen, picklable object holding its hyperparameters and the problem's shape
(``n_workers`` K, ``n_classes`` C, ``seed``).  Its methods are pure functions of their arguments:

* ``init_block(block) -> (state, stats)``: per-block start (usually from majority vote), on executors.
* ``init_params(stats) -> params``: driver, from the summed statistics of ``init_block``.
* ``init_round(block, state, params, round) -> (state, stats)`` and ``init_update(stats, params, round) ->
  params``, for ``round`` in ``1..n_init_rounds``: further initialization passes for models whose start
  needs several rounds of global information (IDBLA: worker correct rates, then per-item difficulty, then
  level thresholds).  Most models have ``n_init_rounds = 0``.
* ``local_step(block, state, params, sweep) -> (state, stats)``: one sweep over a block, on executors.
* ``global_step(stats, params, sweep) -> Update``: driver, from the summed statistics of ``local_step``.
* ``finish_block(block, state, params) -> ItemResult``: final per-item results, on executors.
* ``worker_table(params, stats) -> dict``: final per-worker results, on the driver (size K, never I).

``state`` is per-item data that stays with its block between sweeps (``None`` when a model has none);
``params`` are the global parameters (arrays whose size depends on K, C and H only), broadcast each sweep;
``stats`` are additive (see :mod:`crowdspark.stats`).  The engines (:mod:`crowdspark.engine`) only move
blocks and statistics; the one fit loop (:mod:`crowdspark.engine.loop`) calls these methods in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from crowdspark.block import Block
from crowdspark.stats import Stats
from crowdspark.validation import coerce_fields

__all__ = ["Model", "ItemResult", "Update", "State"]

State = dict[str, np.ndarray] | None


@dataclass(frozen=True)
class Update:
    """What a driver step returns.

    Attributes
    ----------
    params : Any
        The new global parameters.
    objective : float
        The model's objective per label for the parameters the sweep used (see each model's docs).
    change : float
        The change the convergence test compares with ``tol`` (``nan`` for samplers).
    extra : dict
        Further per-sweep values recorded in the history (e.g. a sampler's log-likelihood).
    """

    params: Any
    objective: float
    change: float
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ItemResult:
    """Final per-item results of one block.

    Attributes
    ----------
    posterior : ndarray of float64, shape (n, C)
        Posterior over the true class of each item; rows sum to 1.
    label : ndarray of int32, shape (n,)
        Predicted class index of each item.
    extra : dict of str to ndarray
        Model-specific per-item columns, e.g. ``level`` (n,) and ``level_posterior`` (n, H).
    """

    posterior: np.ndarray
    label: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)


class Model:
    """Base class of the kernel protocol; see the module docstring."""

    name: str = "model"
    #: the largest number of sweeps (0 for one-pass models such as majority vote)
    max_sweeps: int = 0
    #: convergence tolerance on ``Update.change``; ``None`` for samplers that run a fixed number of sweeps
    tol: float | None = None
    #: whether blocks carry per-item state between sweeps (the engine then keeps what the kernels return)
    stateful: bool = False
    #: number of extra initialization rounds (see ``init_round``)
    n_init_rounds: int = 0
    #: per-item output columns ``ItemResult.extra`` holds, with their Spark SQL types (e.g. ``"int"``)
    item_extras: dict[str, str] = {}
    #: keys of the exported parameters whose first axis is the worker (remapped by a warm start)
    worker_params: tuple[str, ...] = ()
    #: keys of the exported parameters copied as they are by a warm start (class/level proportions)
    shared_params: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Bring every field to its declared type (:func:`crowdspark.validation.coerce_fields`)."""
        coerce_fields(self, self.name)

    def init_block(self, block: Block) -> tuple[State, Stats]:
        raise NotImplementedError

    def init_params(self, stats: Stats) -> Any:
        raise NotImplementedError

    def init_round(self, block: Block, state: State, params: Any, round: int) -> tuple[State, Stats]:
        raise NotImplementedError

    def init_update(self, stats: Stats, params: Any, round: int) -> Any:
        raise NotImplementedError

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        raise NotImplementedError

    def step_params(self, params: Any) -> Any:
        """The part of ``params`` that :meth:`local_step` reads (what the engine ships to every block each
        sweep); all of ``params`` unless a model keeps driver-only accumulators in it."""
        return params

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        raise NotImplementedError

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        raise NotImplementedError

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        """Per-worker columns (each of length K), e.g. ``n_labels``, ``confusion`` (K, C, C), ``accuracy``."""
        raise NotImplementedError

    def export_params(self, params: Any) -> dict[str, np.ndarray]:
        """The fitted global parameters worth saving (``<output>/model/params.npz``); default: all."""
        return dict(params)

    def warm_start(self, params: Any, previous: dict[str, np.ndarray], old_index: np.ndarray) -> Any:
        """Start from a previous run's exported parameters.

        Parameters
        ----------
        params : Any
            This run's initial parameters (from its own initialization).
        previous : dict of str to ndarray
            The previous run's :meth:`export_params`.
        old_index : ndarray of int64, shape (K,)
            Each worker's index in the previous run, ``-1`` for a worker seen for the first time (it keeps
            this run's initial values).
        """
        from crowdspark.errors import ConfigError

        if not self.worker_params and not self.shared_params:
            raise ConfigError(f"{self.name} does not support a warm start; run it without --warm-start")
        new = dict(params)
        known = old_index >= 0
        for key in self.worker_params + self.shared_params:
            if key not in previous:
                raise ConfigError(f"the warm-start model has no parameter {key!r}; run cold (without --warm-start)")
            if np.shape(previous[key])[1 if key in self.worker_params else 0 :] != np.shape(params[key])[
                1 if key in self.worker_params else 0 :
            ]:
                raise ConfigError(
                    f"the warm-start model's {key!r} has shape {np.shape(previous[key])}, this run needs "
                    f"{np.shape(params[key])}: the classes or levels changed, so run cold (without --warm-start)"
                )
        for key in self.worker_params:
            values = np.array(params[key], copy=True)
            values[known] = previous[key][old_index[known]]
            new[key] = values
        for key in self.shared_params:
            new[key] = np.array(previous[key], copy=True)
        return new

    def summary(self, params: Any) -> dict[str, Any]:
        """Model-specific, JSON-serializable values for ``summary.json`` (global parameters etc.)."""
        return {}
