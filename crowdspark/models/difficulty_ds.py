"""Difficulty-aware Dawid-Skene ("dds"): item difficulty makes every worker noisier, each worker keeps one
confusion matrix (issue 5).

Notation
--------
K workers, C classes, H difficulty levels; ``n`` items and ``m`` labels in a block, ``m_total`` labels in all.
``T[i]`` true class and ``Q[i]`` difficulty level of item i (**level 0 is the easiest**).
``B[k, t, c]`` is worker k's *base* confusion matrix (the only per-worker parameter), ``w[h]`` the noise
weight of level h with ``0 = w[0] <= w[1] <= ... <= w[H-1] <= 1``, ``U[k, c]`` the noise distribution
(``1 / C`` for ``noise="uniform"``, the default), and

    pi[k, h, t, c] = (1 - w[h]) * B[k, t, c] + w[h] * U[k, c]

the probability that worker k says c on a level-h item of true class t.  ``alpha`` (C,) are the class
proportions, ``beta`` (H,) the level proportions.  ``Z`` is the latent indicator of a label: ``Z = 1`` when
the label came from ``B`` (probability ``1 - w[h]``), ``Z = 0`` when it is noise.  ``s`` is the Dirichlet
pseudo-count (``smoothing``) added to every base-confusion cell, class count and level count; ``a M[t, :]``
optional extra pseudo-counts on every worker's row t (``pooled_prior``, off by default).

A level adds 2 parameters (``w[h]`` and one proportion) however many workers there are, against
``K * C * (C - 1)`` for a level of IDBLA; no level can permute classes, because every level's matrix is the
worker's own ``B`` shrunk towards noise.  ``w[0] = 0`` loses nothing: if every level were mixed,
``B' = pi[k, 0]`` with ``1 - w'[h] = (1 - w[h]) / (1 - w[0])`` describes the same distribution.  With
H = 1 the model *is* Dawid-Skene (same updates, same objective, same numbers).

EM over additive statistics
---------------------------
* ``local_step`` (executors): with ``ll[i, h, t] = sum over labels (k, c) of item i of log pi[k, h, t, c]``
  from the broadcast ``log_pi``, the joint posterior ``r[i, h, t] ∝ alpha[t] beta[h] exp(ll[i, h, t])``
  (log space).  Additive statistics: ``counts[k, h, t, c] = sum over labels (k, c) of r[item, h, t]``
  (:func:`~crowdspark.models.common.confusion_counts`), ``classes[t]``, ``levels[h]`` and the summed
  ``log p(L_i | B, w, alpha, beta)``.
* ``global_step`` (driver): the probability that a label ``(k, c)`` on a ``(h, t)`` item came from ``B`` is
  ``z[k, h, t, c] = (1 - w[h]) B[k, t, c] / pi[k, h, t, c]``, which depends on the parameters only, so
  the expected complete-data counts follow from ``counts`` on the driver:
  ``B[k, t, :] ∝ sum_h counts * z + s (+ a M[t, :])``, ``w[h] = sum_{k,t,c} counts * (1 - z) /
  sum_{k,t,c} counts`` (h >= 1), ``alpha ∝ classes + s``, ``beta ∝ levels + s``.  Levels 1..H-1 are then
  sorted by ``w`` (with ``beta``); the likelihood and the prior are invariant under that relabelling, so
  the order costs nothing and the EM guarantee is kept.

Objective: the log posterior per label, ``(log p(L | B, w, alpha, beta) + sum (s + a M) log B
+ s (sum log alpha + sum log beta)) / m_total``, for the parameters the sweep used; EM never decreases it.
The fit starts like Dawid-Skene (an M-step on the majority-vote shares gives ``B`` and ``alpha``) with
``w = linspace(0, init_noise, H)`` and uniform ``beta``.

Choosing H: :func:`choose_levels_ds` fits each candidate H with the engine and keeps the lowest BIC,
``-2 log p(L | B, w, alpha, beta) + n_params log(m_total)`` with ``n_params = K C (C - 1) + (C - 1) +
2 (H - 1)``.  Measurements and the alternatives tried: ``docs/difficulty_model.md``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.models.base import ItemResult, Model, State, Update
from crowdspark.models.common import (
    argmax_random_ties,
    confusion_counts,
    label_loglik,
    normalize_log,
    normalize_rows,
    tie_uniforms,
    vote_counts,
)
from crowdspark.stats import Stats
from crowdspark.validation import check_bool, check_choice, check_float, check_int

if TYPE_CHECKING:  # pragma: no cover
    from crowdspark.engine.base import Engine

__all__ = [
    "DifficultyDawidSkene",
    "LEVEL_CRITERIA",
    "NOISE_CHOICES",
    "LevelChoiceDS",
    "choose_levels_ds",
    "level_log_pi",
    "dds_e_step",
    "dds_m_step",
    "evidence_block",
]

log = logging.getLogger(__name__)

#: criteria of :func:`choose_levels_ds` (all: lower is better)
LEVEL_CRITERIA = ("bic", "aic", "icl")
#: noise distributions of the hard share of a label (see ``DifficultyDawidSkene.noise``)
NOISE_CHOICES = ("uniform", "worker", "labels")
#: ``uniforms`` stream of the level tie-break (stream 0 breaks ties of the class label)
STREAM_LEVEL_TIES = 1


def level_log_pi(log_B: np.ndarray, w: np.ndarray, log_noise: np.ndarray) -> np.ndarray:
    """Per-level log confusion ``log((1 - w[h]) B[k, t, c] + w[h] U[k, c])``.

    Parameters
    ----------
    log_B : ndarray, shape (K, C, C)
        Log base confusion matrices.
    w : ndarray, shape (H,)
        Level noise weights in [0, 1].
    log_noise : ndarray, shape (K, C)
        Log noise distribution ``U[k, :]`` of each worker (``log(1 / C)`` everywhere for uniform noise).

    Returns
    -------
    ndarray, shape (K, H, C, C)
    """
    wh = w[None, :, None, None]
    with np.errstate(divide="ignore"):
        return np.logaddexp(np.log1p(-wh) + log_B[:, None], np.log(wh) + log_noise[:, None, None, :])


def dds_e_step(block: Block, params: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Joint posterior over (level, true class) of each item.

    Parameters
    ----------
    block : Block
    params : dict
        ``log_pi`` (K, H, C, C), ``log_alpha`` (C,), ``log_beta`` (H,).

    Returns
    -------
    resp : ndarray, shape (n, H, C)
        ``p(Q_i = h, T_i = t | L_i)``; each item's table sums to 1.
    log_evidence : ndarray, shape (n,)
        ``log p(L_i | B, w, alpha, beta)``.
    """
    table = params["log_beta"][None, :, None] + params["log_alpha"][None, None, :]
    table = table + label_loglik(block, params["log_pi"])
    n, n_levels, n_classes = table.shape
    resp, log_evidence = normalize_log(table.reshape(n, n_levels * n_classes), axis=1)
    return resp.reshape(n, n_levels, n_classes), log_evidence


def dds_m_step(
    counts: np.ndarray,
    classes: np.ndarray,
    levels: np.ndarray,
    log_B: np.ndarray,
    w: np.ndarray,
    log_noise: np.ndarray,
    smoothing: float,
    base_prior: np.ndarray | None = None,
    learn_w: bool = True,
) -> dict[str, np.ndarray]:
    """MAP update of (B, w, alpha, beta) from the expected counts, with levels 1..H-1 sorted by ``w``.

    Parameters
    ----------
    counts : ndarray, shape (K, H, C, C)
        Expected label counts ``N[k, h, t, c]`` of the E-step.
    classes : ndarray, shape (C,)
        Expected class counts.
    levels : ndarray, shape (H,)
        Expected level counts.
    log_B : ndarray, shape (K, C, C)
        Log base matrices of the E-step (for the latent-indicator responsibilities).
    w : ndarray, shape (H,)
        Level noise weights of the E-step.
    log_noise : ndarray, shape (K, C)
        Log noise distributions (fixed).
    smoothing : float
        Pseudo-count ``s`` of every base cell, class and level.
    base_prior : ndarray, shape (C, C), optional
        Extra pseudo-counts ``a * M[t, c]`` added to every worker's base row t (see ``pooled_prior``).
    learn_w : bool
        Update ``w`` (then sort levels 1..H-1 by it), or keep the given ``w``.

    Returns
    -------
    dict with ``log_B`` (K, C, C), ``w`` (H,), ``log_alpha`` (C,), ``log_beta`` (H,), ``log_pi``
    (K, H, C, C)
    """
    log_pi = level_log_pi(log_B, w, log_noise)
    with np.errstate(divide="ignore"):
        log_from_base = np.log1p(-w)[None, :, None, None] + log_B[:, None] - log_pi
    z = np.exp(log_from_base)  # P(Z = 1 | k, h, t, c), (K, H, C, C)
    base_counts = (counts * z).sum(axis=1)
    beta = normalize_rows(levels, smoothing)
    new_w = _noise_weights(counts, z, w) if learn_w else w.copy()
    if learn_w:
        order = np.concatenate([[0], 1 + np.argsort(new_w[1:], kind="stable")])
        new_w, beta = new_w[order], beta[order]
    pseudo = smoothing if base_prior is None else smoothing + base_prior[None]
    new_log_B = np.log(normalize_rows(base_counts, pseudo))
    return {
        "log_B": new_log_B,
        "w": new_w,
        "log_alpha": np.log(normalize_rows(classes, smoothing)),
        "log_beta": np.log(beta),
        "log_pi": level_log_pi(new_log_B, new_w, log_noise),
    }


def _noise_weights(counts: np.ndarray, z: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``w[h]`` = expected share of noise labels among level-h labels (``w[0] = 0``; empty levels keep theirs).

    Parameters
    ----------
    counts, z : ndarray, shape (K, H, C, C)
        Expected label counts and ``P(Z = 1 | k, h, t, c)``.
    w : ndarray, shape (H,)

    Returns
    -------
    ndarray, shape (H,)
    """
    per_level = counts.sum(axis=(0, 2, 3))
    noise = (counts * (1.0 - z)).sum(axis=(0, 2, 3))
    with np.errstate(invalid="ignore", divide="ignore"):
        new_w = np.where(per_level > 0, noise / per_level, w)
    new_w = np.clip(new_w, 0.0, 1.0)
    new_w[0] = 0.0
    return new_w


def _block_stats(block: Block, resp: np.ndarray, n_workers: int, n_classes: int) -> Stats:
    """Additive statistics of per-item (level, class) weights ``resp`` (n, H, C)."""
    return {
        "counts": confusion_counts(block, resp, n_workers, n_classes),
        "classes": resp.sum(axis=(0, 1)),
        "levels": resp.sum(axis=(0, 2)),
    }


@dataclass(frozen=True)
class DifficultyDawidSkene(Model):
    """Dawid-Skene with H difficulty levels that mix every worker's matrix towards noise; MAP EM.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C.
    seed : int
        Seed of the tie-breaking draws of the final labels and levels.
    n_levels : int
        H >= 1; H = 1 is Dawid-Skene.  See :func:`choose_levels_ds` to choose it from the data.
    max_iter : int
        Largest number of EM iterations.
    tol : float
        Stop when the objective per label changes by less than this.
    smoothing : float
        Dirichlet pseudo-count ``s`` > 0 of the base matrices, class and level proportions.
    init_noise : float
        Initial noise weight of the hardest level in [0, 1); the initial weights are
        ``linspace(0, init_noise, H)``.
    pooled_prior : float
        ``a >= 0``: extra Dirichlet pseudo-counts ``a * M[t, :]`` on every worker's base row t, where ``M``
        is the pooled confusion of all workers against the majority-vote shares (fixed at the start, so
        EM's guarantee holds).  0 (no pooling) keeps the exact Dawid-Skene reduction at H = 1.
    noise : {"uniform", "worker", "labels"}
        What a worker answers on the noisy share of a hard item: uniform over the classes, or the worker's
        own label frequencies, or the pooled label frequencies of all workers (``"labels"``); fixed at the
        start from the majority-vote counts.
    learn_noise : bool
        Learn ``w`` (default), or keep the initial grid ``linspace(0, init_noise, H)`` and learn only how
        many items each level holds.
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    n_levels: int = 2
    max_iter: int = 200
    tol: float = 1e-6
    smoothing: float = 0.5
    init_noise: float = 0.5
    pooled_prior: float = 0.0
    noise: str = "uniform"
    learn_noise: bool = True

    name: ClassVar[str] = "dds"
    item_extras: ClassVar[dict[str, str]] = {"level": "int", "level_posterior": "array<double>"}
    worker_params: ClassVar[tuple[str, ...]] = ("log_B",)
    shared_params: ClassVar[tuple[str, ...]] = ("log_alpha", "log_beta", "w")

    def __post_init__(self) -> None:
        p = self.name
        check_int(f"{p}.n_workers", self.n_workers, minimum=1)
        check_int(f"{p}.n_classes", self.n_classes, minimum=2)
        check_int(f"{p}.seed", self.seed, minimum=0)
        check_int(f"{p}.n_levels", self.n_levels, minimum=1)
        check_int(f"{p}.max_iter", self.max_iter, minimum=1)
        check_float(f"{p}.tol", self.tol, minimum=0.0)
        check_float(f"{p}.smoothing", self.smoothing, minimum=0.0, strict_min=True)
        check_float(f"{p}.init_noise", self.init_noise, minimum=0.0, maximum=1.0, strict_max=True)
        check_float(f"{p}.pooled_prior", self.pooled_prior, minimum=0.0)
        check_choice(f"{p}.noise", self.noise, NOISE_CHOICES)
        check_bool(f"{p}.learn_noise", self.learn_noise)

    @property
    def max_sweeps(self) -> int:  # type: ignore[override]
        return self.max_iter

    def n_free_parameters(self) -> int:
        """Free parameters: ``K C (C - 1)`` base cells, ``C - 1`` class proportions, ``H - 1`` level
        proportions and (when learned) ``H - 1`` noise weights."""
        k, c, h = self.n_workers, self.n_classes, self.n_levels
        per_level = 2 if self.learn_noise else 1
        return k * c * (c - 1) + (c - 1) + per_level * (h - 1)

    # ---- initialization ------------------------------------------------------------------------------
    def init_block(self, block: Block) -> tuple[State, Stats]:
        votes = vote_counts(block, self.n_classes)
        shares = votes / votes.sum(axis=1, keepdims=True)
        return None, {
            "confusion": confusion_counts(block, shares, self.n_workers, self.n_classes),
            "classes": shares.sum(axis=0),
        }

    def init_params(self, stats: Stats) -> dict[str, Any]:
        s = self.smoothing
        log_B = np.log(normalize_rows(stats["confusion"], s))
        w = np.linspace(0.0, self.init_noise, self.n_levels) if self.n_levels > 1 else np.zeros(1)
        log_noise = self.initial_noise(stats["confusion"])
        return {
            "log_B": log_B,
            "w": w,
            "log_alpha": np.log(normalize_rows(stats["classes"], s)),
            "log_beta": np.full(self.n_levels, -math.log(self.n_levels)),
            "log_noise": log_noise,
            "log_pi": level_log_pi(log_B, w, log_noise),
            "base_prior": self.pooled_prior * normalize_rows(stats["confusion"].sum(axis=0), s),
            "n_labels": float(stats["confusion"].sum()),
            "objective": float("nan"),
        }

    def initial_noise(self, confusion: np.ndarray) -> np.ndarray:
        """Log noise distribution of each worker, shape (K, C), from the initial counts (K, C, C)."""
        k, c = self.n_workers, self.n_classes
        if self.noise == "uniform":
            return np.full((k, c), -math.log(c))
        if self.noise == "labels":
            return np.broadcast_to(np.log(normalize_rows(confusion.sum(axis=(0, 1)), self.smoothing)), (k, c)).copy()
        return np.log(normalize_rows(confusion.sum(axis=1), self.smoothing))

    # ---- EM ------------------------------------------------------------------------------------------
    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        resp, log_evidence = dds_e_step(block, params)
        stats = _block_stats(block, resp, self.n_workers, self.n_classes)
        stats["log_evidence"] = np.array(log_evidence.sum())
        return None, stats

    def log_prior(self, params: dict[str, Any]) -> float:
        """``sum (s + a M) log B + s * (sum log alpha + sum log beta)``: the Dirichlet log densities whose
        mode the M-step finds, up to constants."""
        s = self.smoothing
        base = float(((s + params["base_prior"][None]) * params["log_B"]).sum())
        return base + s * float(params["log_alpha"].sum() + params["log_beta"].sum())

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        objective = float((stats["log_evidence"] + self.log_prior(params)) / params["n_labels"])
        previous = params["objective"]
        change = abs(objective - previous) if np.isfinite(previous) else float("inf")
        new = dds_m_step(
            stats["counts"],
            stats["classes"],
            stats["levels"],
            params["log_B"],
            params["w"],
            params["log_noise"],
            self.smoothing,
            params["base_prior"],
            learn_w=self.learn_noise,
        )
        new["log_noise"] = params["log_noise"]
        new["base_prior"] = params["base_prior"]
        new["n_labels"] = params["n_labels"]
        new["objective"] = objective
        extra = {f"w{h}": float(v) for h, v in enumerate(new["w"][1:], start=1)}
        return Update(params=new, objective=objective, change=change, extra=extra)

    # ---- outputs -------------------------------------------------------------------------------------
    def item_posteriors(self, block: Block, params: Any) -> tuple[np.ndarray, np.ndarray]:
        """Class posterior (n, C) and level posterior (n, H) of each item."""
        resp, _ = dds_e_step(block, params)
        return resp.sum(axis=1), resp.sum(axis=2)

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        posterior, level_posterior = self.item_posteriors(block, params)
        label = argmax_random_ties(posterior, tie_uniforms(block, self.seed))
        level = argmax_random_ties(level_posterior, tie_uniforms(block, self.seed, 0, STREAM_LEVEL_TIES))
        return ItemResult(
            posterior=posterior, label=label, extra={"level": level, "level_posterior": level_posterior}
        )

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        base = np.exp(params["log_B"])
        level_pi = np.exp(params["log_pi"])
        alpha = np.exp(params["log_alpha"])
        return {
            "n_labels": init_stats["confusion"].sum(axis=(1, 2)).round().astype(np.int64),
            "confusion": base,
            "accuracy": np.einsum("t,ktt->k", alpha, base),
            "level_confusion": level_pi,
            "level_accuracy": np.einsum("t,khtt->kh", alpha, level_pi),
        }

    def export_params(self, params: Any) -> dict[str, np.ndarray]:
        return {key: params[key] for key in self.worker_params + self.shared_params}

    def warm_start(self, params: Any, previous: dict[str, np.ndarray], old_index: np.ndarray) -> Any:
        """Known workers' base matrices and the class/level values of a previous run (same C and H); the
        noise distributions and the prior stay this run's, ``log_pi`` is rebuilt."""
        new = super().warm_start(params, previous, old_index)
        new["log_pi"] = level_log_pi(new["log_B"], new["w"], new["log_noise"])
        return new

    def summary(self, params: Any) -> dict[str, Any]:
        return {
            "level_noise": params["w"].tolist(),
            "level_proportions": np.exp(params["log_beta"]).tolist(),
            "class_proportions": np.exp(params["log_alpha"]).tolist(),
        }


# ---- choosing H --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LevelChoiceDS:
    """Result of :func:`choose_levels_ds`.

    Attributes
    ----------
    table : list of dict
        One row per H: ``n_levels``, ``log_evidence``, ``n_params``, ``bic``, ``aic``, ``level_entropy``,
        ``joint_entropy``, ``icl``, ``level_noise``, ``level_proportions``, ``n_iter``, ``converged``.
    chosen : int
        The H with the lowest criterion.
    criterion : str
    """

    table: list[dict[str, Any]]
    chosen: int
    criterion: str


def evidence_block(model: DifficultyDawidSkene, block: Block, state: State, params: Any) -> tuple[State, Stats]:
    """Block function, at ``params`` (use with ``stateful=False``): ``log_evidence`` = ``sum_i log p(L_i | B,
    w, alpha, beta)``; ``level_entropy`` = ``-sum_i sum_h r_ih log r_ih`` of the items' level posteriors;
    ``joint_entropy`` the same for their joint (level, class) posteriors."""
    resp, log_evidence = dds_e_step(block, params)
    levels = resp.sum(axis=2)  # (n, H)
    entropy = -float(np.sum(levels * np.log(np.maximum(levels, 1e-300))))
    joint = -float(np.sum(resp * np.log(np.maximum(resp, 1e-300))))
    return state, {"log_evidence": np.array(float(log_evidence.sum())), "level_entropy": np.array(entropy),
                   "joint_entropy": np.array(joint)}


def _level_row(model: DifficultyDawidSkene, engine: Engine) -> dict[str, Any]:
    # the fit loop lives one floor up (crowdspark.engine); imported here so the kernels never depend on it
    from crowdspark.engine.loop import fit

    result = fit(model, engine)
    stats = engine.map_reduce(partial(evidence_block, model), result.params, stateful=False)
    log_evidence = float(stats["log_evidence"])
    n_params = model.n_free_parameters()
    n_labels = float(result.counts["n_labels"])
    summary = model.summary(result.params)
    bic = -2.0 * log_evidence + n_params * math.log(max(n_labels, 1.0))
    return {
        "n_levels": model.n_levels,
        "log_evidence": log_evidence,
        "n_params": n_params,
        "bic": bic,
        "aic": -2.0 * log_evidence + 2.0 * n_params,
        "level_entropy": float(stats["level_entropy"]),
        "joint_entropy": float(stats["joint_entropy"]),
        "icl": bic + 2.0 * float(stats["level_entropy"]),
        "level_noise": summary["level_noise"],
        "level_proportions": summary["level_proportions"],
        "n_iter": result.n_iter,
        "converged": result.converged,
    }


def choose_levels_ds(
    make: Callable[[int], DifficultyDawidSkene],
    engine: Engine,
    levels: Iterable[int] = (1, 2, 3),
    criterion: str = "bic",
) -> LevelChoiceDS:
    """Fit ``make(h)`` for each ``h`` in ``levels`` and keep the H with the lowest ``criterion``.

    Parameters
    ----------
    make : callable
        ``make(h)`` returns a :class:`DifficultyDawidSkene` with ``n_levels = h``.
    engine : Engine
        Holds the blocks; only :func:`~crowdspark.engine.loop.fit` and ``engine.map_reduce`` are used, so
        the local and the Spark engine give the same choice.
    levels : iterable of int
        Candidate H values (each >= 1).
    criterion : {"bic", "aic", "icl"}
        ``-2 log p(L | B, w, alpha, beta) + n_params * log(m)`` (BIC), ``+ 2 n_params`` (AIC), or BIC plus
        twice the entropy of the items' level posteriors (ICL, the integrated completed likelihood of
        Biernacki, Celeux & Govaert 2000: it also charges levels that do not separate the items clearly).

    Returns
    -------
    LevelChoiceDS
    """
    check_choice("criterion", criterion, list(LEVEL_CRITERIA))
    candidates = [check_int("levels", h, minimum=1) for h in levels]
    if not candidates:
        raise ValueError("levels must not be empty")
    table = []
    for h in candidates:
        row = _level_row(make(h), engine)
        log.info("dds H=%d: log evidence %.1f, bic %.1f, w %s", h, row["log_evidence"], row["bic"], row["level_noise"])
        table.append(row)
    best = int(np.argmin([row[criterion] for row in table]))
    return LevelChoiceDS(table=table, chosen=int(table[best]["n_levels"]), criterion=criterion)
