"""Difficulty-aware Dawid-Skene ("dds"): item difficulty makes every worker less reliable, each worker keeps
one confusion matrix.

Notation
--------
K workers, C classes, H difficulty levels; ``n`` items and ``m`` labels in a block, ``m_total`` labels in all.
``T[i]`` true class and ``Q[i]`` difficulty level of item i (**level 0 is the easiest**).
``B[k, t, c]`` is worker k's *base* confusion matrix (the only per-worker parameter).  A level h has a noise
weight ``w[h]`` in [0, 1] and class penalties ``d[h, t] >= 0``, with ``w[0] = 0`` and ``d[0] = 0``.
``U[k, c]`` is the noise distribution (``1 / C`` for ``noise="uniform"``, the default).  On a level-h item
of true class t, worker k says c with probability

    S[k, h, t, :] = softmax(log B[k, t, :] - d[h, t] e_t)      (the correct answer's odds times e^-d)
    pi[k, h, t, c] = (1 - w[h]) * S[k, h, t, c] + w[h] * U[k, c]

``alpha`` (C,) are the class proportions, ``beta`` (H,) the level proportions.  ``Z`` is the latent
indicator of a label: ``Z = 1`` when it came from ``S`` (probability ``1 - w[h]``), ``Z = 0`` when it is
noise.  ``s`` is the Dirichlet pseudo-count (``smoothing``) of every base-confusion cell, class count and
level count; ``a M[t, :]`` optional extra pseudo-counts on every worker's row t (``pooled_prior``, off by
default); ``lambda`` (``penalty_prior``) the precision of a ``N(0, 1 / lambda)`` prior on every ``d[h, t]``.

A level adds ``C + 2`` parameters (``d[h, :]``, ``w[h]``, one proportion) however many workers there are,
against ``K * C * (C - 1)`` for a level of IDBLA.  No level can permute classes: every level's matrix is
the worker's own ``B`` with the correct answer made less likely (a penalty) and mixed towards noise, so
each worker's probability of the correct answer is never higher than on level 0 (when ``B[k, t, t] >=
U[k, t]``).  The two mechanisms differ in where a hard item's wrong answers go: noise spreads them evenly
(or as ``U``), a penalty sends them where the worker's own confusions already point (on Bluebird, hard
birds of one species are taken for the other by every worker).  With H = 1 the model *is* Dawid-Skene
(same updates, same objective, same numbers).

EM over additive statistics
---------------------------
* ``local_step`` (executors): with ``ll[i, h, t] = sum over labels (k, c) of item i of log pi[k, h, t, c]``
  from the broadcast ``log_pi``, the joint posterior ``r[i, h, t] ∝ alpha[t] beta[h] exp(ll[i, h, t])``
  (log space).  Additive statistics: ``counts[k, h, t, c] = sum over labels (k, c) of r[item, h, t]``
  (:func:`~crowdspark.models.common.confusion_counts`), ``classes[t]``, ``levels[h]`` and the summed
  ``log p(L_i | B, w, d, alpha, beta)``.
* ``global_step`` (driver): ``z[k, h, t, c] = (1 - w[h]) S[k, h, t, c] / pi[k, h, t, c]`` (the probability
  that a label came from ``S``) depends on the parameters only, so the expected complete-data counts follow
  from ``counts`` on the driver.  ``w[h] = sum counts * (1 - z) / sum counts`` (h >= 1), ``alpha ∝
  classes + s``, ``beta ∝ levels + s``.  Without penalties ``B[k, t, :] ∝ sum_h counts * z + s (+ a M)``;
  with them, ``B`` and ``d`` are updated by two rounds of exact coordinate maximization, each a set of
  concave one-variable problems (``_base_update``, ``_penalty_update``), so EM's guarantee holds.  Levels
  1..H-1 are then sorted by difficulty (the likelihood and the prior are invariant under that relabelling).

Objective: the log posterior per label, ``(log p(L | B, w, d, alpha, beta) + sum (s + a M) log B + s (sum
log alpha + sum log beta) - lambda / 2 sum d^2) / m_total``, for the parameters the sweep used; EM never
decreases it within a stage.  The fit starts like Dawid-Skene (an M-step on the majority-vote shares gives
``B`` and ``alpha``), ``w = linspace(0, init_noise, H)``, ``d[1:] = init_penalty`` and uniform ``beta``.
With ``start_from_ds`` (off by default) it runs Dawid-Skene's EM first (every level equal, ``w = d = 0``:
stage 0) and opens the levels once that has converged (stage 1).

Choosing H (:mod:`crowdspark.engine.select`): each candidate H among ``auto_levels`` is fitted with the
engine and the lowest BIC is kept, ``-2 log p(L | B, w, d, alpha, beta) + n_params log(m_total)`` with
``n_params = K C (C - 1) + (C - 1) + (C + 2) (H - 1)``.  Measurements and the alternatives tried:
``docs/difficulty_model.md``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from crowdspark.block import Block
from crowdspark.models.base import Footprint, ItemResult, LevelModel, Schedule, State, Update
from crowdspark.models.common import (
    argmax_random_ties,
    confusion_counts,
    fix_scores,
    label_loglik,
    normalize_log,
    normalize_rows,
    tie_uniforms,
    vote_counts,
)
from crowdspark.stats import Stats
from crowdspark.validation import check_bool, check_choice, check_float, check_int

__all__ = ["DifficultyDawidSkene", "NOISE_CHOICES", "level_log_pi", "dds_e_step", "dds_m_step"]

log = logging.getLogger(__name__)

#: noise distributions of the hard share of a label (see ``DifficultyDawidSkene.noise``)
NOISE_CHOICES = ("uniform", "worker", "labels")
#: ``uniforms`` stream of the level tie-break (stream 0 breaks ties of the class label)
STREAM_LEVEL_TIES = 1


def penalized_log_B(log_B: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Per-level base matrices with the correct answer penalized, ``log softmax(log B[k, t, :] - d[h, t] e_t)``.

    Parameters
    ----------
    log_B : ndarray, shape (K, C, C)
        Log base confusion matrices.
    d : ndarray, shape (H, C)
        Penalties ``d[h, t] >= 0`` on the log-odds of the correct answer (``d[0] = 0``).

    Returns
    -------
    ndarray, shape (K, H, C, C)
        ``log S[k, h, t, c]``: ``S[k, h, t, t] = B[k, t, t] e^-d / (1 - a B[k, t, t])`` and
        ``S[k, h, t, c] = B[k, t, c] / (1 - a B[k, t, t])`` for ``c != t``, with ``a = 1 - e^-d[h, t]``.
    """
    n_classes = log_B.shape[-1]
    a = -np.expm1(-d)  # (H, C)
    diagonal = np.exp(np.diagonal(log_B, axis1=1, axis2=2))  # (K, C)
    out = log_B[:, None] - np.log1p(-a[None] * diagonal[:, None, :])[..., None]
    idx = np.arange(n_classes)
    out[:, :, idx, idx] -= d[None]
    return out


def level_log_pi(
    log_B: np.ndarray, w: np.ndarray, log_noise: np.ndarray, d: np.ndarray | None = None
) -> np.ndarray:
    """Per-level log confusion ``log((1 - w[h]) S[k, h, t, c] + w[h] U[k, c])``, ``S`` the penalized base.

    Parameters
    ----------
    log_B : ndarray, shape (K, C, C)
        Log base confusion matrices.
    w : ndarray, shape (H,)
        Level noise weights in [0, 1].
    log_noise : ndarray, shape (K, C)
        Log noise distribution ``U[k, :]`` of each worker (``log(1 / C)`` everywhere for uniform noise).
    d : ndarray, shape (H, C), optional
        Class penalties (:func:`penalized_log_B`); ``None`` or zeros: ``S = B`` on every level.

    Returns
    -------
    ndarray, shape (K, H, C, C)
    """
    return _mix_noise(_level_base(log_B, d), w, log_noise)


def _level_base(log_B: np.ndarray, d: np.ndarray | None) -> np.ndarray:
    """``log S`` (K, H, C, C) of :func:`penalized_log_B`, or ``log B`` broadcast (K, 1, C, C) without
    penalties."""
    return log_B[:, None] if d is None or not np.any(d) else penalized_log_B(log_B, d)


def _mix_noise(base: np.ndarray, w: np.ndarray, log_noise: np.ndarray) -> np.ndarray:
    """``log((1 - w[h]) exp(base) + w[h] U[k, c])``, shape (K, H, C, C), from ``base`` of :func:`_level_base`."""
    wh = w[None, :, None, None]
    with np.errstate(divide="ignore"):
        return np.logaddexp(np.log1p(-wh) + base, np.log(wh) + log_noise[:, None, None, :])


#: most halvings of one Newton step of :func:`maximize_concave_1d`
MAX_HALVINGS = 59
#: each call of :func:`maximize_concave_1d`'s halving loop tries this many times more halvings than the last
#: (1, 4, 16, ...): a few calls instead of one per halving, the same steps
HALVING_GROWTH = 4


def maximize_concave_1d(
    x: np.ndarray, fun: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]],
    lower: float = -np.inf, steps: int = 50, tol: float = 1e-10,
) -> np.ndarray:
    """Elementwise maximum of concave functions of one variable by projected Newton steps with halving.

    Parameters
    ----------
    x : ndarray, shape (E,)
        Starting points (``>= lower``).
    fun : callable
        ``fun(values, index) -> (f, f', f'')`` of the elements ``index`` (int array) at ``values`` (both of
        the same length), ``f'' <= 0``.  Only elements still moving are evaluated.
    lower : float
        Lower bound of every variable.
    steps, tol : int, float
        At most ``steps`` Newton steps; an element stops when its step is shorter than ``tol`` or does not
        raise its ``f`` even when halved below ``tol`` (rounding at the optimum).

    Returns
    -------
    ndarray, shape (E,)
        No element's ``f`` is lower than at its start.
    """
    x = np.array(x, dtype=np.float64)
    index = np.arange(x.size)
    f, g, h = fun(x, index)
    for _ in range(steps):
        if index.size == 0:
            break
        start = x[index]
        direction = np.maximum(start - g / np.minimum(h, -1e-300), lower) - start
        size = np.ones_like(start)
        fc, gc, hc = fun(start + direction, index)
        small = np.abs(direction) < tol
        better = (fc >= f) & ~small
        pending = np.flatnonzero(~(better | small))
        done, batch = 0, 1
        while pending.size and done < MAX_HALVINGS:
            # the steps that neither raise f nor are short, halved up to ``count`` more times in one call; each
            # keeps the first halving that raises f or is short, as if halved one at a time
            count = min(batch, MAX_HALVINGS - done)
            sizes = 0.5 ** np.arange(done + 1, done + count + 1)
            step = sizes[:, None] * direction[pending]  # (count, P)
            values = fun((start[pending] + step).ravel(), np.tile(index[pending], count))
            fp, gp, hp = (v.reshape(count, -1) for v in values)
            short = np.abs(step) < tol
            raised = (fp >= f[pending]) & ~short
            stop = raised | short
            first = np.where(stop.any(axis=0), stop.argmax(axis=0), count - 1)
            pick = (first, np.arange(pending.size))
            size[pending], small[pending], better[pending] = sizes[first], short[pick], raised[pick]
            fc[pending], gc[pending], hc[pending] = fp[pick], gp[pick], hp[pick]
            pending = pending[~stop[pick]]
            done, batch = done + count, HALVING_GROWTH * batch
        x[index] = np.where(better, start + size * direction, start)
        index, f, g, h = index[better], fc[better], gc[better], hc[better]
    return x


def _base_update(pseudo_counts: np.ndarray, level_totals: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Log base matrices maximizing ``sum_h N_h . log S_h + sum (pseudo) log B`` row by row.

    With ``M[k, t, :]`` the expected base counts summed over levels plus the pseudo-counts, every row's
    optimum has ``B[k, t, c] ∝ M[k, t, c]`` off the diagonal, and ``u = B[k, t, t]`` maximizes the concave
    (in ``v = logit u``) ``M_t log u + R log(1 - u) - sum_h n_h log(1 - a_h u)``, ``R`` the off-diagonal
    total, ``n_h`` the row's level-h count and ``a_h = 1 - e^-d[h, t]``; with ``d = 0`` it is ``M / M.sum()``.

    Parameters
    ----------
    pseudo_counts : ndarray, shape (K, C, C)
        ``M``: summed expected base counts plus pseudo-counts (all > 0).
    level_totals : ndarray, shape (K, H, C)
        ``n_h``: each row's expected base counts on level h.
    d : ndarray, shape (H, C)

    Returns
    -------
    ndarray, shape (K, C, C)
    """
    n_workers, n_classes = pseudo_counts.shape[:2]
    diag = np.diagonal(pseudo_counts, axis1=1, axis2=2)  # (K, C)
    rest = pseudo_counts.sum(axis=-1) - diag
    # one row (k, t) per element: its diagonal and off-diagonal totals, and per level n_h, a_h and n_h a_h
    m_t, r = diag.ravel(), rest.ravel()
    levels = _penalized_levels(level_totals, d)

    def fun(v: np.ndarray, i: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        u = 1.0 / (1.0 + np.exp(-v))
        q = u * (1.0 - u)
        mi, ri = m_t[i], r[i]
        f = -mi * np.logaddexp(0.0, -v) - ri * np.logaddexp(0.0, v)
        g = mi * (1.0 - u) - ri * u
        h = -(mi + ri) * q
        if levels:
            curve = 1.0 - 2.0 * u
            sums = [0.0, 0.0, 0.0]
            for n_h, a_h, na_h in levels:
                nh, ah, nah = n_h[i], a_h[i], na_h[i]
                shrink = 1.0 - ah * u
                sums[0] = sums[0] + nh * np.log(shrink)
                sums[1] = sums[1] + nah * q / shrink
                sums[2] = sums[2] + nah * (curve + ah * u**2) * q / shrink**2
            f, g, h = f - sums[0], g + sums[1], h + sums[2]
        return f, g, h

    v = maximize_concave_1d(np.log(m_t) - np.log(r), fun).reshape(n_workers, n_classes)
    u = 1.0 / (1.0 + np.exp(-v))
    with np.errstate(divide="ignore"):
        log_B = np.log(pseudo_counts) + (np.log1p(-u) - np.log(rest))[..., None]
    idx = np.arange(n_classes)
    log_B[:, idx, idx] = -np.logaddexp(0.0, -v)
    return log_B


def _penalized_levels(level_totals: np.ndarray, d: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(n_h, a_h, n_h a_h)`` per element ``k C + t``, shape (K C,) each, of every level h with a penalty
    (``a_h = 1 - e^-d[h, t]``, not all 0).

    A level without one (level 0) adds exact zeros to every sum over levels of :func:`_base_update`, so it is
    left out: the sums over the others, added in level order, are the same numbers.

    Parameters
    ----------
    level_totals : ndarray, shape (K, H, C)
    d : ndarray, shape (H, C)
    """
    n_workers = level_totals.shape[0]
    out = []
    for h, a_row in enumerate(-np.expm1(-d)):
        if np.any(a_row != 0.0):
            n_h, a_h = np.ascontiguousarray(level_totals[:, h].ravel()), np.tile(a_row, n_workers)
            out.append((n_h, a_h, n_h * a_h))
    return out


def _penalty_update(
    base_counts: np.ndarray, log_B: np.ndarray, d: np.ndarray, prior: float
) -> np.ndarray:
    """Penalties ``d[h, t] >= 0`` (h >= 1) maximizing ``sum_k N_h . log S_h - prior / 2 d^2`` for fixed ``B``.

    Each ``d[h, t]`` is a concave problem of its own: ``-D d - sum_k n_k log(1 - (1 - e^-d) B[k, t, t])
    - prior d^2 / 2``, with ``D`` the level's expected correct answers of class t and ``n_k`` worker k's
    level-h count on row t.

    Parameters
    ----------
    base_counts : ndarray, shape (K, H, C, C)
    log_B : ndarray, shape (K, C, C)
    d : ndarray, shape (H, C)
    prior : float

    Returns
    -------
    ndarray, shape (H, C); ``d[0] = 0``
    """
    n_levels, n_classes = d.shape
    # one (level h >= 1, class t) per element, with its workers along the second axis
    b = np.tile(np.exp(np.diagonal(log_B, axis1=1, axis2=2)).T, (n_levels - 1, 1))  # (E, K)
    correct = np.diagonal(base_counts, axis1=2, axis2=3).sum(axis=0)[1:].ravel()  # (E,)
    n = base_counts.sum(axis=-1)[:, 1:].reshape(base_counts.shape[0], -1).T  # (E, K)

    def fun(x: np.ndarray, i: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        bi, ni = b[i], n[i]
        e = np.exp(-x)[:, None]
        denom = 1.0 - bi + bi * e
        p = bi * e / denom
        f = -correct[i] * x - (ni * np.log(denom)).sum(axis=1) - 0.5 * prior * x**2
        g = -correct[i] + (ni * p).sum(axis=1) - prior * x
        h = -(ni * p * (1.0 - p)).sum(axis=1) - prior
        return f, g, h

    new = np.zeros_like(d)
    new[1:] = maximize_concave_1d(d[1:].ravel(), fun, lower=0.0).reshape(n_levels - 1, n_classes)
    return new


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
        ``p(Q_i = h, T_i = t | L_i)``; each item's table sums to 1 (and is 0 off its gold class for an item
        with gold in the fit, :func:`~crowdspark.models.common.fix_scores`).
    log_evidence : ndarray, shape (n,)
        ``log p(L_i | B, w, alpha, beta)`` (``log p(L_i, T_i | ...)`` with gold in the fit).
    """
    table = params["log_beta"][None, :, None] + params["log_alpha"][None, None, :]
    table = fix_scores(block, table + label_loglik(block, params["log_pi"]))
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
    d: np.ndarray | None = None,
    penalty_prior: float | None = None,
) -> dict[str, np.ndarray]:
    """MAP update of (B, w, d, alpha, beta) from the expected counts, levels 1..H-1 sorted by difficulty.

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
        Extra pseudo-counts ``a * M[t, :]`` added to every worker's base row t (see ``pooled_prior``).
    learn_w : bool
        Update ``w``, or keep the given ``w``.
    d : ndarray, shape (H, C), optional
        Class penalties of the E-step; ``None`` = no penalties (the closed-form update of ``B``).
    penalty_prior : float, optional
        Precision of the Gaussian prior on ``d``; ``None`` keeps ``d`` fixed.  When given (and H > 1),
        ``B`` and ``d`` are updated by two rounds of exact coordinate maximization (a generalized M-step:
        the objective still never decreases).

    Returns
    -------
    dict with ``log_B`` (K, C, C), ``w`` (H,), ``d`` (H, C), ``log_alpha`` (C,), ``log_beta`` (H,),
    ``log_pi`` (K, H, C, C)
    """
    n_levels, n_classes = counts.shape[1], counts.shape[-1]
    d = np.zeros((n_levels, n_classes)) if d is None else d
    base = _level_base(log_B, d)
    log_pi = _mix_noise(base, w, log_noise)
    with np.errstate(divide="ignore"):
        log_from_base = np.log1p(-w)[None, :, None, None] + base - log_pi
    z = np.exp(log_from_base)  # P(Z = 1 | k, h, t, c), (K, H, C, C)
    base_counts = counts * z
    beta = normalize_rows(levels, smoothing)
    new_w = _noise_weights(counts, z, w) if learn_w else w.copy()
    pseudo = smoothing if base_prior is None else smoothing + base_prior[None]
    if penalty_prior is None or n_levels == 1:
        new_log_B = np.log(normalize_rows(base_counts.sum(axis=1), pseudo))
        new_d = d.copy()
    else:
        rows = base_counts.sum(axis=1) + pseudo
        totals = base_counts.sum(axis=-1)
        new_d, new_log_B = d, log_B
        for _ in range(2):
            new_log_B = _base_update(rows, totals, new_d)
            new_d = _penalty_update(base_counts, new_log_B, new_d, penalty_prior)
    new_log_pi = level_log_pi(new_log_B, new_w, log_noise, new_d)
    order = _level_order(new_log_pi, new_w, by_accuracy=penalty_prior is not None)
    return {
        "log_B": new_log_B,
        "w": new_w[order],
        "d": new_d[order],
        "log_alpha": np.log(normalize_rows(classes, smoothing)),
        "log_beta": np.log(beta[order]),
        "log_pi": new_log_pi[:, order],
    }


def _level_order(log_pi: np.ndarray, w: np.ndarray, by_accuracy: bool) -> np.ndarray:
    """Order of the levels: 0 first, then 1..H-1 by increasing ``w`` or, with penalties, by decreasing mean
    probability of the correct answer (over workers and classes) in ``log_pi`` (K, H, C, C).  The
    likelihood and the prior are invariant under relabelling levels 1..H-1, so the order costs nothing and
    EM's guarantee holds."""
    if len(w) <= 2:
        return np.arange(len(w))
    if not by_accuracy:
        return np.concatenate([[0], 1 + np.argsort(w[1:], kind="stable")])
    accuracy = np.exp(np.diagonal(log_pi, axis1=2, axis2=3)).mean(axis=(0, 2))  # (H,)
    return np.concatenate([[0], 1 + np.argsort(-accuracy[1:], kind="stable")])


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
class DifficultyDawidSkene(LevelModel):
    """Dawid-Skene with H difficulty levels that make every worker less reliable; MAP EM.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C.
    seed : int
        Seed of the tie-breaking draws of the final labels and levels.
    n_levels : int
        H >= 1; H = 1 is Dawid-Skene.  :mod:`crowdspark.engine.select` chooses it from the data.
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
    learn_penalty : bool
        Learn the class penalties ``d[h, t] >= 0`` of levels h >= 1 (default); ``False`` keeps ``d = 0``
        (noise only, with closed-form updates).
    penalty_prior : float
        ``lambda > 0``: precision of the Gaussian prior ``N(0, 1 / lambda)`` on every ``d[h, t]``.
    init_penalty : float
        Initial ``d[h, t]`` of levels h >= 1, >= 0.
    start_from_ds : bool
        With H >= 2, first run Dawid-Skene's EM to convergence (all levels equal, ``w = d = 0``), then open
        the levels (``w = linspace(0, init_noise, H)``, ``d[1:] = init_penalty``) and continue.  Off by
        default: the levels open at the start, as measured best (``docs/difficulty_model.md``: the same
        answers on every bundled set, and less sensitive to ``init_noise`` / ``init_penalty`` on planted
        data).
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    n_levels: int = 2
    max_iter: int = 300
    tol: float = 1e-6
    smoothing: float = 0.5
    init_noise: float = 0.5
    pooled_prior: float = 0.0
    noise: str = "uniform"
    learn_noise: bool = True
    learn_penalty: bool = True
    penalty_prior: float = 1.0
    init_penalty: float = 1.0
    start_from_ds: bool = False

    name: ClassVar[str] = "dds"
    title: ClassVar[str] = "difficulty Dawid-Skene"
    api_name: ClassVar[str] = "DifficultyDawidSkene"
    description: ClassVar[str] = (
        "Dawid-Skene whose harder item levels make every worker less reliable; MAP EM; H = 1 is Dawid-Skene"
    )
    auto_levels: ClassVar[tuple[int, ...]] = (1, 2)
    default_level_criterion: ClassVar[str] = "bic"
    item_extras: ClassVar[dict[str, str]] = {"level": "int", "level_posterior": "array<double>"}
    worker_params: ClassVar[tuple[str, ...]] = ("log_B",)
    shared_params: ClassVar[tuple[str, ...]] = ("log_alpha", "log_beta", "w", "d")
    param_domains: ClassVar[dict[str, tuple[str, str]]] = {
        "log_B": ("log_simplex", "KCC"), "log_alpha": ("log_simplex", "C"), "log_beta": ("log_simplex", "*"),
        "w": ("real", "*"), "d": ("real", "**"), "log_pi": ("log_simplex", "K*CC")}
    carried_stats: ClassVar[tuple[str, ...]] = ("counts", "classes", "levels")

    def __post_init__(self) -> None:
        super().__post_init__()
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
        check_bool(f"{p}.learn_penalty", self.learn_penalty)
        check_float(f"{p}.penalty_prior", self.penalty_prior, minimum=0.0, strict_min=True)
        check_float(f"{p}.init_penalty", self.init_penalty, minimum=0.0)
        check_bool(f"{p}.start_from_ds", self.start_from_ds)

    @property
    def schedule(self) -> Schedule:
        return Schedule(max_sweeps=self.max_iter, tol=self.tol)

    def n_free_parameters(self) -> int:
        """Free parameters: ``K C (C - 1)`` base cells, ``C - 1`` class proportions and, per level h >= 1,
        one proportion, (when learned) one noise weight and C class penalties."""
        k, c, h = self.n_workers, self.n_classes, self.n_levels
        per_level = 1 + int(self.learn_noise) + (c if self.learn_penalty else 0)
        return k * c * (c - 1) + (c - 1) + per_level * (h - 1)

    # ---- initialization ------------------------------------------------------------------------------
    def init_block(self, block: Block) -> tuple[State, Stats]:
        votes = vote_counts(block, self.n_classes)
        shares = fix_scores(block, votes / votes.sum(axis=1, keepdims=True), log=False)
        return None, {
            "confusion": confusion_counts(block, shares, self.n_workers, self.n_classes),
            "classes": shares.sum(axis=0),
        }

    def footprint(self) -> Footprint:
        """The base matrices (K, C, C), the level matrices and the counts (K, H, C, C) each, and the scores
        over (level, class) of a block's items (n, H C)."""
        k, h, c = self.n_workers, self.n_levels, self.n_classes
        return Footprint(params=k * c * c * (1 + 2 * h) + h * c, item=h * c,
                         largest=(("workers", k), ("levels", h), ("classes", c), ("classes", c)))

    def init_params(self, stats: Stats) -> dict[str, Any]:
        s = self.smoothing
        log_B = np.log(normalize_rows(stats["confusion"], s))
        warm_up = self.n_levels > 1 and self.start_from_ds
        w, d = (np.zeros(self.n_levels), np.zeros((self.n_levels, self.n_classes))) if warm_up else self.open_levels()
        log_noise = self.initial_noise(stats["confusion"])
        return {
            "log_B": log_B,
            "w": w,
            "d": d,
            "stage": 0 if warm_up else 1,
            "log_alpha": np.log(normalize_rows(stats["classes"], s)),
            "log_beta": np.full(self.n_levels, -math.log(self.n_levels)),
            "log_noise": log_noise,
            "log_pi": level_log_pi(log_B, w, log_noise, d),
            "base_prior": self.pooled_prior * normalize_rows(stats["confusion"].sum(axis=0), s),
            "n_labels": float(stats["confusion"].sum()),
        }

    def open_levels(self) -> tuple[np.ndarray, np.ndarray]:
        """Initial ``w`` (H,) and ``d`` (H, C) of the levels: ``linspace(0, init_noise, H)`` and
        ``init_penalty`` on levels h >= 1 (0 without ``learn_penalty``)."""
        w = np.linspace(0.0, self.init_noise, self.n_levels) if self.n_levels > 1 else np.zeros(1)
        d = np.zeros((self.n_levels, self.n_classes))
        if self.learn_penalty:
            d[1:] = self.init_penalty
        return w, d

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
        """``sum (s + a M) log B + s * (sum log alpha + sum log beta) - lambda / 2 sum d^2``: the Dirichlet
        and Gaussian log densities whose mode the M-step finds, up to constants."""
        s = self.smoothing
        base = float(((s + params["base_prior"][None]) * params["log_B"]).sum())
        penalty = 0.5 * self.penalty_prior * float((params["d"] ** 2).sum())
        return base + s * float(params["log_alpha"].sum() + params["log_beta"].sum()) - penalty

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        objective = float((stats["log_evidence"] + self.log_prior(params)) / params["n_labels"])
        stage = params["stage"]
        new = dds_m_step(
            stats["counts"],
            stats["classes"],
            stats["levels"],
            params["log_B"],
            params["w"],
            params["log_noise"],
            self.smoothing,
            params["base_prior"],
            learn_w=self.learn_noise and stage == 1,
            d=params["d"],
            penalty_prior=self.penalty_prior if self.learn_penalty and stage == 1 else None,
        )
        new["stage"] = stage
        new["log_noise"] = params["log_noise"]
        new["base_prior"] = params["base_prior"]
        new["n_labels"] = params["n_labels"]
        extra: dict[str, float] = {"stage": float(stage)}
        extra.update({f"w{h}": float(v) for h, v in enumerate(new["w"][1:], start=1)})
        if self.learn_penalty:
            extra.update({f"d{h}": float(row.mean()) for h, row in enumerate(new["d"][1:], start=1)})
        return Update(params=new, objective=objective, extra=extra)

    def next_stage(self, params: Any) -> Any | None:
        """After the Dawid-Skene stage of ``start_from_ds`` (every level equal) has converged: the levels
        opened (``w = linspace(0, init_noise, H)``, ``d[1:] = init_penalty``); ``None`` once they are open."""
        if params["stage"] != 0:
            return None
        new = dict(params)
        new["w"], new["d"] = self.open_levels()
        new["log_pi"] = level_log_pi(new["log_B"], new["w"], params["log_noise"], new["d"])
        new["stage"] = 1
        log.info("dds: Dawid-Skene converged; opening %d levels", self.n_levels)
        return new

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
        """What a warm start reads (the base matrices and the class and level values) and what
        :meth:`finish_block` reads (``log_pi``)."""
        return {key: params[key] for key in self.worker_params + self.shared_params + ("log_pi",)}

    def warm_start(self, params: Any, previous: dict[str, np.ndarray], old_index: np.ndarray,
                   workers_only: bool = False) -> Any:
        """Known workers' base matrices and the class/level values of a previous run (same C and H); the
        noise distributions and the prior stay this run's, ``log_pi`` is rebuilt, the levels are open from
        the start.  A saved model without class penalties (no ``d``) starts from ``d = 0``.  With
        ``workers_only`` (a worker table) only the base matrices change: the levels keep this run's start."""
        previous = dict(previous)
        previous.setdefault("d", np.zeros_like(params["d"]))
        new = super().warm_start(params, previous, old_index, workers_only)
        if not self.learn_penalty:
            new["d"] = np.zeros_like(new["d"])
        if not workers_only:
            new["stage"] = 1
        new["log_pi"] = level_log_pi(new["log_B"], new["w"], new["log_noise"], new["d"])
        return new

    def worker_start(self, confusion: np.ndarray, accuracy: np.ndarray) -> dict[str, np.ndarray]:
        """``log_B`` from the table's confusion matrices (a zero cell floored at 1e-300)."""
        return {"log_B": np.log(np.maximum(confusion, 1e-300))}

    def item_responsibilities(self, block: Block, params: Any) -> np.ndarray:
        """The posterior over each item's (level, class) pairs, shape (n, H C), level-major."""
        resp, _ = dds_e_step(block, params)
        return resp.reshape(resp.shape[0], -1)

    def carried_from_sums(self, label_sums: np.ndarray, item_sums: np.ndarray) -> Stats:
        h, c = self.n_levels, self.n_classes
        by_level = item_sums.reshape(h, c)
        return {"counts": label_sums.reshape(label_sums.shape[0], h, c, c), "classes": by_level.sum(axis=0),
                "levels": by_level.sum(axis=1)}

    def evidence_block(self, block: Block, params: Any) -> Stats:
        """``log_evidence`` = ``sum_i log p(L_i | B, w, d, alpha, beta)``; ``entropy`` = ``-sum_i sum_h r_ih
        log r_ih`` of the items' level posteriors; ``joint_entropy`` the same for their joint (level, class)
        posteriors."""
        resp, log_evidence = dds_e_step(block, params)
        levels = resp.sum(axis=2)  # (n, H)
        entropy = -float(np.sum(levels * np.log(np.maximum(levels, 1e-300))))
        joint = -float(np.sum(resp * np.log(np.maximum(resp, 1e-300))))
        return {"log_evidence": np.array(float(log_evidence.sum())), "entropy": np.array(entropy),
                "joint_entropy": np.array(joint)}

    def level_row(self, params: Any, history: list[dict[str, float]], evidence: Stats) -> dict[str, Any]:
        summary = self.summary(params)
        return {
            "level_entropy": float(evidence["entropy"]),
            "joint_entropy": float(evidence["joint_entropy"]),
            "level_noise": summary["level_noise"],
            "level_penalty": summary["level_penalty"],
            "level_proportions": summary["level_proportions"],
        }

    def summary(self, params: Any) -> dict[str, Any]:
        return {
            "level_noise": params["w"].tolist(),
            "level_penalty": params["d"].tolist(),
            "level_proportions": np.exp(params["log_beta"]).tolist(),
            "class_proportions": np.exp(params["log_alpha"]).tolist(),
        }
