"""The IDBLA initialization (paper section 4.4), distributed over blocks.

Notation
--------
K workers, C classes, H difficulty levels; ``n`` items and ``m`` labels in a block.
``T[i]`` true class, ``Q[i]`` difficulty level of item i (**level 0 is the easiest**: the items the
initialization is most confident about).  ``pi[k, h, t, c]`` = P(worker k says c | T = t, Q = h),
``alpha[t]`` class proportions, ``beta[h]`` level proportions.  ``R[k]`` is worker k's correct rate against
the majority vote, ``x`` the ability scale (``ability_scale``), ``lambda[k] = x * R[k]`` the ability and
``epsilon[i]`` the item's ease (``1 / epsilon[i]`` is the paper's difficulty), with

    p(L[i, k] = T[i] | lambda[k], epsilon[i]) = 1 / (1 + (C - 1) exp(-lambda[k] * epsilon[i]))   (eq. 24)

and the wrong classes sharing the rest equally.  The likelihood depends on ``lambda * epsilon`` =
``R * (x * epsilon)`` only, so the kernels solve for ``s[i] = x * epsilon[i]`` and report
``epsilon = s / x``: the scale ``x`` changes the reported epsilon by ``1 / x`` and nothing else (in
particular not the levels).  ``epsilon_bound`` bounds ``s`` (not epsilon) for the same reason.

Passes (each a map over blocks and a sum on the driver)
-------------------------------------------------------
1. ``init_block``: ``T`` = majority vote (ties broken by :func:`crowdspark.rng.uniforms`, sweep 0,
   stream 0), the gold class for items with gold in the fit (``Block.fixed``); additive per-worker counts of
   labels and of labels equal to ``T``.
   ``init_params``: ``R[k]`` and ``lambda[k]``.
2. ``init_round(round=1)``: per-item ``s[i]`` maximizing the concave log-likelihood of eq. 25 by
   safeguarded Newton steps (Newton inside a shrinking bracket, bisection when Newton leaves it), clipped
   to ``[0, epsilon_bound]``: items whose labels all agree with ``T`` (including items with one label)
   get the bound, items whose agreement is at most chance get 0.  Additive histogram of ``s`` on a fixed
   grid.  ``init_update(round=1)``: ``H - 1`` level thresholds at the histogram's quantiles, so the H
   groups are as equal in size as ties allow (level 0 = largest ``s``).
3. ``init_round(round=2)``: ``Q`` from the thresholds; additive counts ``N_l(k, h, t, c)``,
   ``N_t(t)``, ``N_q(h)``.  ``init_update(round=2)``: ``pi``, ``alpha``, ``beta`` by counting with
   Dirichlet pseudo-count ``init_smoothing`` (the paper counts without smoothing; an empty
   (worker, level, class) row would then be 0/0).

With ``init="random"`` (the paper's ablation, Table 3) ``T`` and ``Q`` are drawn uniformly from
:func:`crowdspark.rng.uniforms` (sweep 0, streams 1 and 2) and the rest is unchanged (``epsilon`` is
still computed, against the random ``T``).

Contract for subclasses (Gibbs, collapsed VI)
---------------------------------------------
After the last ``init_update`` (``n_init_rounds = 2``):

* ``params`` is a dict with ``"pi"`` float64 (K, H, C, C) (rows sum to 1), ``"alpha"`` (C,),
  ``"beta"`` (H,), the initialization counts ``"init_counts"`` (K, H, C, C), ``"init_classes"`` (C,),
  ``"init_levels"`` (H,), ``"ability"`` (K,) (= lambda), ``"correct_rate"`` (K,), ``"thresholds"``
  (H - 1,) on the ``s = x * epsilon`` scale (decreasing) and ``"n_labels"`` (float).
* each block's state is a dict with ``"T"`` int32 (n,), ``"Q"`` int32 (n,) and ``"epsilon"``
  float64 (n,).

``stateful = True``: engines keep the state each kernel returns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.models.base import Footprint, LevelModel, State
from crowdspark.models.common import (
    fix_labels,
    fix_scores,
    label_cells,
    label_loglik,
    normalize_log,
    normalize_rows,
    per_item_sum,
)
from crowdspark.models.majority_vote import majority_labels
from crowdspark.rng import uniforms
from crowdspark.stats import Stats
from crowdspark.validation import check_choice, check_float, check_int

__all__ = [
    "IdblaInit",
    "INIT_CHOICES",
    "fit_strength",
    "level_thresholds",
    "assign_levels",
    "level_counts",
    "STREAM_RANDOM_T",
    "STREAM_RANDOM_Q",
]

log = logging.getLogger(__name__)

INIT_CHOICES = ("paper", "random")
#: uniforms streams of the random initialization (sweep 0); stream 0 is the majority-vote tie-break
STREAM_RANDOM_T = 1
STREAM_RANDOM_Q = 2


def _correct_prob(u: np.ndarray, n_classes: int) -> np.ndarray:
    """Eq. 24 as a function of ``u = lambda * epsilon``: ``1 / (1 + (C - 1) exp(-u))``, stable for u >= 0."""
    return 1.0 / (1.0 + (n_classes - 1) * np.exp(-u))


def fit_strength(
    block: Block,
    T: np.ndarray,
    rate: np.ndarray,
    n_classes: int,
    bound: float,
    n_steps: int,
) -> np.ndarray:
    """Per-item ``s = x * epsilon`` maximizing the eq. 25 log-likelihood, clipped to ``[0, bound]``.

    With ``y`` = 1 where a label equals ``T`` and ``p = 1 / (1 + (C - 1) exp(-R s))``, the log-likelihood
    of item i is concave in ``s`` with gradient ``sum_k R_k (y_k - p_k)`` and second derivative
    ``-sum_k R_k^2 p_k (1 - p_k)``.  Safeguarded Newton: each item keeps a bracket ``[lo, hi]`` that
    contains the maximizer; a Newton step that leaves the bracket is replaced by bisection.

    Parameters
    ----------
    block : Block
    T : ndarray of int, shape (n,)
        Current true classes.
    rate : ndarray of float, shape (K,)
        Worker correct rates ``R``.
    n_classes : int
        C.
    bound : float
        Upper bound of ``s``.
    n_steps : int
        Newton steps.

    Returns
    -------
    ndarray of float64, shape (n,)
    """
    n = block.n_items
    if n == 0:
        return np.zeros(0)
    y = (block.label == T[block.item_of_label]).astype(np.float64)
    r = rate[block.worker]

    def grad_hess(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = _correct_prob(r * s[block.item_of_label], n_classes)
        grad = per_item_sum(block, r * (y - p))
        hess = -per_item_sum(block, r * r * p * (1.0 - p))
        return grad, hess

    lo = np.zeros(n)
    hi = np.full(n, float(bound))
    g0, _ = grad_hess(lo)
    g1, _ = grad_hess(hi)
    s = np.full(n, 0.5 * bound)
    for _ in range(n_steps):
        g, h = grad_hess(s)
        up = g > 0
        lo = np.where(up, s, lo)
        hi = np.where(up, hi, s)
        with np.errstate(divide="ignore", invalid="ignore"):
            newton = s - g / h
        inside = np.isfinite(newton) & (newton > lo) & (newton < hi)
        s = np.where(inside, newton, 0.5 * (lo + hi))
    s = np.where(g0 <= 0, 0.0, s)
    s = np.where(g1 >= 0, float(bound), s)
    return s


def _bin_index(s: np.ndarray, bound: float, n_bins: int) -> np.ndarray:
    """Histogram bin of each ``s`` on ``n_bins`` equal bins over ``[0, bound]`` (the bound is in the last)."""
    idx = np.floor(s / bound * n_bins).astype(np.int64)
    return np.clip(idx, 0, n_bins - 1)


def level_thresholds(histogram: np.ndarray, n_levels: int) -> np.ndarray:
    """Bin thresholds splitting a histogram of ``s`` into ``n_levels`` groups from the top.

    Parameters
    ----------
    histogram : ndarray, shape (B,)
        Item counts per bin of ``s`` (bin ``B - 1`` holds the largest values).
    n_levels : int
        H.

    Returns
    -------
    ndarray of int64, shape (H - 1,)
        Strictly decreasing bin indices where possible; an item in bin ``b`` gets level
        ``sum_j (b < thresholds[j])`` (0 = top group).  Threshold j is the lowest bin of the top
        ``(j + 1) / H`` share of the items; with ties a group may be larger than ``1 / H``.
    """
    n_bins = histogram.shape[0]
    total = float(histogram.sum())
    from_top = np.cumsum(histogram[::-1])
    out = np.empty(n_levels - 1, dtype=np.int64)
    prev = n_bins
    for j in range(n_levels - 1):
        target = total * (j + 1) / n_levels
        top_index = int(np.searchsorted(from_top, target - 1e-9, side="left"))
        b = n_bins - 1 - min(top_index, n_bins - 1)
        # keep groups non-empty in bin terms: each threshold at least one bin below the previous one
        b = min(b, prev - 1)
        out[j] = max(b, 0)
        prev = out[j]
    return out


def assign_levels(s: np.ndarray, thresholds: np.ndarray, bound: float, n_bins: int) -> np.ndarray:
    """Level of each item from its ``s`` and the bin thresholds (0 = easiest), int32 (n,)."""
    b = _bin_index(s, bound, n_bins)
    return (b[:, None] < thresholds[None, :]).sum(axis=1).astype(np.int32)


def level_counts(block: Block, T: np.ndarray, Q: np.ndarray, n_workers: int, n_classes: int, n_levels: int) -> Stats:
    """Additive counts of a hard assignment of (T, Q).

    Returns
    -------
    dict with ``counts`` (K, H, C, C) = ``N_l(k, h, t, c)``, ``classes`` (C,) = ``N_t``,
    ``levels`` (H,) = ``N_q``, all int64 (exact: their sums do not depend on the order of the blocks)
    """
    # one bincount over the labels of the flat index ((k * H + Q_i) * C + T_i) * C + c, faster than a sparse
    # product with the one-hot of (Q, T) (BENCHMARKS.md, "Kernel and data-path choices")
    C = n_classes
    item_cell = (Q.astype(np.int64) * C + T) * C  # (n,)
    index = item_cell[block.item_of_label]  # per label; a gather is faster than np.repeat by offsets
    index += label_cells(block, n_levels * C * C)
    counts = np.bincount(index, minlength=n_workers * n_levels * C * C)
    return {
        "counts": counts.reshape(n_workers, n_levels, C, C),
        "classes": np.bincount(T, minlength=n_classes),
        "levels": np.bincount(Q, minlength=n_levels),
    }


def level_worker_table(
    pi: np.ndarray, alpha: np.ndarray, beta: np.ndarray, worker_labels: np.ndarray
) -> dict[str, np.ndarray]:
    """Per-worker columns of a model with levels, from its estimates.

    Parameters
    ----------
    pi : ndarray, shape (K, H, C, C)
    alpha : ndarray, shape (C,)
    beta : ndarray, shape (H,)
    worker_labels : ndarray, shape (K,)
        Labels per worker.

    Returns
    -------
    dict with ``n_labels`` (K,), ``confusion`` (K, C, C) averaged over levels with beta, ``accuracy`` (K,),
    ``level_confusion`` (K, H, C, C) and ``level_accuracy`` (K, H) (accuracies weighted by alpha)
    """
    level_accuracy = np.einsum("t,khtt->kh", alpha, pi)
    return {
        "n_labels": worker_labels.round().astype(np.int64),
        "confusion": np.einsum("h,khtc->ktc", beta, pi),
        "accuracy": level_accuracy @ beta,
        "level_confusion": pi,
        "level_accuracy": level_accuracy,
    }


@dataclass(frozen=True)
class IdblaInit(LevelModel):
    """The paper's initialization of T, Q, pi, alpha and beta (section 4.4); base of the IDBLA models.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C.
    n_levels : int
        H >= 1.
    seed : int
        Seed of all per-item draws.
    init : {"paper", "random"}
        The paper's initialization, or uniform random T and Q (the paper's ablation).
    ability_scale : float
        ``x`` > 0 in ``lambda = x * R``.  It rescales the reported epsilon only (see the module notes).
    epsilon_bound : float
        Upper bound > 0 of ``x * epsilon`` (items whose labels all agree with T reach it).
    newton_steps : int
        Safeguarded Newton steps per item.
    init_smoothing : float
        Dirichlet pseudo-count >= 0 of the counting that initializes pi, alpha and beta.
    histogram_bins : int
        Bins of the additive histogram of ``x * epsilon`` used for the level thresholds.
    """

    n_workers: int
    n_classes: int
    n_levels: int = 2
    seed: int = 0
    init: str = "paper"
    ability_scale: float = 1.0
    epsilon_bound: float = 30.0
    newton_steps: int = 40
    init_smoothing: float = 0.5
    histogram_bins: int = 4096

    name: ClassVar[str] = "idbla-init"
    #: per-item output columns beyond label/posterior (subclasses' finish_block), with Spark SQL types
    item_extras: ClassVar[dict[str, str]] = {"level": "int", "level_posterior": "array<double>", "epsilon": "double"}
    stateful: ClassVar[bool] = True
    n_init_rounds: ClassVar[int] = 2
    random_fit: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        prefix = self.name
        check_int(f"{prefix}.n_workers", self.n_workers, minimum=1)
        check_int(f"{prefix}.n_classes", self.n_classes, minimum=2)
        check_int(f"{prefix}.n_levels", self.n_levels, minimum=1)
        check_int(f"{prefix}.seed", self.seed, minimum=0)
        check_choice(f"{prefix}.init", self.init, INIT_CHOICES)
        check_float(f"{prefix}.ability_scale", self.ability_scale, minimum=0.0, strict_min=True)
        check_float(f"{prefix}.epsilon_bound", self.epsilon_bound, minimum=0.0, strict_min=True)
        check_int(f"{prefix}.newton_steps", self.newton_steps, minimum=1)
        check_float(f"{prefix}.init_smoothing", self.init_smoothing, minimum=0.0)
        check_int(f"{prefix}.histogram_bins", self.histogram_bins, minimum=self.n_levels)

    def footprint(self) -> Footprint:
        """The confusion matrices and the initialization counts, (K, H, C, C) each, the scores over (level,
        class) of a block's items (n, H C), and the per-item class, level and epsilon the blocks keep."""
        k, h, c = self.n_workers, self.n_levels, self.n_classes
        return Footprint(params=2 * (k * h * c * c + h * c), item=h * c, state=3,
                         largest=(("workers", k), ("levels", h), ("classes", c), ("classes", c)))

    # ---- pass 1: majority vote and worker correct rates ------------------------------------------------
    def init_block(self, block: Block) -> tuple[State, Stats]:
        if self.init == "random":
            u = uniforms(self.seed, 0, block.item_keys, STREAM_RANDOM_T)
            T = np.minimum((u * self.n_classes).astype(np.int32), self.n_classes - 1)
        else:
            _, T = majority_labels(block, self.n_classes, self.seed)
        T = fix_labels(block, T)
        agree = (block.label == T[block.item_of_label]).astype(np.float64)
        stats = {
            "worker_labels": np.bincount(block.worker, minlength=self.n_workers).astype(np.float64),
            "worker_agree": np.bincount(block.worker, weights=agree, minlength=self.n_workers),
        }
        return {"T": T.astype(np.int32)}, stats

    def init_params(self, stats: Stats) -> dict[str, Any]:
        n = stats["worker_labels"]
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = np.where(n > 0, stats["worker_agree"] / n, 1.0 / self.n_classes)
        return {
            "correct_rate": rate,
            "ability": self.ability_scale * rate,
            "n_labels": float(n.sum()),
        }

    # ---- passes 2 and 3 --------------------------------------------------------------------------------
    def init_round(self, block: Block, state: State, params: Any, round: int) -> tuple[State, Stats]:
        assert state is not None
        if round == 1:
            s = fit_strength(
                block, state["T"], params["correct_rate"], self.n_classes, self.epsilon_bound, self.newton_steps
            )
            hist = np.bincount(
                _bin_index(s, self.epsilon_bound, self.histogram_bins), minlength=self.histogram_bins
            ).astype(np.float64)
            new = dict(state)
            new["epsilon"] = s / self.ability_scale
            return new, {"strength_histogram": hist}
        if round == 2:
            Q = self._initial_levels(block, state, params)
            new = dict(state)
            new["Q"] = Q
            return new, level_counts(block, state["T"], Q, self.n_workers, self.n_classes, self.n_levels)
        raise ValueError(f"round must be 1 or 2, but got {round!r}")

    def _initial_levels(self, block: Block, state: dict[str, np.ndarray], params: Any) -> np.ndarray:
        if self.init == "random":
            u = uniforms(self.seed, 0, block.item_keys, STREAM_RANDOM_Q)
            return np.minimum((u * self.n_levels).astype(np.int32), self.n_levels - 1)
        s = state["epsilon"] * self.ability_scale
        return assign_levels(s, params["threshold_bins"], self.epsilon_bound, self.histogram_bins)

    def init_update(self, stats: Stats, params: Any, round: int) -> Any:
        new = dict(params)
        if round == 1:
            bins = level_thresholds(stats["strength_histogram"], self.n_levels)
            new["threshold_bins"] = bins
            new["thresholds"] = bins * (self.epsilon_bound / self.histogram_bins)
            return new
        if round == 2:
            new.update(self.initial_parameters(stats))
            log.info("%s: initial level sizes %s", self.name, stats["levels"].astype(int).tolist())
            return new
        raise ValueError(f"round must be 1 or 2, but got {round!r}")

    # ---- choosing H -------------------------------------------------------------------------------------
    def learned_levels(self) -> np.ndarray:
        """Which levels have a learned pi, bool (H,)."""
        return np.ones(self.n_levels, dtype=bool)

    def n_free_parameters(self) -> int:
        """Free parameters for AIC and BIC: learned pi rows, alpha and beta."""
        n_learned = int(self.learned_levels().sum())
        C = self.n_classes
        return self.n_workers * n_learned * C * (C - 1) + (C - 1) + (self.n_levels - 1)

    def final_params(self, params: Any) -> dict[str, np.ndarray]:
        """The fitted ``pi`` (K, H, C, C), ``alpha`` (C,) and ``beta`` (H,) (each model's point estimates)."""
        raise NotImplementedError

    def evidence_block(self, block: Block, params: Any) -> Stats:
        """At :meth:`final_params`: ``log_evidence`` = ``sum_i log p(L_i | pi, alpha, beta)`` and ``entropy``
        = the summed entropy of the items' posteriors over (T_i, Q_i)."""
        final = self.final_params(params)
        log_prior = np.log(final["beta"])[:, None] + np.log(final["alpha"])[None, :]
        table = label_loglik(block, np.log(np.maximum(final["pi"], 1e-300)))  # (n, H, C)
        table += log_prior
        table = fix_scores(block, table)
        n = table.shape[0]
        probs, log_evidence = normalize_log(table.reshape(n, -1), axis=1)
        entropy = -(probs * np.log(np.maximum(probs, 1e-300))).sum()
        return {"log_evidence": np.array(float(log_evidence.sum())), "entropy": np.array(float(entropy))}

    def level_row(self, params: Any, history: list[dict[str, float]], evidence: Stats) -> dict[str, Any]:
        return {"level_sizes": self.summary(params)["level_sizes"]}

    def initial_parameters(self, stats: Stats) -> dict[str, np.ndarray]:
        """pi, alpha, beta by smoothed counting; subclasses may override (e.g. to fix some levels)."""
        s = self.init_smoothing
        return {
            "pi": normalize_rows(stats["counts"], s if s > 0 else 1e-12),
            "alpha": normalize_rows(stats["classes"], s if s > 0 else 1e-12),
            "beta": normalize_rows(stats["levels"], s if s > 0 else 1e-12),
            "init_counts": stats["counts"],
            "init_classes": stats["classes"],
            "init_levels": stats["levels"],
        }
