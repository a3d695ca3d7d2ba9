"""IDBLA by collapsed variational inference (paper section 4.3, eq. 14-23).

Notation
--------
K workers, C classes, H difficulty levels; ``n`` items and ``m`` labels in a block; label ``l`` of item
``i`` is the pair (worker ``k``, class ``c``).

* ``T_i`` true class, ``Q_i`` difficulty level (0 = easiest); ``pi``, ``alpha``, ``beta`` are integrated
  out (collapsed, eq. 14).
* ``lambda_i = q(T_i)`` shape (C,), ``rho_i = q(Q_i)`` shape (H,): the mean-field factors (eq. 12).
* ``omega``, ``gamma_alpha``, ``gamma_beta``: symmetric Dirichlet pseudo-counts of ``pi[k, h, t, :]``,
  ``alpha`` and ``beta`` (the paper sets all three to 1); ``diagonal_prior`` an optional extra pseudo-count
  on ``pi[k, h, t, t]`` (0 in the paper).
* Expected counts over *all* items (the additive tables, summed over blocks):

  - ``n_t[t] = sum_i lambda_{i,t}`` and ``n_t_sq[t] = sum_i lambda_{i,t}^2``  (C,)
  - ``n_q[h] = sum_i rho_{i,h}`` and ``n_q_sq[h] = sum_i rho_{i,h}^2``  (H,)
  - ``n_l[k, h, t, c] = sum over labels (i, k, c) of lambda_{i,t} rho_{i,h}``  (K, H, C, C)
  - ``s_tt[k, t, t', h, c] = sum over labels (i, k, c) of lambda_{i,t} lambda_{i,t'} rho_{i,h}^2``
    (K, C, C, H, C): second moments for the rho update (eq. 22)
  - ``s_hh[k, h, h', t, c] = sum over labels (i, k, c) of rho_{i,h} rho_{i,h'} lambda_{i,t}^2``
    (K, H, H, C, C): second moments for the lambda update (eq. 23)

  A ``.`` in place of ``c`` is the sum over ``c`` (``n_l[k, h, t, .]``).
* "``not i``": a table minus item ``i``'s own contribution (each of its labels counted once, so a worker
  who labelled ``i`` twice is subtracted twice).

The updates (eq. 22 for rho, eq. 23 for lambda)
-----------------------------------------------
For the lambda update the paper treats ``N_l^{not i}(k, Q_i, t, c) = sum_{j != i, L_jk = c} I(Q_j = Q_i,
T_j = t)`` as a sum of independent Bernoullis with ``p_j = (rho_j . rho_i) lambda_{j,t}``, so::

    E   = sum_h rho_{i,h} n_l^{not i}[k, h, t, c]
    Var = E - sum_{h,h'} rho_{i,h} rho_{i,h'} s_hh^{not i}[k, h, h', t, c]

and ``E[log(N + a)] ~ log(E + a) - Var / (2 (E + a)^2)`` (second-order Taylor expansion, "CVB"; without
the variance term: "CVB0").  The rho update is symmetric with ``p_j = (lambda_j . lambda_i) rho_{j,h}``
and the table ``s_tt``.  ``docs/idbla_cvb.md`` has the derivation.  Every table is a sum over labels or
items, so it is an additive statistic; its size depends on K, H and C only.

Schedules
---------
*Parallel* (:class:`IdblaCvb` on any engine): every item is updated from the previous iteration's global
tables, minus its own contribution; within an item lambda_i is updated first and rho_i then uses the new
lambda_i (as in the paper, eq. 17 then 18).  Damping mixes the old factors back in; with
``adaptive_damping`` the driver raises it when two successive global steps point apart (the parallel
schedule's period-2 oscillation, seen on bluebird).
*Sequential*: the paper's schedule, items one at a time with the tables updated after every item, is not
a sum of block statistics; ``scripts/experiments/cvb_sequential.py`` runs it on one process for
comparison.

Objective
---------
Per label, the collapsed log joint (eq. 14 with its normalizing constants) evaluated at the expected
counts plus the entropy of q: ``(log p(T, Q, L)|_{E[N]} + sum_i H(lambda_i) + H(rho_i)) / n_labels``, a
zeroth-order estimate of the collapsed ELBO (eq. 15).  The history also records ``log_joint_map``, the
collapsed log joint per label at the current most probable (T, Q), and ``error`` when gold is present.
``Update.change`` is (an upper bound within 10 % of) the largest change of any ``lambda_{i,t}``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
from scipy.special import gammaln

from crowdspark.block import Block
from crowdspark.metrics import gold_stats
from crowdspark.models.base import ItemResult, Schedule, State, Update
from crowdspark.models.common import argmax_random_ties, confusion_counts, fix_scores, normalize_log, tie_uniforms
from crowdspark.models.idbla_init import IdblaInit, level_worker_table
from crowdspark.stats import Stats
from crowdspark.validation import check_bool, check_float, check_int

__all__ = [
    "IdblaCvb",
    "IdblaCvb0",
    "CvbPriors",
    "label_multiplicity",
    "cvb_tables",
    "tables_to_params",
    "cvb_update",
    "update_lambda",
    "update_rho",
    "expected_log",
    "coupled_moments",
    "count_term",
    "collapsed_log_joint",
    "sweep_stats",
    "step_stats",
    "step_cosine",
    "next_damping",
    "max_change_bound",
    "CHANGE_EDGES",
]

log = logging.getLogger(__name__)

#: upper edges of the histogram bins of per-item lambda changes (24 per decade from 1e-12 to 1); the
#: reported change is the edge of the highest non-empty bin, an upper bound within a factor 10**(1/24)
CHANGE_EDGES = 10.0 ** np.linspace(-12.0, 0.0, 12 * 24 + 1)

#: adaptive damping: raise by DAMPING_STEP, up to MAX_DAMPING, when successive steps have a cosine below
#: OSCILLATION_COSINE (a period-2 oscillation of the parallel schedule gives a cosine near -1)
OSCILLATION_COSINE = -0.5
DAMPING_STEP = 0.2
MAX_DAMPING = 0.8

TABLE_KEYS = ("n_t", "n_t_sq", "n_q", "n_q_sq", "n_l")
SECOND_ORDER_KEYS = ("s_tt", "s_hh")


@dataclass(frozen=True)
class CvbPriors:
    """Hyperparameters and switches of one CVB update.

    Attributes
    ----------
    omega, gamma_alpha, gamma_beta : float
        Dirichlet pseudo-counts of ``pi``, ``alpha``, ``beta``.
    diagonal_prior : float
        Extra pseudo-count on the diagonal cell ``pi[k, h, t, t]`` (0 in the paper).
    second_order : bool
        Apply the variance (Gaussian) correction (CVB) or not (CVB0).
    damping : float
        In [0, 1): new factor = ``(1 - damping) * update + damping * old``.
    """

    omega: float = 1.0
    gamma_alpha: float = 1.0
    gamma_beta: float = 1.0
    second_order: bool = True
    damping: float = 0.0
    diagonal_prior: float = 0.0


# ---------------------------------------------------------------------------------------------------------
# additive tables
# ---------------------------------------------------------------------------------------------------------


def label_multiplicity(block: Block) -> tuple[np.ndarray, np.ndarray]:
    """How many labels of the same item share a label's (worker, class) and its worker.

    Returns
    -------
    same_class : ndarray of float64, shape (m,)
        Number of labels of the label's item with the same worker and class (1 without repeats).
    same_worker : ndarray of float64, shape (m,)
        Number of labels of the label's item with the same worker.
    """
    if block.n_labels == 0:
        return np.zeros(0), np.zeros(0)
    n_cls = int(block.label.max()) + 1
    pair = block.item_of_label.astype(np.int64) * (int(block.worker.max()) + 1) + block.worker
    _, inv_w, cnt_w = np.unique(pair, return_inverse=True, return_counts=True)
    _, inv_c, cnt_c = np.unique(pair * n_cls + block.label, return_inverse=True, return_counts=True)
    return cnt_c[inv_c].astype(np.float64), cnt_w[inv_w].astype(np.float64)


def cvb_tables(
    block: Block, lam: np.ndarray, rho: np.ndarray, n_workers: int, second_order: bool = True
) -> Stats:
    """Expected-count tables of a block (additive over blocks).

    Parameters
    ----------
    block : Block
    lam : ndarray, shape (n, C)
        lambda, q(T_i).
    rho : ndarray, shape (n, H)
        rho, q(Q_i).
    n_workers : int
        K.
    second_order : bool
        Also return the second-moment tables ``s_tt`` and ``s_hh``.

    Returns
    -------
    dict
        ``n_t``, ``n_t_sq`` (C,); ``n_q``, ``n_q_sq`` (H,); ``n_l`` (K, H, C, C); with ``second_order``
        also ``s_tt`` (K, C, C, H, C) and ``s_hh`` (K, H, H, C, C) (see the module notation).
    """
    n_classes = lam.shape[1]
    joint = rho[:, :, None] * lam[:, None, :]  # (n, H, C)
    out = {
        "n_t": lam.sum(axis=0),
        "n_t_sq": (lam**2).sum(axis=0),
        "n_q": rho.sum(axis=0),
        "n_q_sq": (rho**2).sum(axis=0),
        "n_l": confusion_counts(block, joint, n_workers, n_classes),
    }
    if second_order:
        lam_lam = lam[:, :, None] * lam[:, None, :]
        rho_rho = rho[:, :, None] * rho[:, None, :]
        s_tt = lam_lam[:, :, :, None] * (rho**2)[:, None, None, :]  # (n, C, C, H)
        s_hh = rho_rho[:, :, :, None] * (lam**2)[:, None, None, :]  # (n, H, H, C)
        out["s_tt"] = confusion_counts(block, s_tt, n_workers, n_classes)
        out["s_hh"] = confusion_counts(block, s_hh, n_workers, n_classes)
    return out


def tables_to_params(stats: Stats) -> dict[str, np.ndarray]:
    """Global tables for the next update: the summed tables and their sums over the label class.

    Parameters
    ----------
    stats : dict
        Summed output of :func:`cvb_tables` (other keys are ignored).

    Returns
    -------
    dict
        The tables of :func:`cvb_tables` plus ``n_l_dot`` (K, H, C, 1), and with second order
        ``s_tt_dot`` (K, C, C, H, 1) and ``s_hh_dot`` (K, H, H, C, 1).
    """
    out = {key: np.array(stats[key], dtype=np.float64) for key in TABLE_KEYS}
    out["n_l_dot"] = out["n_l"].sum(axis=-1, keepdims=True)
    for key in SECOND_ORDER_KEYS:
        if key in stats:
            out[key] = np.array(stats[key], dtype=np.float64)
            out[key + "_dot"] = out[key].sum(axis=-1, keepdims=True)
    return out


# ---------------------------------------------------------------------------------------------------------
# the updates
# ---------------------------------------------------------------------------------------------------------


def expected_log(mean: np.ndarray, var: np.ndarray | None, prior: float | np.ndarray) -> np.ndarray:
    """Second-order estimate of ``E[log(N + prior)]`` from the mean and variance of ``N``.

    ``log(mean + prior) - var / (2 (mean + prior)^2)``; first order (``log(mean + prior)``) when ``var`` is
    None.  Means and variances are floored at 0 (subtracting an item's own contribution can leave -1e-16).
    """
    shifted = np.maximum(mean, 0.0) + prior
    out = np.log(shifted)
    if var is not None:
        out -= np.maximum(var, 0.0) / (2.0 * shifted**2)
    return out


def coupled_moments(
    block: Block,
    mean_tab: np.ndarray,
    sq_tab: np.ndarray | None,
    cls: np.ndarray,
    coupling: np.ndarray,
    own_x: np.ndarray | None,
    own_y: np.ndarray | None,
    mult: np.ndarray,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Mean and variance of ``N^{not i}(k, Y_i, x, c)`` for every label and every value x.

    The count is a sum over the other items' labels (k, c) of Bernoullis with
    ``p_j = (y_j . coupling_i) x_j[x]``: its mean is ``sum_y coupling_i[y] mean_tab[k, y, x, c]`` and
    ``sum_j p_j^2 = sum_{y,y'} coupling_i[y] coupling_i[y'] sq_tab[k, y, y', x, c]``, each minus item i's
    own contribution.

    Parameters
    ----------
    block : Block
    mean_tab : ndarray, shape (K, Y, X, C') with C' = C (or 1 for the sum over classes)
    sq_tab : ndarray, shape (K, Y, Y, X, C'), or None for first order
    cls : ndarray of int, shape (m,)
        Class index into the last axis of the tables (``block.label``, or zeros with C' = 1).
    coupling : ndarray, shape (n, Y)
        The item's own factor over the other variable (rho_i for the lambda update, lambda_i for rho).
    own_x, own_y : ndarray, shape (n, X) and (n, Y), or None
        The factors with which item i entered the tables; None if the tables already exclude it.
    mult : ndarray, shape (m,)
        How many of item i's labels fall in the same table cell as this one (see
        :func:`label_multiplicity`).

    Returns
    -------
    mean : ndarray, shape (m, X)
    var : ndarray, shape (m, X), or None when ``sq_tab`` is None
    """
    item = block.item_of_label
    c_l = coupling[item]  # (m, Y)
    n_k, n_y, n_x, n_c = mean_tab.shape
    # one contiguous row per (worker, class) cell, gathered once per label
    row = block.worker.astype(np.int64) * n_c + cls
    mean_rows = np.ascontiguousarray(mean_tab.transpose(0, 3, 1, 2)).reshape(n_k * n_c, n_y, n_x)
    mean = np.einsum("my,myx->mx", c_l, mean_rows[row])
    overlap = None
    if own_x is not None:
        overlap = (coupling * own_y).sum(axis=1)[item]  # (m,)
        mean -= (mult * overlap)[:, None] * own_x[item]
    if sq_tab is None:
        return mean, None
    sq_rows = np.ascontiguousarray(sq_tab.transpose(0, 4, 1, 2, 3)).reshape(n_k * n_c, n_y, n_y, n_x)
    sq = np.zeros_like(mean)
    for y in range(n_y):  # one y at a time keeps the gathered block at (m, Y, X)
        sq += c_l[:, y, None] * np.einsum("mz,mzx->mx", c_l, sq_rows[row, y])
    if own_x is not None:
        sq -= (mult * overlap**2)[:, None] * own_x[item] ** 2
    return mean, mean - sq


def count_term(
    total: np.ndarray, total_sq: np.ndarray, own: np.ndarray | None, prior: float, second_order: bool
) -> np.ndarray:
    """``E[log(N^{not i}(x) + prior)]`` for the class (or level) counts, shape (n, X).

    Parameters
    ----------
    total, total_sq : ndarray, shape (X,)
        ``sum_j p_j[x]`` and ``sum_j p_j[x]^2`` over all items.
    own : ndarray, shape (n, X), or None
        The item's own factor to exclude (None when the totals already exclude it).
    """
    mean = np.broadcast_to(total, own.shape if own is not None else total.shape).astype(np.float64)
    var = total - total_sq
    if own is not None:
        mean = mean - own
        var = var - own * (1.0 - own)
    return expected_log(mean, var if second_order else None, prior)


def _label_term(
    block: Block,
    tables: dict[str, np.ndarray],
    key_mean: str,
    key_sq: str,
    coupling: np.ndarray,
    own_x: np.ndarray | None,
    own_y: np.ndarray | None,
    mult: tuple[np.ndarray, np.ndarray],
    omega: np.ndarray | float,
    omega_dot: float,
    second_order: bool,
    transpose: tuple[int, ...] | None = None,
) -> np.ndarray:
    """Per-item sum over labels of ``E log(N(k,.,x,c) + omega) - E log(N(k,.,x,.) + omega_dot)``, (n, X).

    ``omega`` is the pseudo-count of the label's cell, a scalar or shape (m, X) or (m, 1); ``omega_dot``
    the pseudo-count of the row.
    """
    mean_tab, mean_dot = tables[key_mean], tables[key_mean + "_dot"]
    if transpose is not None:  # view n_l[k, h, t, c] as [k, t, h, c] for the rho update
        mean_tab, mean_dot = mean_tab.transpose(transpose), mean_dot.transpose(transpose)
    sq_tab = tables[key_sq] if second_order else None
    sq_dot = tables[key_sq + "_dot"] if second_order else None
    zeros = np.zeros(block.n_labels, dtype=np.int64)
    e1, v1 = coupled_moments(block, mean_tab, sq_tab, block.label, coupling, own_x, own_y, mult[0])
    e0, v0 = coupled_moments(block, mean_dot, sq_dot, zeros, coupling, own_x, own_y, mult[1])
    per_label = expected_log(e1, v1, omega) - expected_log(e0, v0, omega_dot)
    if block.n_items == 0:
        return np.zeros((0, per_label.shape[1]))
    return np.add.reduceat(per_label, block.offsets[:-1], axis=0)


def _damp(new: np.ndarray, old: np.ndarray, damping: float) -> np.ndarray:
    return new if damping == 0.0 else (1.0 - damping) * new + damping * old


def update_lambda(
    block: Block,
    tables: dict[str, np.ndarray],
    lam: np.ndarray,
    rho: np.ndarray,
    mult: tuple[np.ndarray, np.ndarray],
    priors: CvbPriors,
    exclude: bool = True,
) -> np.ndarray:
    """New lambda of every item of the block (paper eq. 23), undamped.

    Parameters
    ----------
    block : Block
    tables : dict
        Output of :func:`tables_to_params` for the current factors of all items.
    lam, rho : ndarray, shape (n, C) and (n, H)
        The items' current factors (with which they entered ``tables``); rho_i is the coupling.
    mult : tuple of ndarray, shape (m,) each
        :func:`label_multiplicity`.
    priors : CvbPriors
    exclude : bool
        Subtract each item's own contribution (True); False when ``tables`` already exclude the item.

    Returns
    -------
    ndarray, shape (n, C)
        Rows sum to 1; the one-hot of the gold class for an item with gold in the fit.
    """
    own_t, own_q = (lam, rho) if exclude else (None, None)
    score = count_term(tables["n_t"], tables["n_t_sq"], own_t, priors.gamma_alpha, priors.second_order)
    n_classes = lam.shape[1]
    # pseudo-count of cell (t, c): omega + diagonal_prior * [t == c]
    omega = priors.omega + priors.diagonal_prior * (np.arange(n_classes)[None, :] == block.label[:, None])
    omega_dot = n_classes * priors.omega + priors.diagonal_prior
    score = score + _label_term(
        block, tables, "n_l", "s_hh", rho, own_t, own_q, mult, omega, omega_dot, priors.second_order
    )
    return normalize_log(fix_scores(block, np.broadcast_to(score, lam.shape)), axis=1)[0]


def update_rho(
    block: Block,
    tables: dict[str, np.ndarray],
    lam_new: np.ndarray,
    lam: np.ndarray,
    rho: np.ndarray,
    mult: tuple[np.ndarray, np.ndarray],
    priors: CvbPriors,
    exclude: bool = True,
) -> np.ndarray:
    """New rho of every item of the block (paper eq. 22), undamped.

    Parameters
    ----------
    lam_new : ndarray, shape (n, C)
        The items' updated lambda, the coupling of this update.
    lam, rho : ndarray, shape (n, C) and (n, H)
        The factors with which the items entered ``tables``.
    Other parameters as :func:`update_lambda`.

    Returns
    -------
    ndarray, shape (n, H)
    """
    own_q, own_t = (rho, lam) if exclude else (None, None)
    score = count_term(tables["n_q"], tables["n_q_sq"], own_q, priors.gamma_beta, priors.second_order)
    n_classes = lam.shape[1]
    # the cell (T_i, c) is random; its pseudo-count enters at its mean omega + diagonal_prior * lambda_{i,c}
    omega = priors.omega + priors.diagonal_prior * lam_new[block.item_of_label, block.label][:, None]
    omega_dot = n_classes * priors.omega + priors.diagonal_prior
    score = score + _label_term(
        block, tables, "n_l", "s_tt", lam_new, own_q, own_t, mult, omega, omega_dot, priors.second_order,
        transpose=(0, 2, 1, 3),
    )
    return normalize_log(np.broadcast_to(score, rho.shape), axis=1)[0]


def cvb_update(
    block: Block,
    tables: dict[str, np.ndarray],
    lam: np.ndarray,
    rho: np.ndarray,
    mult: tuple[np.ndarray, np.ndarray],
    priors: CvbPriors,
    exclude: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """One CVB update of every item of a block: lambda (eq. 23), then rho (eq. 22) with the new lambda.

    Returns
    -------
    lam_new : ndarray, shape (n, C)
    rho_new : ndarray, shape (n, H)
        Both damped with ``priors.damping``.
    """
    lam_new = _damp(update_lambda(block, tables, lam, rho, mult, priors, exclude), lam, priors.damping)
    rho_new = _damp(update_rho(block, tables, lam_new, lam, rho, mult, priors, exclude), rho, priors.damping)
    return lam_new, rho_new


# ---------------------------------------------------------------------------------------------------------
# objective and per-sweep statistics
# ---------------------------------------------------------------------------------------------------------


def collapsed_log_joint(
    n_t: np.ndarray,
    n_q: np.ndarray,
    n_l: np.ndarray,
    omega: float,
    gamma_alpha: float,
    gamma_beta: float,
    diagonal_prior: float = 0.0,
) -> float:
    """``log p(T, Q, L | omega, gamma)`` with pi, alpha, beta integrated out (eq. 14, with constants).

    Parameters
    ----------
    n_t : ndarray, shape (C,)
    n_q : ndarray, shape (H,)
    n_l : ndarray, shape (K, H, C, C)
        Counts (or expected counts) N_t, N_q, N_l.
    omega, gamma_alpha, gamma_beta, diagonal_prior : float
        Pseudo-counts; row t of pi has ``omega + diagonal_prior * [c == t]``.
    """

    def dirichlet_multinomial(counts: np.ndarray, a: np.ndarray) -> np.ndarray:
        a = np.broadcast_to(a, counts.shape)
        return (
            (gammaln(counts + a) - gammaln(a)).sum(axis=-1)
            + gammaln(a.sum(axis=-1))
            - gammaln((counts + a).sum(axis=-1))
        )

    n_classes = n_t.shape[0]
    pi_prior = omega + diagonal_prior * np.eye(n_classes)
    return float(
        dirichlet_multinomial(n_t, np.full(n_classes, gamma_alpha))
        + dirichlet_multinomial(n_q, np.full(n_q.shape[0], gamma_beta))
        + dirichlet_multinomial(n_l, pi_prior).sum()
    )


def _entropy(p: np.ndarray) -> float:
    return float(-(p * np.log(np.maximum(p, 1e-300))).sum())


def sweep_stats(
    block: Block,
    lam_old: np.ndarray,
    lam: np.ndarray,
    rho: np.ndarray,
    label: np.ndarray,
    n_workers: int,
    second_order: bool,
) -> Stats:
    """Everything a sweep reports for a block (all additive).

    Returns
    -------
    dict
        The tables of :func:`cvb_tables` for (lam, rho); ``change_hist`` (len(CHANGE_EDGES),) histogram of
        ``max_t |lam - lam_old|`` per item; ``change_sum``; ``entropy``; ``map_n_t``, ``map_n_q``,
        ``map_n_l`` (counts at the most probable T and Q); the gold counts of :func:`gold_stats`.
    """
    n_classes, n_levels = lam.shape[1], rho.shape[1]
    stats = cvb_tables(block, lam, rho, n_workers, second_order)
    change = np.abs(lam - lam_old).max(axis=1) if block.n_items else np.zeros(0)
    stats["change_hist"] = np.bincount(
        np.searchsorted(CHANGE_EDGES, change, side="left").clip(max=len(CHANGE_EDGES) - 1),
        minlength=len(CHANGE_EDGES),
    ).astype(np.int64)
    stats["change_sum"] = np.array(change.sum())
    stats["entropy"] = np.array(_entropy(lam) + _entropy(rho))
    level = rho.argmax(axis=1)
    cell = ((block.worker.astype(np.int64) * n_levels + level[block.item_of_label]) * n_classes
            + label[block.item_of_label]) * n_classes + block.label
    stats["map_n_t"] = np.bincount(label, minlength=n_classes).astype(np.float64)
    stats["map_n_q"] = np.bincount(level, minlength=n_levels).astype(np.float64)
    stats["map_n_l"] = np.bincount(cell, minlength=n_workers * n_levels * n_classes * n_classes).reshape(
        n_workers, n_levels, n_classes, n_classes
    ).astype(np.float64)
    stats.update(gold_stats(block, lam, label))
    return stats


def step_stats(step: np.ndarray, prev: np.ndarray | None) -> Stats:
    """Additive sums comparing this iteration's step ``lam_new - lam`` (n, C) with the previous one.

    Returns
    -------
    dict with ``step_sq`` = sum |step|^2 and ``step_dot`` = sum step . prev (0 without a previous step)
    """
    return {
        "step_sq": np.array(float((step**2).sum())),
        "step_dot": np.array(float((step * prev).sum()) if prev is not None else 0.0),
    }


def step_cosine(stats: Stats, prev_sq: float) -> float:
    """Cosine between the global lambda steps of two successive iterations (0 when undefined)."""
    denom = float(np.sqrt(float(stats["step_sq"]) * prev_sq))
    return float(stats["step_dot"]) / denom if denom > 0 else 0.0


def next_damping(damping: float, cosine: float, adaptive: bool) -> float:
    """Raise the damping by ``DAMPING_STEP`` (up to ``MAX_DAMPING``) when the schedule oscillates.

    Oscillation: two successive global steps point apart, ``cosine < OSCILLATION_COSINE``.  The damping
    never decreases, so the rule cannot itself cycle.
    """
    if adaptive and cosine < OSCILLATION_COSINE and damping < MAX_DAMPING:
        return min(MAX_DAMPING, damping + DAMPING_STEP)
    return damping


def max_change_bound(change_hist: np.ndarray) -> float:
    """Upper bound of the largest per-item change from its histogram (0 for an empty histogram)."""
    nonzero = np.flatnonzero(change_hist)
    return float(CHANGE_EDGES[nonzero[-1]]) if nonzero.size else 0.0


# ---------------------------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------------------------


def _one_hot(index: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros((index.shape[0], size))
    out[np.arange(index.shape[0]), index] = 1.0
    return out


@dataclass(frozen=True)
class IdblaCvb(IdblaInit):
    """IDBLA by collapsed variational inference, parallel schedule over exact global tables.

    Starts from the paper's initialization (:class:`IdblaInit`: T from majority vote, Q from the
    per-item difficulty), as one-hot lambda and rho.

    Parameters
    ----------
    n_workers, n_classes, n_levels, seed, init, ... :
        As :class:`IdblaInit`.
    omega, gamma_alpha, gamma_beta : float
        Dirichlet pseudo-counts of pi, alpha and beta (> 0; the paper uses 1).
    diagonal_prior : float
        Extra pseudo-count >= 0 on the diagonal cell of every pi row (the paper: 0).
    correction : bool
        Second-order (Gaussian) correction from the variances of the excluded counts (True, "CVB"), or the
        first-order update (False, "CVB0").
    damping : float
        In [0, 1): each iteration keeps this share of the old lambda and rho (the starting value when
        ``adaptive_damping``).
    adaptive_damping : bool
        Raise the damping by 0.2 (up to 0.8) whenever two successive iterations move lambda in opposite
        directions (cosine of the summed steps < -0.5), the sign of a parallel-schedule oscillation.
    max_iter : int
        Largest number of iterations.
    tol : float
        Stop when the largest change of any lambda_{i,t} falls below ``tol``.
    """

    omega: float = 1.0
    diagonal_prior: float = 0.0
    gamma_alpha: float = 1.0
    gamma_beta: float = 1.0
    correction: bool = True
    damping: float = 0.0
    adaptive_damping: bool = True
    max_iter: int = 200
    tol: float = 1e-4

    name: ClassVar[str] = "idbla-cvb"
    title: ClassVar[str] = "IDBLA by collapsed VI"
    api_name: ClassVar[str] = "IdblaCvb"
    description: ClassVar[str] = (
        "IDBLA by collapsed variational inference with the second-order correction"
    )
    #: the initialization's rounds, then one that turns T and Q into lambda and rho and sums the tables
    n_init_rounds: ClassVar[int] = IdblaInit.n_init_rounds + 1

    def __post_init__(self) -> None:
        super().__post_init__()
        prefix = self.name
        for key in ("omega", "gamma_alpha", "gamma_beta"):
            check_float(f"{prefix}.{key}", getattr(self, key), minimum=0.0, strict_min=True)
        check_float(f"{prefix}.diagonal_prior", self.diagonal_prior, minimum=0.0)
        check_float(f"{prefix}.damping", self.damping, minimum=0.0, maximum=1.0, strict_max=True)
        check_int(f"{prefix}.max_iter", self.max_iter, minimum=1)
        check_float(f"{prefix}.tol", self.tol, minimum=0.0, strict_min=True)
        check_bool(f"{prefix}.correction", self.correction)
        check_bool(f"{prefix}.adaptive_damping", self.adaptive_damping)

    # -- protocol -------------------------------------------------------------------------------------------

    @property
    def schedule(self) -> Schedule:
        return Schedule(max_sweeps=self.max_iter, tol=self.tol)

    @property
    def priors(self) -> CvbPriors:
        """The hyperparameters of one update."""
        return CvbPriors(
            self.omega, self.gamma_alpha, self.gamma_beta, self.correction, self.damping, self.diagonal_prior
        )

    def init_round(self, block: Block, state: State, params: Any, round: int) -> tuple[State, Stats]:
        if round < self.n_init_rounds:
            return super().init_round(block, state, params, round)
        state = dict(state or {})
        lam = _one_hot(np.asarray(state["T"]), self.n_classes)
        rho = _one_hot(np.asarray(state["Q"]), self.n_levels)
        same_class, same_worker = label_multiplicity(block)
        state.update(lam=lam, rho=rho, mult_class=same_class, mult_worker=same_worker)
        return state, cvb_tables(block, lam, rho, self.n_workers, self.correction)

    def init_update(self, stats: Stats, params: Any, round: int) -> Any:
        if round < self.n_init_rounds:
            return super().init_update(stats, params, round)
        out = dict(params)
        out.update(tables_to_params(stats))
        out["n_items"] = float(stats["n_t"].sum())
        out["damping"] = float(self.damping)
        out["step_sq"] = 0.0
        return out

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        assert state is not None
        lam, rho = state["lam"], state["rho"]
        mult = (state["mult_class"], state["mult_worker"])
        priors = replace(self.priors, damping=float(params["damping"]))
        lam_new, rho_new = cvb_update(block, params, lam, rho, mult, priors, exclude=True)
        label = argmax_random_ties(lam_new, tie_uniforms(block, self.seed))
        step = lam_new - lam
        state = dict(state)
        stats = sweep_stats(block, lam, lam_new, rho_new, label, self.n_workers, self.correction)
        stats.update(step_stats(step, state.get("step")))
        state.update(lam=lam_new, rho=rho_new, T=label, Q=rho_new.argmax(axis=1).astype(np.int32), step=step)
        return state, stats

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        new = dict(params)
        new.update(tables_to_params(stats))
        n_labels = params["n_labels"]
        log_joint = collapsed_log_joint(
            new["n_t"], new["n_q"], new["n_l"], self.omega, self.gamma_alpha, self.gamma_beta,
            self.diagonal_prior,
        )
        objective = (log_joint + float(stats["entropy"])) / n_labels
        map_joint = collapsed_log_joint(
            stats["map_n_t"], stats["map_n_q"], stats["map_n_l"], self.omega, self.gamma_alpha, self.gamma_beta,
            self.diagonal_prior,
        )
        cosine = step_cosine(stats, params["step_sq"])
        new["step_sq"] = float(stats["step_sq"])
        new["damping"] = next_damping(params["damping"], cosine, self.adaptive_damping)
        if new["damping"] != params["damping"]:
            log.info("%s: successive steps point apart (cosine %.2f), damping %.2f -> %.2f",
                     self.name, cosine, params["damping"], new["damping"])
        extra = {
            "log_joint_map": map_joint / n_labels,
            "mean_change": float(stats["change_sum"]) / max(params["n_items"], 1.0),
            "step_cosine": cosine,
            "damping": float(params["damping"]),
        }
        for h, size in enumerate(new["n_q"]):
            extra[f"level_share_{h}"] = float(size) / max(params["n_items"], 1.0)
        if int(stats["gold_n"]) > 0:
            extra["error"] = float(stats["gold_errors"]) / float(stats["gold_n"])
        return Update(params=new, objective=objective, change=max_change_bound(stats["change_hist"]), extra=extra)

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        assert state is not None
        lam, rho = state["lam"], state["rho"]
        label = argmax_random_ties(lam, tie_uniforms(block, self.seed))
        return ItemResult(
            posterior=lam,
            label=label,
            extra={
                "level": rho.argmax(axis=1).astype(np.int32),
                "level_posterior": rho,
                "epsilon": state.get("epsilon", np.full(block.n_items, np.nan)),
            },
        )

    # -- driver-side summaries ------------------------------------------------------------------------------

    def final_params(self, params: Any) -> dict[str, np.ndarray]:
        """Posterior-mean estimates of pi (K, H, C, C), alpha (C,) and beta (H,) from the expected counts."""
        n_l = params["n_l"]
        prior = self.omega + self.diagonal_prior * np.eye(self.n_classes)
        pi = (n_l + prior) / (n_l + prior).sum(axis=-1, keepdims=True)
        alpha = (params["n_t"] + self.gamma_alpha) / (params["n_t"].sum() + self.n_classes * self.gamma_alpha)
        beta = (params["n_q"] + self.gamma_beta) / (params["n_q"].sum() + self.n_levels * self.gamma_beta)
        return {"pi": pi, "alpha": alpha, "beta": beta}

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        est = self.final_params(params)
        return level_worker_table(est["pi"], est["alpha"], est["beta"], init_stats["worker_labels"])

    def summary(self, params: Any) -> dict[str, Any]:
        est = self.final_params(params)
        return {
            "class_proportions": est["alpha"].tolist(),
            "level_proportions": est["beta"].tolist(),
            "level_sizes": params["n_q"].tolist(),
            "correction": self.correction,
            "damping": float(params.get("damping", self.damping)),
        }


@dataclass(frozen=True)
class IdblaCvb0(IdblaCvb):
    """IDBLA by first-order collapsed variational inference (CVB0): :class:`IdblaCvb` without the variance
    correction."""

    correction: bool = False

    name: ClassVar[str] = "idbla-cvb0"
    title: ClassVar[str] = "IDBLA by CVB0"
    api_name: ClassVar[str] = "IdblaCvb0"
    description: ClassVar[str] = "IDBLA by first-order collapsed variational inference (CVB0)"
