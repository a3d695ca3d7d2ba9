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
* ``next_stage(params) -> params or None``: driver, when a stage of the fit has converged (a model whose
  fit has several stages opens the next one; most models have one).
* ``finish_block(block, state, params) -> ItemResult``: final per-item results, on executors.
* ``worker_table(params, stats) -> dict``: final per-worker results, on the driver (size K, never I): at least
  ``n_labels`` and the worker's skill as ``confusion`` (K, C, C) or ``accuracy`` (K,), which is what the
  pipeline reads (:meth:`Model.worker_confusion`; :func:`checked_worker_table` holds a model to it).

``state`` is per-item data that stays with its block between sweeps (``None`` when a model has none);
``params`` are the global parameters (arrays whose size depends on K, C and H only), broadcast each sweep;
``stats`` are additive (see :mod:`crowdspark.stats`).  The engines (:mod:`crowdspark.engine`) only move
blocks and statistics; the one fit loop (:mod:`crowdspark.engine.loop`) calls these methods in order and
runs the model's :class:`Schedule`: it decides when the fit has converged, and which sweeps of a sampler
are kept.

Optional capabilities are declared, not discovered: :class:`LevelModel` (a model with H difficulty levels
whose H can be chosen from the data by :mod:`crowdspark.engine.select`); ``carried_stats`` (an EM model whose
statistics an incremental run carries from night to night, :mod:`crowdspark.engine.carry`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.errors import ModelContractError
from crowdspark.models.common import one_coin_confusion
from crowdspark.stats import Stats
from crowdspark.validation import check_at_most, coerce_fields

__all__ = ["RUN_BOUNDS", "MAX_SWEEPS", "Model", "ItemResult", "Update", "State", "Schedule", "Preset", "LevelModel",
           "Footprint", "no_worker_start", "WORKER_SKILL", "QUICK_SETTINGS", "worker_confusion",
           "checked_worker_table"]

State = dict[str, np.ndarray] | None

_DAYS = "is a pass over every label, so a fit this long would run for days"
#: the largest value of each setting that makes a fit longer or its arrays larger, whatever the model that has
#: it: field name -> (maximum, why).  A model with a field of one of these names is bounded by
#: :meth:`Model.__post_init__` before its own checks, so a value past the bound names its own key.
RUN_BOUNDS: dict[str, tuple[int, str]] = {
    "max_iter": (100_000, f"every iteration {_DAYS} (EM fits converge in hundreds; loosen tol instead)"),
    "burn_in": (100_000, f"every sweep {_DAYS} (the paper burns in 100)"),
    "n_samples": (100_000, f"every kept sample {_DAYS} (the paper keeps 500)"),
    "thin": (1_000, f"every sweep between kept samples {_DAYS}"),
    "n_levels": (100, "each level adds a (K, C, C) table of confusion matrices, and levels past a handful "
                      "are empty (the paper uses 2 to 5)"),
    "newton_steps": (10_000, "Newton steps per item on every initialization (40 converge)"),
    "histogram_bins": (1 << 24, "bins of a histogram every block sends to the driver (4096 resolve the "
                                "level thresholds)"),
    "beta_steps": (10_000, "optimizer steps per sweep (3 by default)"),
    "m_step_rounds": (10_000, "M-step passes over every label per sweep"),
}
#: the largest number of sweeps a sampler's settings may add up to (``burn_in + thin * n_samples``)
MAX_SWEEPS = 1_000_000
#: the columns of a worker table that give a worker's skill; every worker table has at least one of them
WORKER_SKILL = ("confusion", "accuracy")
#: the settings of a quick fit (:meth:`Model.quick_settings`), applied where a model has the field
QUICK_SETTINGS: dict[str, int] = {"max_iter": 15, "burn_in": 5, "n_samples": 8}


@dataclass(frozen=True)
class Update:
    """What a driver step returns.

    Attributes
    ----------
    params : Any
        The new global parameters.
    objective : float
        The model's objective per label for the parameters the sweep used (see each model's docs).
    change : float or None
        The change the convergence test compares with ``tol``; ``None`` (most models) lets the fit loop
        use the change of ``objective`` since the previous sweep.
    extra : dict
        Further per-sweep values recorded in the history (e.g. a sampler's log-likelihood).
    """

    params: Any
    objective: float
    change: float | None = None
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


@dataclass(frozen=True)
class Schedule:
    """How the fit loop runs a model's sweeps.

    Attributes
    ----------
    max_sweeps : int
        The largest number of sweeps (0 for one-pass models such as majority vote).
    tol : float or None
        The fit has converged when the change of a sweep is below ``tol``; ``None`` for samplers, which run
        every sweep.
    burn_in : int
        Sweeps a sampler runs before it keeps any.
    thin : int
        After the burn-in, every ``thin``-th sweep is kept.
    stop : {"change", "rise"}
        The convergence test.  ``"change"``: the change of a sweep (the model's own, else how much the
        objective moved, in either direction) is below ``tol``.  ``"rise"``: the objective rose by less than
        ``tol``, a fall included, and the fit keeps the parameters that sweep's E-step used, so its answers
        are that E-step's (crowd-kit's EM loops: ``if new_loss - loss < tol: break``).
    """

    max_sweeps: int = 0
    tol: float | None = None
    burn_in: int = 0
    thin: int = 1
    stop: str = "change"

    @classmethod
    def sampler(cls, burn_in: int, n_samples: int, thin: int = 1) -> Schedule:
        """``burn_in`` sweeps, then ``n_samples`` kept sweeps ``thin`` apart."""
        return cls(max_sweeps=burn_in + thin * n_samples, tol=None, burn_in=burn_in, thin=thin)

    @property
    def samples(self) -> bool:
        """Whether the model is a sampler (runs all its sweeps and keeps some)."""
        return self.tol is None and self.max_sweeps > 0

    def is_kept(self, sweep: int) -> bool:
        """Whether ``sweep`` of a sampler is kept (after the burn-in, every ``thin``-th)."""
        return self.samples and sweep > self.burn_in and (sweep - self.burn_in) % self.thin == 0


@dataclass(frozen=True)
class Footprint:
    """A model's large arrays, in float64 cells, from which :mod:`crowdspark.engine.memory` predicts the peak
    memory of its fit before anything is allocated.

    Attributes
    ----------
    params : int
        Cells of one copy of the global parameters (the summed statistics have the same size): what the driver
        holds, and every block receives each sweep.
    item : int
        Cells per item of the tables one sweep makes over a block (log scores and posterior over the item's
        latent configurations, e.g. C, or H C with levels).
    state : int
        Cells per item of the state a block keeps between sweeps (0 for a stateless model).
    label : int
        Cells per label of the per-label arrays one sweep makes beyond the block's codes.
    largest : tuple of (str, int)
        The dimensions of the largest parameter table, named (e.g. ``(("workers", K), ("classes", C),
        ("classes", C))``): what a refusal names as the cause.
    """

    params: int
    item: int
    state: int = 0
    label: int = 0
    largest: tuple[tuple[str, int], ...] = ()


class Model:
    """Base class of the kernel protocol; see the module docstring."""

    #: the algorithm's name (``--algorithm``, the configuration section, ``summary.json``)
    name: str = "model"
    #: the human name of the model (listings, the README's table)
    title: str = ""
    #: the class name of the model in the Python faces: ``crowdspark.api.<api_name>``,
    #: ``crowdspark.ml.<api_name>Aggregator``
    api_name: str = ""
    #: what the model is, in one line (listings)
    description: str = ""
    #: crowd-kit's names for this model's parameters, beyond :data:`crowdspark.faces.CROWDKIT_ALIASES`
    aliases: dict[str, str] = {}
    #: whether blocks carry per-item state between sweeps (the engine then keeps what the kernels return)
    stateful: bool = False
    #: number of extra initialization rounds (see ``init_round``)
    n_init_rounds: int = 0
    #: per-item output columns ``ItemResult.extra`` holds, with their Spark SQL types (e.g. ``"int"``)
    item_extras: dict[str, str] = {}
    #: fitted attributes of the pandas API beyond the common ones (crowd-kit's names): attribute -> (table,
    #: column) for a Series indexed by worker or task (table ``"workers"`` or ``"items"``), or (table, tuple of
    #: columns) for crowd-kit's ndarray of those columns side by side
    api_attributes: dict[str, tuple[str, Any]] = {}
    #: keys of the exported parameters whose first axis is the worker (remapped by a warm start)
    worker_params: tuple[str, ...] = ()
    #: keys of the exported parameters copied as they are by a warm start (class/level proportions)
    shared_params: tuple[str, ...] = ()
    #: every key of :meth:`export_params` -> (domain, axes), checked when a saved model is read
    #: (:func:`crowdspark.io.saved_model.check_saved_values`): the domain is ``"real"``, ``"positive"``,
    #: ``"nonnegative"``, ``"probability"``, ``"simplex"`` (sums to 1 over the last axis), ``"log_simplex"``
    #: (its exponentials do) or ``"index"`` (non-negative integers); the axes one letter each, ``K`` (workers),
    #: ``C`` (classes) or ``*`` (any size). Empty: every value must be a finite number
    param_domains: dict[str, tuple[str, str]] = {}
    #: keys of the :meth:`local_step` statistics that are sums over items of what :meth:`item_responsibilities`
    #: gives (:meth:`carried_from_sums`): an incremental run carries them from night to night; empty: the
    #: model cannot run incrementally
    carried_stats: tuple[str, ...] = ()
    #: named parameter sets (``--set <algorithm>.preset=<name>``)
    presets: dict[str, Preset] = {}
    #: whether the fit itself draws per-item random numbers (keyed by the item's id, :mod:`crowdspark.rng`),
    #: beyond breaking ties of the final labels: renaming the items then gives another draw of the answer
    random_fit: bool = False
    #: whether the model learns from gold in the fit only (``Block.fixed``): a run without it is a ConfigError
    needs_fit_gold: bool = False

    @property
    def schedule(self) -> Schedule:
        """How many sweeps, and when the fit stops (default: one pass, no sweeps)."""
        return Schedule()

    def __post_init__(self) -> None:
        """Bring every field to its declared type (:func:`crowdspark.validation.coerce_fields`), then bound the
        fields named in :data:`RUN_BOUNDS`."""
        coerce_fields(self, self.name)
        for key, (maximum, why) in RUN_BOUNDS.items():
            value = getattr(self, key, None)
            if isinstance(value, int) and not isinstance(value, bool):
                check_at_most(f"{self.name}.{key}", value, maximum, why)

    def footprint(self) -> Footprint:
        """The model's large arrays (:class:`Footprint`); default: a full confusion matrix per worker,
        (K, C, C), and a posterior over the true class per item, (C,)."""
        k, c = self.n_workers, self.n_classes  # type: ignore[attr-defined]
        return Footprint(params=k * c * c + c, item=c, state=c if self.stateful else 0,
                         largest=(("workers", k), ("classes", c), ("classes", c)))

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

    def next_stage(self, params: Any) -> Any | None:
        """The parameters that open the fit's next stage once the current one has converged, or ``None``
        when the fit is complete (the default: one stage).  The loop compares no objective across stages."""
        return None

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        raise NotImplementedError

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        """Per-worker columns, each with K rows: ``n_labels`` (K,), the worker's skill as ``confusion``
        (K, C, C), ``accuracy`` (K,) or both (:data:`WORKER_SKILL`), NaN for a worker the model has no estimate
        of, then any columns of the model's own."""
        raise NotImplementedError

    def worker_confusion(self, table: dict[str, np.ndarray]) -> np.ndarray:
        """Each worker's confusion matrix (K, C, C) from this model's :meth:`worker_table`: what the quality
        signals, the relabel queue and the report read (:func:`worker_confusion`)."""
        return worker_confusion(table, self.n_classes)  # type: ignore[attr-defined]

    @classmethod
    def quick_settings(cls) -> dict[str, Any]:
        """Settings for a quick fit of this model that still exercises every kernel: what the conformance tests
        and smoke runs use.  Default: :data:`QUICK_SETTINGS` where the model has the field."""
        names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
        return {key: value for key, value in QUICK_SETTINGS.items() if key in names}

    def export_params(self, params: Any) -> dict[str, np.ndarray]:
        """The fitted global parameters a saved model keeps (:mod:`crowdspark.io.saved_model`): what
        :meth:`warm_start` reads and what :meth:`finish_block` needs without per-item state; default: all."""
        return dict(params)

    def warm_start(self, params: Any, previous: dict[str, np.ndarray], old_index: np.ndarray,
                   workers_only: bool = False) -> Any:
        """Start from a previous run's exported parameters.

        Parameters
        ----------
        params : Any
            This run's initial parameters (from its own initialization).
        previous : dict of str to ndarray
            The previous run's :meth:`export_params`, or with ``workers_only`` the :meth:`worker_start` of a
            worker table.
        old_index : ndarray of int64, shape (K,)
            Each worker's index in the previous run (or table), ``-1`` for a worker seen for the first time (it
            keeps this run's initial values).
        workers_only : bool
            Set the :attr:`worker_params` only; the shared values (class and level proportions) stay this run's.
        """
        from crowdspark.errors import RUN_COLD, ConfigError, IncompatibleModelError

        if not self.worker_params and not self.shared_params:
            raise ConfigError(f"{self.name} does not support a warm start; run it without --warm-start")
        new = dict(params)
        known = old_index >= 0
        shared = () if workers_only else self.shared_params
        for key in self.worker_params + shared:
            if key not in previous:
                raise IncompatibleModelError(f"the warm-start model has no parameter {key!r}; {RUN_COLD}")
            axis = 1 if key in self.worker_params else 0
            if np.shape(previous[key])[axis:] != np.shape(params[key])[axis:]:
                raise IncompatibleModelError(
                    f"the warm-start model's {key!r} has shape {np.shape(previous[key])}, this run needs "
                    f"{np.shape(params[key])}: the classes or levels changed, so {RUN_COLD}"
                )
        for key in self.worker_params:
            values = np.array(params[key], copy=True)
            values[known] = previous[key][old_index[known]]
            new[key] = values
        for key in shared:
            new[key] = np.array(previous[key], copy=True)
        return new

    def worker_start(self, confusion: np.ndarray, accuracy: np.ndarray) -> dict[str, np.ndarray]:
        """The :attr:`worker_params` (in the form of :meth:`export_params`) that start workers from a worker
        table (:mod:`crowdspark.io.worker_table`).

        Parameters
        ----------
        confusion : ndarray of float64, shape (K', C, C)
            Each listed worker's confusion matrix (rows sum to 1).
        accuracy : ndarray of float64, shape (K',)
            Each listed worker's share of right labels.

        Raises
        ------
        ConfigError
            For a model without worker parameters a table can set (the default).
        """
        raise no_worker_start(self.name)

    def summary(self, params: Any) -> dict[str, Any]:
        """Model-specific, JSON-serializable values for ``summary.json`` (global parameters etc.)."""
        return {}

    def item_responsibilities(self, block: Block, params: Any) -> np.ndarray:
        """Each item's weights over the model's latent configurations at ``params`` (models with
        :attr:`carried_stats`): what the item adds to the carried statistics.

        Returns
        -------
        ndarray of float64, shape (n, R)
            E.g. the posterior over the true class (R = C), or over (level, class) pairs (R = H C, level-major).
        """
        raise NotImplementedError

    def carried_from_sums(self, label_sums: np.ndarray, item_sums: np.ndarray) -> Stats:
        """The :attr:`carried_stats` of items whose :meth:`item_responsibilities` sum to these.

        Parameters
        ----------
        label_sums : ndarray, shape (K, R, C)
            ``label_sums[k, r, c]``: the sum, over the labels of class c that worker k gave, of the labelled
            item's responsibility r.
        item_sums : ndarray, shape (R,)
            The sum of the items' responsibilities.

        Returns
        -------
        dict
            The same values :meth:`local_step` returns under :attr:`carried_stats` for those items (tested for
            every registered model that declares them).
        """
        raise NotImplementedError


def no_worker_start(name: str) -> Exception:
    """The ConfigError of a model (``name``) that cannot start its workers from a worker table."""
    from crowdspark.errors import ConfigError

    return ConfigError(f"{name} cannot start its workers from a worker table (it has no per-worker confusion or "
                       "accuracy to start from); run it without --initial-workers")


@dataclass(frozen=True)
class Preset:
    """A named set of parameter values (``--set <algorithm>.preset=<name>``).

    Attributes
    ----------
    apply : callable
        ``apply(model) -> model`` with the preset's values; parameters the user sets beside the preset win.
    select_levels : tuple of int, optional
        For a :class:`LevelModel`: the H candidates the preset chooses among (unless the user sets them).
    level_criterion : str, optional
        The criterion of that choice.
    """

    apply: Callable[[Any], Any]
    select_levels: tuple[int, ...] | None = None
    level_criterion: str | None = None


class LevelModel(Model):
    """Capability: a model with ``n_levels`` (H) difficulty levels whose H can be chosen from the data.

    :func:`crowdspark.engine.select.choose_levels` fits the model for each candidate H and compares the
    fits by ``log p(L | params)`` (the latent variables summed out item by item) penalized by the number of
    free parameters: AIC, BIC, or ICL (BIC plus twice the entropy of the items' posteriors over their latent
    variables), and any criterion the model adds (:attr:`extra_level_criteria`).
    """

    n_levels: int
    #: H candidates chosen among when the user sets neither ``n_levels`` nor ``select_levels``; empty: H is
    #: the ``n_levels`` field's default
    auto_levels: ClassVar[tuple[int, ...]] = ()
    #: the criterion of a choice of H unless ``level_criterion`` is set
    default_level_criterion: ClassVar[str] = "aic"
    #: criteria beyond AIC, BIC and ICL that :meth:`level_row` computes: name -> whether larger is better
    extra_level_criteria: ClassVar[dict[str, bool]] = {}

    @classmethod
    def level_criteria(cls) -> dict[str, bool]:
        """Every criterion H can be chosen by: AIC, BIC, ICL and :attr:`extra_level_criteria`, name -> whether
        larger is better."""
        return {"aic": False, "bic": False, "icl": False, **cls.extra_level_criteria}

    def footprint(self) -> Footprint:
        """A confusion matrix per worker and level, (K, H, C, C), and a posterior over (level, class) per item,
        (H C,)."""
        k, h, c = self.n_workers, self.n_levels, self.n_classes  # type: ignore[attr-defined]
        return Footprint(params=k * h * c * c + h * c, item=h * c, state=h * c if self.stateful else 0,
                         largest=(("workers", k), ("levels", h), ("classes", c), ("classes", c)))

    def n_free_parameters(self) -> int:
        """Free parameters of the model (for AIC and BIC)."""
        raise NotImplementedError

    def evidence_block(self, block: Block, params: Any) -> Stats:
        """Additive values at the fitted ``params``: ``log_evidence`` = ``sum_i log p(L_i | params)`` and
        ``entropy`` = the summed entropy of the items' posteriors over their latent variables, plus whatever
        :meth:`level_row` reads."""
        raise NotImplementedError

    def level_row(self, params: Any, history: list[dict[str, float]], evidence: Stats) -> dict[str, Any]:
        """Model-specific columns of the selection table for this H: the :attr:`extra_level_criteria` and
        descriptions of the fitted levels (``evidence`` is the sum of :meth:`evidence_block`)."""
        return {}


def worker_confusion(table: dict[str, np.ndarray], n_classes: int) -> np.ndarray:
    """Each worker's confusion matrix (K, C, C): the table's ``confusion`` when it has one, else the one-coin
    matrix of its ``accuracy`` (:func:`crowdspark.models.common.one_coin_confusion`).

    Parameters
    ----------
    table : dict of str to ndarray, or DataFrame
        A worker table (:meth:`Model.worker_table`, or one read back from a run's ``workers/``).
    n_classes : int
    """
    if "confusion" in table:
        return np.asarray(table["confusion"], dtype=np.float64)
    return one_coin_confusion(np.asarray(table["accuracy"], dtype=np.float64), n_classes)


def checked_worker_table(model: Model, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
    """``model.worker_table(params, init_stats)``, held to the protocol: ``n_labels`` (K,) and at least one of
    :data:`WORKER_SKILL` of the right shape, every column with K rows.

    Raises
    ------
    ModelContractError
        Naming the model and the column that breaks the protocol.
    """
    table = model.worker_table(params, init_stats)
    k, c = model.n_workers, model.n_classes  # type: ignore[attr-defined]
    shapes = {"n_labels": (k,), "confusion": (k, c, c), "accuracy": (k,)}
    where = f"the worker table of {type(model).__name__} ({model.name!r})"
    if "n_labels" not in table or not any(key in table for key in WORKER_SKILL):
        raise ModelContractError(
            f"{where} has the columns {sorted(table)}; every worker table needs 'n_labels' and at least one of "
            f"{list(WORKER_SKILL)} (crowdspark.models.base.Model.worker_table): add them to its worker_table")
    for key, value in table.items():
        shape = np.shape(value)
        expected = shapes.get(key)
        if (expected is not None and shape != expected) or not shape or shape[0] != k:
            raise ModelContractError(f"{where}: column {key!r} has shape {shape}, expected "
                                     f"{expected or f'{k} rows (one per worker)'}")
    return table
