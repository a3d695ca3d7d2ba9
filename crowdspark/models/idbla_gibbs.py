"""IDBLA by Gibbs sampling (paper section 4.1, eq. 4-8), Fixed-IDBLA (4.2) and BCC (H = 1).

Notation
--------
K workers, C classes, H difficulty levels; ``n`` items and ``m`` labels in a block.
``T[i]`` true class, ``Q[i]`` difficulty level (level 0 = easiest, see :mod:`crowdspark.models.idbla_init`).
``pi[k, h, t, c]`` = P(worker k says c | T = t, Q = h); ``alpha`` (C,) class proportions; ``beta`` (H,)
level proportions.  Priors: ``pi[k, h, t, :] ~ Dir(omega + diagonal_prior * e_t)`` (the paper:
``omega = 1``, ``diagonal_prior = 0``; an optional empirical-Bayes term ``level_prior`` adds pseudo-counts
shaped like each level's pooled initial confusion), ``alpha ~ Dir(gamma_alpha)``, ``beta ~ Dir(gamma_beta)``.
Known failure modes (collapsed levels, permuted classes within a level) are reported by ``summary`` and
discussed with measurements in ``docs/idbla_gibbs.md``.
Counts: ``N_l(k, h, t, c)``, ``N_t(t)``, ``N_q(h)``.  ``ll[i, h, t] = sum over labels (k, c) of item i of
log pi[k, h, t, c]``.

One sweep
---------
* executors (``local_step``), per block: ``ll`` from ``log pi`` and ``log alpha + log beta``, made once
  per sweep on the driver (``step_params`` / ``log_tables``, in single precision, see ``SWEEP_DTYPE``)
  and sent to every block; then either
  ``scheme="joint"``: ``(T_i, Q_i)`` drawn together from ``p(t, h) ∝ alpha_t beta_h exp(ll[i, h, t])``
  (eq. 4 and 5 combined, exact), or ``scheme="paper"``: ``T_i | Q_i`` (eq. 4) then ``Q_i | T_i`` (eq. 5).
  Draws are inverse-CDF on :func:`crowdspark.rng.uniforms` keyed by (seed, sweep, item, stream).  The
  block returns the additive counts of the new (T, Q), ``log p(L | pi, T, Q)`` (the paper's criterion)
  and ``log p(L | pi, alpha, beta)`` (Q and T summed out).  On kept sweeps the block also adds the
  Rao-Blackwellized posteriors ``p(T_i | L_i, pi, alpha, beta)`` and ``p(Q_i | L_i, pi, alpha, beta)``
  to its state.
* driver (``global_step``): ``pi``, ``alpha``, ``beta`` drawn from their Dirichlet posteriors (eq. 6-8)
  with :func:`crowdspark.rng.driver_generator`; on kept sweeps the posterior means of those Dirichlets
  (Rao-Blackwellized) and the counts are added to running sums in ``params``.

A sweep is *kept* when ``sweep > burn_in`` and ``(sweep - burn_in) % thin == 0``; ``max_sweeps = burn_in +
thin * n_samples``.  The predictive posterior of an item is the mean over kept sweeps; the final worker
tables use the mean of the kept ``E[pi | counts]``.

Default scheme: ``"joint"``.  It is exact like the paper's, costs the same ``C * H`` table per item (the
paper's scheme computes the same ``ll`` table), and cannot get stuck where T and Q explain each other
(an item whose labels disagree with T can move to a hard level *and* change class in one step, which the
paper's scheme only does through an unlikely intermediate state).  Over 3 seeds the two schemes are equal
within noise on rte and temp, joint is far better on web_search_filtered and the paper's better on bluebird
(``docs/idbla_gibbs.md``, "Other settings tried").

Models
------
* :class:`IdblaGibbs` (``name = "idbla"``).
* :class:`FixedIdbla` (``name = "fixed-idbla"``): level 0 (paper's level H-1, "easy") has the fixed
  symmetric confusion matrix with error ``nu``, level H-1 (paper's level H, "hard") the one with error
  ``delta``; levels 1..H-2 are learned with ``Dir(psi)`` (``psi = omega`` plus ``diagonal_prior``).  The
  most-confident initialization group goes to the easy level.  With C = 2, the paper's ``delta = 0.8`` is
  an adversarial worker (0.2 on the diagonal): by default ``delta`` is capped at ``(C - 1) / C`` (a worker
  who guesses); ``cap_delta=False`` keeps the paper's value.
* :class:`Bcc` (``name = "bcc"``): H = 1 with a diagonal-favouring Dirichlet prior (see its docstring).
* :func:`paper_preset`: the paper's settings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
from scipy.special import gammaln

from crowdspark.block import Block
from crowdspark.models.base import MAX_SWEEPS, ItemResult, Preset, Schedule, State, Update
from crowdspark.models.common import (
    argmax_random_ties,
    fix_scores,
    label_loglik,
    normalize_log,
    shifted_exp,
    tie_uniforms,
)
from crowdspark.models.idbla_init import IdblaInit, level_counts, level_worker_table
from crowdspark.rng import driver_generator, uniforms
from crowdspark.stats import Stats
from crowdspark.validation import check_at_most, check_bool, check_choice, check_float, check_int

__all__ = [
    "IdblaGibbs",
    "FixedIdbla",
    "Bcc",
    "paper_preset",
    "SCHEMES",
    "draw_dirichlet",
    "collapsed_log_marginal",
    "diagnose_levels",
    "SWEEP_DTYPE",
    "SINGLE_PRECISION_MAX_LABELS",
]

log = logging.getLogger(__name__)

SCHEMES = ("joint", "paper")
_STREAM_T = 0
_STREAM_Q = 1
_TINY = 1e-300
# The sweeps' per-item tables (ll, the joint weights) are float32: they only choose a draw and feed
# Monte Carlo averages, and single precision halves the memory traffic of the sweep's three largest steps
# (the sparse product, the copy to Fortran order and exp; timings in BENCHMARKS.md, "Single-precision
# sweeps").  The rounding of a float32 sum grows with the item's number of labels (measured on contested
# items by scripts/experiments/sweep_precision.py; figures in docs/idbla_gibbs.md, "Precision").  So a block
# with an item of more than SINGLE_PRECISION_MAX_LABELS labels builds its table in float64 (the float32 log
# tables it receives are exact to 6e-8 per cell, an input error that does not accumulate like the rounding of
# the sum).  Sums that leave a block (row totals, log evidence, the kept posteriors) and every final result
# (``item_posteriors``, model selection) are float64; the driver's parameters are float64 throughout.
SWEEP_DTYPE = np.float32
SINGLE_PRECISION_MAX_LABELS = 256


def draw_dirichlet(rng: np.random.Generator, concentration: np.ndarray) -> np.ndarray:
    """One Dirichlet draw per row of the last axis (gamma variates normalized), floored at 1e-300.

    Parameters
    ----------
    concentration : ndarray, shape (..., D), all > 0

    Returns
    -------
    ndarray, shape (..., D), rows sum to 1
    """
    g = rng.standard_gamma(concentration)
    g = np.maximum(g, _TINY)
    return g / g.sum(axis=-1, keepdims=True)


def _log_pi(pi: np.ndarray) -> np.ndarray:
    """``log pi``, floored at log(1e-300) (a Dirichlet draw can underflow to 0)."""
    return np.log(np.maximum(pi, _TINY))


def _max_labels_per_item(block: Block) -> int:
    """The largest number of labels of one item of ``block`` (memoized on the block, like the incidence)."""
    cached = block.__dict__.get("_max_labels_per_item")
    if cached is None:
        cached = int(block.labels_per_item().max(initial=0))
        object.__setattr__(block, "_max_labels_per_item", cached)
    return cached


def _inverse_cdf(weights: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Index drawn from each row of ``weights`` (n, D): the number of partial sums below ``target`` (n,).

    With ``target = u * weights.sum(axis=1)`` and ``u`` uniform on [0, 1), index j is drawn with
    probability ``weights[:, j] / weights.sum(axis=1)`` (the weights need not be normalized, and may be
    float32: the partial sums are float64, like :func:`~crowdspark.models.common.shifted_exp`'s totals, and
    added in the same order, so a column of weight 0 is never drawn).  The partial sums are accumulated one
    column at a time (columns are contiguous in the kernels' Fortran-ordered tables, and ``np.cumsum``
    along short rows is several times slower).

    Returns
    -------
    ndarray of int64, shape (n,)
    """
    D = weights.shape[1]
    running = weights[:, 0].astype(np.float64)  # float64 partial sums, summed in the order of ``total``
    idx = (running < target).astype(np.int64)
    for j in range(1, D - 1):
        running += weights[:, j]
        idx += running < target
    return idx


def _draw_from(log_scores: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Index drawn from each row of ``exp(log_scores)`` (n, D) with uniforms ``u`` (n,), int64 (n,)."""
    weights, total, _ = shifted_exp(log_scores, axis=1)
    return _inverse_cdf(weights, u * total[:, 0])


def collapsed_log_marginal(
    counts: np.ndarray,
    classes: np.ndarray,
    levels: np.ndarray,
    pi_prior: np.ndarray,
    gamma_alpha: float,
    gamma_beta: float,
    learned: np.ndarray | None = None,
    fixed_log_pi: np.ndarray | None = None,
) -> float:
    """``log p(L, T, Q | priors)`` with pi, alpha, beta integrated out (paper eq. 14, with its constants).

    Parameters
    ----------
    counts : ndarray, shape (K, H, C, C)
        ``N_l``.
    classes : ndarray, shape (C,)
    levels : ndarray, shape (H,)
    pi_prior : ndarray, shape (H, C, C)
        Dirichlet parameters of each row ``pi[k, h, t, :]``.
    gamma_alpha, gamma_beta : float
    learned : ndarray of bool, shape (H,), optional
        Levels whose pi is learned; the others use ``fixed_log_pi`` (H, C, C) (Fixed-IDBLA).

    Returns
    -------
    float
    """
    def dir_mult(n: np.ndarray, a: np.ndarray) -> np.ndarray:
        return (
            gammaln(a.sum(-1)) - gammaln((n + a).sum(-1)) + (gammaln(n + a) - gammaln(a)).sum(-1)
        )

    H = levels.shape[0]
    learned = np.ones(H, dtype=bool) if learned is None else learned
    total = float(dir_mult(counts[:, learned], np.broadcast_to(pi_prior[learned], counts[:, learned].shape)).sum())
    if fixed_log_pi is not None and (~learned).any():
        total += float((counts[:, ~learned] * fixed_log_pi[~learned]).sum())
    total += float(dir_mult(classes, np.full_like(classes, gamma_alpha)))
    total += float(dir_mult(levels, np.full_like(levels, gamma_beta)))
    return total


def diagnose_levels(
    counts: np.ndarray, level_share: np.ndarray, min_share: float, learned: np.ndarray | None = None
) -> dict[str, Any]:
    """Diagnostics of the two known failure modes from kept counts.

    Parameters
    ----------
    counts : ndarray, shape (K, H, C, C)
        Summed ``N_l`` over kept sweeps.
    level_share : ndarray, shape (H,)
        Mean share of items per level.
    min_share : float
        Levels with a smaller share are reported as collapsed.
    learned : ndarray of bool, shape (H,), optional
        Levels whose pi is learned; only these are checked for permuted classes.

    Returns
    -------
    dict with
        ``level_agreement`` (H,): share of labels equal to T per level (NaN for an empty level);
        ``class_map`` (H, C): the most frequent label given each true class per level (identity when the
        classes of the level are anchored); ``permuted_levels``: levels where ``class_map`` is not the
        identity; ``collapsed_levels``: levels with share < ``min_share``.
    """
    per_level = counts.sum(axis=0)  # (H, C, C)
    n_level = per_level.sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        agreement = np.trace(per_level, axis1=1, axis2=2) / n_level
    class_map = per_level.argmax(axis=2)
    seen = per_level.sum(axis=2) > 0
    identity = np.arange(per_level.shape[1])[None, :]
    learned = np.ones(per_level.shape[0], dtype=bool) if learned is None else learned
    permuted = [
        int(h) for h in np.flatnonzero(learned) if np.any(seen[h] & (class_map[h] != identity[0]))
    ]
    collapsed = [int(h) for h in np.flatnonzero(level_share < min_share)]
    return {
        "level_agreement": [None if not np.isfinite(a) else float(a) for a in agreement],
        "class_map": class_map.tolist(),
        "permuted_levels": permuted,
        "collapsed_levels": collapsed,
    }


@dataclass(frozen=True)
class IdblaGibbs(IdblaInit):
    """IDBLA by Gibbs sampling.

    Parameters
    ----------
    n_workers, n_classes, n_levels, seed, init, ability_scale, epsilon_bound, newton_steps,
    init_smoothing, histogram_bins
        See :class:`~crowdspark.models.idbla_init.IdblaInit`.
    scheme : {"joint", "paper"}
        How T_i and Q_i are drawn (module notes); default ``"joint"``.
    omega : float
        Dirichlet parameter > 0 of every cell of a pi row (paper: 1).
    diagonal_prior : float
        Extra Dirichlet mass >= 0 on the diagonal cell of each pi row (paper: 0).  Anchors the classes of
        sparsely populated levels (failure mode "permuted classes").
    gamma_alpha, gamma_beta : float
        Dirichlet parameters > 0 of alpha and beta (paper: 1).
    level_prior : float
        Pseudo-counts >= 0 per pi row spread as the level's pooled confusion at initialization (an
        empirical-Bayes prior, not in the paper; 0 switches it off).  It ties each (worker, level) matrix
        to what the level looks like across workers, which keeps sparsely labelled workers from making
        levels collapse and anchors each level's classes.
    burn_in : int
        Sweeps before the first kept sample.
    thin : int
        Keep every ``thin``-th sweep after burn-in.
    n_samples : int
        Kept samples (paper: 500).
    min_level_share : float
        Levels with a smaller mean share of items are reported as collapsed in the summary.
    """

    n_levels: int = 2
    scheme: str = "joint"
    omega: float = 1.0
    diagonal_prior: float = 0.0
    gamma_alpha: float = 1.0
    gamma_beta: float = 1.0
    level_prior: float = 0.0
    burn_in: int = 100
    thin: int = 1
    n_samples: int = 300
    min_level_share: float = 0.02

    name: ClassVar[str] = "idbla"
    title: ClassVar[str] = "IDBLA by Gibbs sampling"
    api_name: ClassVar[str] = "Idbla"
    description: ClassVar[str] = (
        "a true label and a difficulty level per item, a confusion matrix per worker and level; Gibbs sampling"
    )
    extra_level_criteria: ClassVar[dict[str, bool]] = {"paper": True, "collapsed": True, "collapsed_raw": True}
    worker_params: ClassVar[tuple[str, ...]] = ("pi",)
    shared_params: ClassVar[tuple[str, ...]] = ("alpha", "beta")
    param_domains: ClassVar[dict[str, tuple[str, str]]] = {
        "pi": ("simplex", "K*CC"), "alpha": ("simplex", "C"), "beta": ("simplex", "*")}
    tol: ClassVar[float | None] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        p = self.name
        check_choice(f"{p}.scheme", self.scheme, SCHEMES)
        check_float(f"{p}.omega", self.omega, minimum=0.0, strict_min=True)
        check_float(f"{p}.diagonal_prior", self.diagonal_prior, minimum=0.0)
        check_float(f"{p}.gamma_alpha", self.gamma_alpha, minimum=0.0, strict_min=True)
        check_float(f"{p}.gamma_beta", self.gamma_beta, minimum=0.0, strict_min=True)
        check_float(f"{p}.level_prior", self.level_prior, minimum=0.0)
        check_int(f"{p}.burn_in", self.burn_in, minimum=0)
        check_int(f"{p}.thin", self.thin, minimum=1)
        check_int(f"{p}.n_samples", self.n_samples, minimum=1)
        check_at_most(f"{p}.burn_in + {p}.thin * {p}.n_samples", self.burn_in + self.thin * self.n_samples,
                      MAX_SWEEPS, "every sweep is a pass over every label, so a fit this long would "
                      "run for days")
        check_float(f"{p}.min_level_share", self.min_level_share, minimum=0.0, maximum=1.0)

    @property
    def schedule(self) -> Schedule:
        return Schedule.sampler(self.burn_in, self.n_samples, self.thin)

    # ---- structure hooks (overridden by Fixed-IDBLA) ----------------------------------------------------
    def fixed_pi(self) -> np.ndarray:
        """Fixed confusion matrices (H, C, C) (only rows of non-learned levels are used)."""
        return np.full((self.n_levels, self.n_classes, self.n_classes), 1.0 / self.n_classes)

    def pi_prior(self, init_counts: np.ndarray | None = None) -> np.ndarray:
        """Dirichlet parameters of each pi row, shape (H, C, C).

        ``omega`` everywhere, ``diagonal_prior`` more on the diagonal and, when ``level_prior`` > 0 and the
        initialization counts ``init_counts`` (K, H, C, C) are given, ``level_prior`` pseudo-counts spread
        as the level's pooled initial confusion ``normalize(sum_k init_counts[k, h] + 1)``.
        """
        eye = np.eye(self.n_classes)
        row = self.omega + self.diagonal_prior * eye
        prior = np.broadcast_to(row, (self.n_levels, self.n_classes, self.n_classes)).copy()
        if self.level_prior > 0 and init_counts is not None:
            pooled = init_counts.sum(axis=0) + 1.0
            prior = prior + self.level_prior * pooled / pooled.sum(axis=-1, keepdims=True)
        return prior

    def _apply_fixed(self, pi: np.ndarray) -> np.ndarray:
        learned = self.learned_levels()
        if learned.all():
            return pi
        pi = pi.copy()
        pi[:, ~learned] = self.fixed_pi()[~learned][None]
        return pi

    # ---- initialization ---------------------------------------------------------------------------------
    def initial_parameters(self, stats: Stats) -> dict[str, np.ndarray]:
        params = super().initial_parameters(stats)
        params["pi"] = self._apply_fixed(params["pi"])
        params["pi_prior"] = self.pi_prior(stats["counts"])
        H, C, K = self.n_levels, self.n_classes, self.n_workers
        params["pi_sum"] = np.zeros((K, H, C, C))
        params["counts_sum"] = np.zeros((K, H, C, C))
        params["alpha_sum"] = np.zeros(C)
        params["beta_sum"] = np.zeros(H)
        params["levels_sum"] = np.zeros(H)
        params["n_kept"] = 0
        params["last_counts"] = stats["counts"]
        params["last_classes"] = stats["classes"]
        params["last_levels"] = stats["levels"]
        return params

    # ---- executors ----------------------------------------------------------------------------------------
    def log_tables(
        self, pi: np.ndarray, alpha: np.ndarray, beta: np.ndarray, dtype: type = np.float64
    ) -> dict[str, np.ndarray]:
        """What a sweep reads: ``log_pi`` (K, H, C, C), floored at log(1e-300), and ``log_prior`` (H, C) =
        ``log beta_h + log alpha_t``, both of ``dtype`` (the sweeps use ``SWEEP_DTYPE``)."""
        return {
            "log_pi": _log_pi(pi).astype(dtype, copy=False),
            "log_prior": (np.log(beta)[:, None] + np.log(alpha)[None, :]).astype(dtype, copy=False),
        }

    def joint_log_table(self, block: Block, tables: dict[str, np.ndarray]) -> np.ndarray:
        """``log alpha_t + log beta_h + ll[i, h, t]``, shape (n, H, C), a new Fortran-ordered array of the
        tables' dtype; ``-inf`` off the gold class of an item with gold in the fit, so the draws of ``T_i``
        and every posterior take that class (:func:`~crowdspark.models.common.fix_scores`).

        ``tables`` as made by :meth:`log_tables`; single-precision tables are used in double precision for a
        block with an item of more than ``SINGLE_PRECISION_MAX_LABELS`` labels (see ``SWEEP_DTYPE``).
        """
        if tables["log_pi"].dtype != np.float64 and _max_labels_per_item(block) > SINGLE_PRECISION_MAX_LABELS:
            tables = {key: value.astype(np.float64) for key, value in tables.items()}
        table = label_loglik(block, tables["log_pi"])  # (n, H, C), a new array
        table += tables["log_prior"]
        return fix_scores(block, table)

    def _draw_paper(
        self, block: Block, state: dict[str, np.ndarray], table: np.ndarray, sweep: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The paper's scheme: ``T_i | Q_i`` (eq. 4), then ``Q_i | T_i`` (eq. 5); int32 (n,) each."""
        rows = np.arange(table.shape[0])
        u_t = uniforms(self.seed, sweep, block.item_keys, _STREAM_T)
        T = _draw_from(table[rows, state["Q"], :], u_t).astype(np.int32)
        u_q = uniforms(self.seed, sweep, block.item_keys, _STREAM_Q)
        Q = _draw_from(table[rows, :, T], u_q).astype(np.int32)
        return T, Q

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        """One Gibbs sweep over a block: draw (T, Q), return their counts and log-likelihoods.

        ``params`` as made by :meth:`step_params`.  State: ``T``, ``Q`` int32 (n,), ``epsilon`` (n,) and,
        once a sweep is kept, ``post_sum`` (n, C), ``level_sum`` (n, H), ``n_kept``.  Stats: ``counts``
        (K, H, C, C), ``classes`` (C,), ``levels`` (H,) (integer counts) and ``log_evidence`` (0-d).
        """
        assert state is not None
        table = self.joint_log_table(block, params)
        n, H, C = table.shape
        if self.scheme == "paper":
            T, Q = self._draw_paper(block, state, table, sweep)
        # the joint table p(t, h | L_i) up to its row sums, written over the log table (the largest
        # per-item array of the sweep: no second one is allocated)
        flat = table.reshape(n, H * C)
        weights, total, log_evidence = shifted_exp(flat, axis=1, out=flat)
        if self.scheme == "joint":
            idx = _inverse_cdf(weights, uniforms(self.seed, sweep, block.item_keys, _STREAM_T) * total[:, 0])
            T, Q = (idx % C).astype(np.int32), (idx // C).astype(np.int32)
        new = dict(state)
        new["T"], new["Q"] = T, Q
        if self.schedule.is_kept(sweep):
            # p(T_i | L_i) and p(Q_i | L_i): marginals of the unnormalized table divided by its row sums,
            # both summed in float64 so that each marginal sums to 1 (each is one new float64 array, updated
            # in place: the previous state's arrays are not touched)
            joint = weights.reshape(n, H, C)
            for key, axis in (("post_sum", 1), ("level_sum", 2)):
                marginal = np.divide(joint.sum(axis=axis, dtype=np.float64), total)
                if key in state:
                    marginal += state[key]
                new[key] = marginal
            new["n_kept"] = state.get("n_kept", 0) + 1
        stats = level_counts(block, T, Q, self.n_workers, self.n_classes, self.n_levels)
        stats["log_evidence"] = np.array(float(log_evidence.sum()))
        return new, stats

    def step_params(self, params: Any) -> dict[str, np.ndarray]:
        """:meth:`log_tables` of the current draw in ``SWEEP_DTYPE``, computed once per sweep on the driver;
        a sweep reads nothing else (the kept sums and last counts, four more (K, H, C, C) arrays, stay on the
        driver)."""
        return self.log_tables(params["pi"], params["alpha"], params["beta"], SWEEP_DTYPE)

    # ---- driver -------------------------------------------------------------------------------------------
    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        """Draw pi, alpha, beta (eq. 6-8) from the summed counts; accumulate kept means.

        ``Update.objective`` is ``log p(L | pi, alpha, beta) / n_labels`` for the pi the sweep used;
        ``Update.extra`` has ``loglik`` (the paper's ``log p(L | pi, T, Q)`` with the new T, Q) and, per
        level h, ``level_size_h`` and ``level_share_h``.
        """
        rng = driver_generator(self.seed, sweep)
        prior = params["pi_prior"][None]
        conc = stats["counts"] + prior
        pi = self._apply_fixed(draw_dirichlet(rng, conc))
        alpha = draw_dirichlet(rng, stats["classes"] + self.gamma_alpha)
        beta = draw_dirichlet(rng, stats["levels"] + self.gamma_beta)
        new = dict(params)
        new.update(pi=pi, alpha=alpha, beta=beta, last_counts=stats["counts"], last_classes=stats["classes"],
                   last_levels=stats["levels"])
        if self.schedule.is_kept(sweep):
            new["pi_sum"] = params["pi_sum"] + self._apply_fixed(conc / conc.sum(axis=-1, keepdims=True))
            new["counts_sum"] = params["counts_sum"] + stats["counts"]
            a = stats["classes"] + self.gamma_alpha
            b = stats["levels"] + self.gamma_beta
            new["alpha_sum"] = params["alpha_sum"] + a / a.sum()
            new["beta_sum"] = params["beta_sum"] + b / b.sum()
            new["levels_sum"] = params["levels_sum"] + stats["levels"]
            new["n_kept"] = params["n_kept"] + 1
        n_labels = params["n_labels"]
        # log p(L | pi, T, Q), the paper's criterion: a sum over labels of log pi[k, Q_i, T_i, c], i.e. the
        # summed counts times the log of the pi the sweep used (once per sweep, sized by K, H, C; exact
        # integer counts make it independent of how the items were split into blocks)
        extra = {"loglik": float((stats["counts"] * _log_pi(params["pi"])).sum())}
        n_items = float(stats["levels"].sum())
        for h, size in enumerate(stats["levels"]):
            extra[f"level_size_{h}"] = float(size)
            extra[f"level_share_{h}"] = float(size) / max(n_items, 1.0)
        return Update(params=new, objective=float(stats["log_evidence"]) / n_labels, extra=extra)

    # ---- results ------------------------------------------------------------------------------------------
    def item_posteriors(self, block: Block, state: State, params: Any) -> tuple[np.ndarray, np.ndarray]:
        """Class posterior (n, C) and level posterior (n, H): kept-sample means, else from ``params``."""
        if state is not None and state.get("n_kept", 0) > 0:
            k = float(state["n_kept"])
            return state["post_sum"] / k, state["level_sum"] / k
        table = self.joint_log_table(block, self.log_tables(**self.final_params(params)))
        n, H, C = table.shape
        joint, _ = normalize_log(table.reshape(n, H * C), axis=1)
        joint = joint.reshape(n, H, C)
        return joint.sum(axis=1), joint.sum(axis=2)

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        posterior, level_post = self.item_posteriors(block, state, params)
        label = argmax_random_ties(posterior, tie_uniforms(block, self.seed))
        level = argmax_random_ties(level_post, tie_uniforms(block, self.seed, stream=_STREAM_Q))
        eps = state["epsilon"] if state is not None else np.full(block.n_items, np.nan)
        return ItemResult(
            posterior=posterior,
            label=label,
            extra={"level": level.astype(np.int32), "level_posterior": level_post, "epsilon": eps},
        )

    def final_params(self, params: Any) -> dict[str, np.ndarray]:
        """Posterior means over kept samples (``pi``, ``alpha``, ``beta``); the current draw if none kept."""
        k = params.get("n_kept", 0)
        if not k:
            return {"pi": params["pi"], "alpha": params["alpha"], "beta": params["beta"]}
        return {"pi": params["pi_sum"] / k, "alpha": params["alpha_sum"] / k, "beta": params["beta_sum"] / k}

    def export_params(self, params: Any) -> dict[str, np.ndarray]:
        return self.final_params(params)

    def worker_start(self, confusion: np.ndarray, accuracy: np.ndarray) -> dict[str, np.ndarray]:
        """``pi``: the table's confusion matrix on every learned level (fixed levels keep their matrices)."""
        shape = (confusion.shape[0], self.n_levels) + confusion.shape[1:]
        return {"pi": self._apply_fixed(np.broadcast_to(confusion[:, None], shape).copy())}

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        final = self.final_params(params)
        return level_worker_table(final["pi"], final["alpha"], final["beta"], init_stats["worker_labels"])

    def summary(self, params: Any) -> dict[str, Any]:
        final = self.final_params(params)
        k = params.get("n_kept", 0)
        counts = params["counts_sum"] if k else params["last_counts"]
        sizes = params["levels_sum"] / k if k else params["last_levels"]
        share = sizes / max(float(sizes.sum()), 1.0)
        diag = diagnose_levels(counts, share, self.min_level_share, self.learned_levels())
        for h in diag["collapsed_levels"]:
            log.warning("%s: level %d holds %.1f%% of the items (collapsed)", self.name, h, 100 * share[h])
        for h in diag["permuted_levels"]:
            log.warning("%s: level %d has permuted classes %s", self.name, h, diag["class_map"][h])
        out = {
            "class_proportions": final["alpha"].tolist(),
            "level_proportions": final["beta"].tolist(),
            "level_sizes": sizes.tolist(),
            "n_kept_samples": int(k),
            "scheme": self.scheme,
        }
        out.update(diag)
        return out

    def level_row(self, params: Any, history: list[dict[str, float]], evidence: Stats) -> dict[str, Any]:
        """``paper``: the paper's ``log p(L | pi, T, Q)`` averaged over the kept sweeps (section 5.2; it grows
        with H almost always); ``collapsed_raw``: ``log p(L, T, Q)`` with pi, alpha, beta integrated out
        (eq. 14) at the last sweep's counts; ``collapsed``: that plus the entropy of the items' posteriors
        over (T, Q), an ELBO-type estimate of ``log p(L)``."""
        kept = [entry["loglik"] for entry in history if self.schedule.is_kept(int(entry["iteration"]))]
        raw = float(self.collapsed_log_marginal(params))
        return {
            "paper": float(np.mean(kept)) if kept else float(history[-1]["loglik"]),
            "collapsed_raw": raw,
            "collapsed": raw + float(evidence["entropy"]),
            "level_sizes": self.summary(params)["level_sizes"],
        }

    def collapsed_log_marginal(self, params: Any) -> float:
        """Paper eq. 14 at the last sweep's counts (see :func:`collapsed_log_marginal`)."""
        return collapsed_log_marginal(
            params["last_counts"], params["last_classes"], params["last_levels"], params["pi_prior"],
            self.gamma_alpha, self.gamma_beta, self.learned_levels(), np.log(self.fixed_pi()),
        )


@dataclass(frozen=True)
class FixedIdbla(IdblaGibbs):
    """Fixed-IDBLA (paper 4.2): fixed easy (level 0) and hard (level H-1) confusion matrices.

    Parameters
    ----------
    nu : float
        Error rate of the easy level, in [0, 1) (paper: 0.1).
    delta : float
        Error rate of the hard level, in [0, 1) (paper: 0.8).
    cap_delta : bool
        Use ``min(delta, (C - 1) / C)`` (default), so the hard level is never worse than guessing; the
        paper's setting is ``cap_delta=False``.
    n_levels : int
        H >= 2 (the paper's learned levels are 1..H-2; with H = 2 nothing about workers is learned).

    Other parameters as in :class:`IdblaGibbs`; the learned levels' prior ``psi`` is ``omega`` plus
    ``diagonal_prior`` on the diagonal.
    """

    n_levels: int = 3
    nu: float = 0.1
    delta: float = 0.8
    cap_delta: bool = True

    name: ClassVar[str] = "fixed-idbla"
    title: ClassVar[str] = "Fixed-IDBLA"
    api_name: ClassVar[str] = "FixedIdbla"
    description: ClassVar[str] = (
        "IDBLA with fixed easy and hard levels; Gibbs sampling"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(f"{self.name}.n_levels", self.n_levels, minimum=2)
        check_float(f"{self.name}.nu", self.nu, minimum=0.0, maximum=1.0, strict_max=True)
        check_float(f"{self.name}.delta", self.delta, minimum=0.0, maximum=1.0, strict_max=True)
        check_bool(f"{self.name}.cap_delta", self.cap_delta)

    @property
    def effective_delta(self) -> float:
        """The hard level's error rate actually used."""
        cap = (self.n_classes - 1) / self.n_classes
        return min(self.delta, cap) if self.cap_delta else self.delta

    def learned_levels(self) -> np.ndarray:
        learned = np.ones(self.n_levels, dtype=bool)
        learned[0] = learned[-1] = False
        return learned

    def fixed_pi(self) -> np.ndarray:
        C = self.n_classes
        out = np.full((self.n_levels, C, C), 1.0 / C)
        for h, err in ((0, self.nu), (self.n_levels - 1, self.effective_delta)):
            out[h] = err / (C - 1)
            np.fill_diagonal(out[h], 1.0 - err)
        return out


@dataclass(frozen=True)
class Bcc(IdblaGibbs):
    """Bayesian Classifier Combination (Kim & Ghahramani 2012) by Gibbs sampling: IDBLA with H = 1.

    The confusion rows get a diagonal-favouring Dirichlet prior, as in Kim & Ghahramani's experiments
    (prior belief that workers are better than chance).  Kim & Ghahramani's exact numbers were not
    available to us; our values: ``omega = 1`` off the diagonal and ``1 + diagonal_prior = 2`` on it
    (prior mean accuracy 2 / (C + 1), e.g. 0.67 for C = 2), with ``gamma_alpha = 1``.  A stronger
    diagonal (3 on the diagonal) measured worse on web_search_filtered (``docs/idbla_gibbs.md``, "BCC
    prior").  With H = 1 the level initialization is trivial.
    """

    n_levels: int = 1
    diagonal_prior: float = 1.0

    name: ClassVar[str] = "bcc"
    title: ClassVar[str] = "BCC"
    api_name: ClassVar[str] = "Bcc"
    description: ClassVar[str] = (
        "Bayesian Dawid-Skene (Kim & Ghahramani) by Gibbs sampling"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(f"{self.name}.n_levels", self.n_levels, minimum=1, maximum=1)


def paper_preset(model: IdblaGibbs, n_levels: int | None = None) -> IdblaGibbs:
    """``model`` with the paper's settings (section 5.2).

    omega = gamma_alpha = gamma_beta = 1, no diagonal prior (BCC keeps its prior), 500 kept samples, the
    paper's ``scheme``, no smoothing in the initial counting (a tiny pseudo-count avoids 0/0), Fixed-IDBLA's
    delta uncapped.
    With the preset, H is chosen by ``criterion="paper"`` (:attr:`Preset.select_levels`).
    """
    changes: dict[str, Any] = dict(
        gamma_alpha=1.0, gamma_beta=1.0, n_samples=500, scheme="paper", init_smoothing=0.0, init="paper"
    )
    if not isinstance(model, Bcc):  # BCC keeps Kim & Ghahramani's prior (paper section 5.2)
        changes.update(omega=1.0, diagonal_prior=0.0)
    if isinstance(model, FixedIdbla):
        changes["cap_delta"] = False
    if n_levels is not None and not isinstance(model, Bcc):
        changes["n_levels"] = n_levels
    return replace(model, **changes)


IdblaGibbs.presets = {"paper": Preset(paper_preset, select_levels=(1, 2, 3, 4), level_criterion="paper")}
FixedIdbla.presets = {"paper": Preset(paper_preset, select_levels=(2, 3, 4), level_criterion="paper")}
Bcc.presets = {"paper": Preset(paper_preset)}
