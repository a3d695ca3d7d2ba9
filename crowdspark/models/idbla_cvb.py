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
import scipy.sparse as sp
from scipy.special import gammaln

from crowdspark.block import Block
from crowdspark.metrics import gold_stats
from crowdspark.models.base import Footprint, ItemResult, Schedule, State, Update
from crowdspark.models.common import (
    argmax_random_ties,
    confusion_counts,
    shifted_exp,
    tie_uniforms,
)
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
    "cvb_layout",
    "gather_order",
    "expected_log",
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

#: labels per chunk of :func:`cvb_update`: the chunk's per-label arrays stay in cache
CHUNK_LABELS = 65536

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


def cvb_layout(tables: dict[str, np.ndarray], priors: CvbPriors) -> dict[str, np.ndarray]:
    """The tables of one update, stacked for the per-label gathers, with the Dirichlet pseudo-counts folded in.

    A label's expected counts are coupling-weighted sums of table rows: for the lambda update
    ``sum_h rho_{i,h} n_l[k, h, t, c]`` over the rows ``(h, k, c)``, for the rho update
    ``sum_t lambda_{i,t} n_l[k, h, t, c]`` over ``(t, k, c)``.  Each table is stored as those rows, the
    coupling index innermost (a label's rows are adjacent in memory, one contiguous read), each row followed
    by its row sum (the same for every c), so that both sums of a label are one product of one sparse
    matrix (:func:`_coupling_matrix`) with one table.  The cell's pseudo-count
    ``omega + diagonal_prior * [t == c]`` is added to every cell: the couplings sum to 1, so the lambda update
    reads ``E + omega_{tc}`` and the rho update ``E + omega + diagonal_prior * lambda_{i,c}`` (the pseudo-count
    of the random cell (T_i, c) at its mean), and the row sums ``E + C omega + diagonal_prior``.  The
    second-moment tables carry the same pseudo-counts, so that a mean minus a second moment is the variance
    of the counts alone.

    Parameters
    ----------
    tables : dict
        Output of :func:`tables_to_params`.
    priors : CvbPriors

    Returns
    -------
    dict
        ``lam`` (K C H, 2 C) and ``rho`` (K C C, 2 H); with ``priors.second_order`` also ``lam_sq``
        (K C H H, 2 C) and ``rho_sq`` (K C C C, 2 H).  Row ``(k C + c) J + j`` holds worker k, class c and
        coupling index ``j`` (flattened, J of them): the cells in its first half, their row sum in its second.
    """
    n_classes = tables["n_l"].shape[-1]
    cell_prior = priors.omega + priors.diagonal_prior * np.eye(n_classes)  # [t, c]
    dot_prior = n_classes * priors.omega + priors.diagonal_prior
    n_l = tables["n_l"] + cell_prior  # [k, h, t, c]
    n_dot = tables["n_l_dot"][..., 0] + dot_prior  # [k, h, t]
    out = {
        **_stack_rows("lam", n_l.transpose(1, 0, 3, 2), n_dot.transpose(1, 0, 2)),
        **_stack_rows("rho", n_l.transpose(2, 0, 3, 1), n_dot.transpose(2, 0, 1)),
    }
    if priors.second_order:
        s_hh = tables["s_hh"] + cell_prior  # [k, h, h', t, c]
        s_hh_dot = tables["s_hh_dot"][..., 0] + dot_prior  # [k, h, h', t]
        # [k, t, t', h, c] + omega + diagonal_prior [t == c]: sum_{t,t'} lambda_t lambda_t' (.) adds
        # omega + diagonal_prior lambda_c, the rho update's cell pseudo-count
        s_tt = tables["s_tt"] + cell_prior[None, :, None, None, :]
        s_tt_dot = tables["s_tt_dot"][..., 0] + dot_prior  # [k, t, t', h]
        out.update(_stack_rows("lam_sq", s_hh.transpose(1, 2, 0, 4, 3), s_hh_dot.transpose(1, 2, 0, 3)))
        out.update(_stack_rows("rho_sq", s_tt.transpose(1, 2, 0, 4, 3), s_tt_dot.transpose(1, 2, 0, 3)))
    return out


def _stack_rows(name: str, cell: np.ndarray, dot: np.ndarray) -> dict[str, np.ndarray]:
    """``{name: rows}`` of shape (K C J, 2 X), J = prod(...): row ``(k C + c) J + j`` is ``cell[j, k, c, :]``
    followed by ``dot[j, k, :]`` (the same for every c), j the flattened leading index.

    Parameters
    ----------
    cell : ndarray, shape (..., K, C, X)
    dot : ndarray, shape (..., K, X)
    """
    lead = cell.ndim - 3
    order = (lead, lead + 1, *range(lead), cell.ndim - 1)
    both = np.concatenate([cell, np.broadcast_to(dot[..., None, :], cell.shape)], axis=-1)
    return {name: np.ascontiguousarray(both.transpose(order)).reshape(-1, 2 * cell.shape[-1])}


#: [tables, priors, layout] of the last :func:`cvb_layout` made by :func:`_layout_of`
_LAST_LAYOUT: list = []


def _layout_of(tables: dict[str, np.ndarray], priors: CvbPriors) -> dict[str, np.ndarray]:
    """:func:`cvb_layout` of one sweep's tables, made once for all the blocks they reach in this process.

    ``tables`` is the object the engine hands every block of a sweep (:meth:`IdblaCvb.step_params`, new each
    sweep and never changed); the cache holds it, so no later object can take its identity.
    """
    if _LAST_LAYOUT and _LAST_LAYOUT[0] is tables and _LAST_LAYOUT[1] == priors:
        return _LAST_LAYOUT[2]
    layout = cvb_layout(tables, priors)
    _LAST_LAYOUT[:] = [tables, priors, layout]
    return layout


def _coupling_matrix(weights: np.ndarray, rows: np.ndarray, n_cols: int) -> sp.csr_matrix:
    """The (m, R J) matrix ``A`` with ``(A @ table)[l] = sum_j weights[l, j] * table[rows[l] * J + j]``.

    Parameters
    ----------
    weights : ndarray, shape (m, J)
    rows : ndarray of int32, shape (m,)
    n_cols : int
        R J, fewer than 2**31.
    """
    m, width = weights.shape
    # one pass per coupling index: a broadcast over rows of `width` (2 to C) values was 1.7-9x slower
    base, index = rows * np.int32(width), np.empty((m, width), dtype=np.int32)
    for j in range(width):
        np.add(base, np.int32(j), out=index[:, j])
    index = index.ravel()
    indptr = np.arange(0, m * width + 1, width, dtype=np.int32)
    return sp.csr_matrix((weights.ravel(), index, indptr), shape=(m, n_cols))


@dataclass(frozen=True)
class _Chunk:
    """Items ``lo:hi`` of a block and their labels (rows ``labels``, m_c of them), the labels taken in
    ``order`` by the gathers (``item`` and ``cell`` are in that order)."""

    lo: int
    hi: int
    labels: slice
    item: np.ndarray  # (m_c,) item of each label, counted from lo
    cell: np.ndarray  # (m_c,) int32, k * C + c
    starts: np.ndarray  # (hi - lo,) first label of each item, counted from labels.start
    inverse: np.ndarray | None = None  # (m_c,) where each stored label is in that order; None: as stored


def _chunk_bounds(block: Block, size: int) -> list[tuple[int, int]]:
    """Item ranges ``(lo, hi)`` with about ``size`` labels each (an item is never split)."""
    if block.n_items == 0:
        return []
    offsets = block.offsets
    ends = np.unique(np.searchsorted(offsets, np.arange(size, offsets[-1], size), side="left"))
    bounds = [0] + [int(e) for e in ends if 0 < e < block.n_items] + [block.n_items]
    return list(zip(bounds[:-1], bounds[1:]))


def _cells(block: Block, n_classes: int, labels: slice) -> np.ndarray:
    """``k * C + c`` of the labels ``labels``, int32."""
    return block.worker[labels].astype(np.int32) * n_classes + block.label[labels]


def gather_order(block: Block, n_classes: int, size: int = 0) -> np.ndarray:
    """Each chunk's labels sorted by (worker, class), shape (m,) int32: entries ``a:b`` of chunk ``a:b`` are
    its labels' positions counted from ``a``.

    The gathers of :func:`_label_sums` then read the tables in row order (several times faster on tables
    larger than the cache); each label's result is the same, only the order in which labels are computed
    changes.
    """
    order = np.empty(block.n_labels, dtype=np.int32)
    offsets = block.offsets
    for lo, hi in _chunk_bounds(block, size or CHUNK_LABELS):
        a, b = int(offsets[lo]), int(offsets[hi])
        order[a:b] = np.argsort(_cells(block, n_classes, slice(a, b)), kind="stable")
    return order


def _chunks(block: Block, n_classes: int, size: int, order: np.ndarray | None = None) -> list[_Chunk]:
    """The chunks of :func:`_chunk_bounds`, their labels in ``order`` (:func:`gather_order`) when given.

    They depend on the block and the arguments only, so the last ones made are memoized on the block (about
    12 bytes per label; never pickled, see :class:`~crowdspark.block.Block`) and returned again while the
    same ``n_classes``, ``size`` and ``order`` object are asked for.
    """
    cached = block.__dict__.get("_cvb_chunks")  # (n_classes, size, order, chunks)
    if cached is not None and cached[:2] == (n_classes, size) and cached[2] is order:
        return cached[3]
    offsets, out = block.offsets, []
    for lo, hi in _chunk_bounds(block, size):
        a, b = int(offsets[lo]), int(offsets[hi])
        cell, item = _cells(block, n_classes, slice(a, b)), block.item_of_label[a:b] - lo
        inverse = None
        if order is not None:
            perm = order[a:b]
            cell, item = cell[perm], item[perm]
            inverse = np.empty_like(perm)
            inverse[perm] = np.arange(b - a, dtype=perm.dtype)
        out.append(_Chunk(lo, hi, slice(a, b), item, cell, offsets[lo:hi] - a, inverse))
    object.__setattr__(block, "_cvb_chunks", (n_classes, size, order, out))
    return out


def _split(rows: np.ndarray, inverse: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The two halves (m_c, X) of per-label ``rows`` (m_c, 2 X) computed in a chunk's gather order, each
    contiguous and in the labels' stored order."""
    width = rows.shape[1] // 2
    if inverse is None:
        return np.ascontiguousarray(rows[:, :width]), np.ascontiguousarray(rows[:, width:])
    return rows[:, :width].take(inverse, axis=0), rows[:, width:].take(inverse, axis=0)


def _second_order_log(shifted: np.ndarray, sq: np.ndarray) -> np.ndarray:
    """``log(s) - max(s - sq, 0) / (2 s^2)`` (:func:`expected_log` of a count whose pseudo-count is in both
    ``s`` and ``sq``); overwrites ``sq``."""
    var = np.subtract(shifted, sq, out=sq)
    np.maximum(var, 0.0, out=var)
    var /= 2.0 * shifted**2
    out = np.log(shifted)
    out -= var
    return out


def _label_sums(
    chunk: _Chunk,
    layout: dict[str, np.ndarray],
    key: str,
    coupling: np.ndarray,
    own: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None,
    floors: tuple[float, float],
) -> np.ndarray:
    """Per-item sum over labels of ``E log(N(k,.,x,c) + omega) - E log(N(k,.,x,.) + omega_dot)``, (n_c, X).

    ``N^{not i}(k, Y_i, x, c)`` is a sum over the other items' labels (k, c) of Bernoullis with
    ``p_j = (y_j . coupling_i) x_j[x]``: its mean is ``sum_y coupling_i[y] n[k, y, x, c]`` and
    ``sum_j p_j^2 = sum_{y,y'} coupling_i[y] coupling_i[y'] s[k, y, y', x, c]``, each minus item i's own
    contribution; the variance is the mean minus that sum (second order, with ``table_sq``).  The row sum
    ``N(k, ., x, .)`` likewise.

    Parameters
    ----------
    chunk : _Chunk
    layout : dict
        :func:`cvb_layout`; ``key`` (``"lam"`` or ``"rho"``) names the update's table, shape (R Y, 2 X), and
        with second order ``key + "_sq"`` (R Y Y, 2 X), R = K C.
    coupling : ndarray, shape (n_c, Y)
        The chunk's items' factor over the other variable (rho_i for lambda, the new lambda_i for rho).
    own : tuple, or None
        ``(own_x, overlap, mult)``: the items' own factor (n_c, X) with which they entered the tables,
        ``coupling_i . own_y_i`` (n_c,), and per label (m_c, 2) how many of the item's labels share its cell
        and its row (:func:`label_multiplicity`; None when all are 1); None when the tables already exclude
        the items.
    floors : (float, float)
        The smallest pseudo-count of a cell and of a row sum.
    """
    table, table_sq = layout[key], layout.get(key + "_sq")
    c_l = np.take(coupling, chunk.item, axis=0)
    # (m_c, X) each: the cell and its row sum
    e1, e0 = _split(_coupling_matrix(c_l, chunk.cell, table.shape[0]) @ table, chunk.inverse)
    if own is not None:
        own_x, overlap, mult = own
        scaled = np.repeat(overlap[:, None] * own_x, np.diff(chunk.starts, append=len(c_l)), axis=0)
        if mult is None:
            e1 -= scaled
            e0 -= scaled
        else:
            e1 -= mult[:, 0, None] * scaled
            e0 -= mult[:, 1, None] * scaled
    np.maximum(e1, floors[0], out=e1)
    np.maximum(e0, floors[1], out=e0)
    if table_sq is None:
        # first order: one log of the ratio instead of two
        e1 /= e0
        per_label = np.log(e1, out=e1)
    else:
        pair = _coupling_matrix((c_l[:, :, None] * c_l[:, None, :]).reshape(c_l.shape[0], -1), chunk.cell,
                                table_sq.shape[0])
        s1, s0 = _split(pair @ table_sq, chunk.inverse)
        if own is not None:
            # item i's own Bernoulli p = overlap * own_x enters sum_j p_j^2 squared
            scaled_sq = np.repeat((overlap[:, None] * own_x) ** 2, np.diff(chunk.starts, append=len(c_l)), axis=0)
            s1 -= scaled_sq if mult is None else mult[:, 0, None] * scaled_sq
            s0 -= scaled_sq if mult is None else mult[:, 1, None] * scaled_sq
        per_label = _second_order_log(e1, s1)
        per_label -= _second_order_log(e0, s0)
    return np.add.reduceat(per_label, chunk.starts, axis=0)


def _damp(new: np.ndarray, old: np.ndarray, damping: float) -> np.ndarray:
    return new if damping == 0.0 else (1.0 - damping) * new + damping * old


def _normalize_rows_log(score: np.ndarray) -> np.ndarray:
    """Each row of the log scores ``score`` (n, X) normalized into probabilities; the per-row reductions run
    over the transposed copy (X, n), whose rows are long, rather than over n rows of X values."""
    probs, total, _ = shifted_exp(np.ascontiguousarray(score.T), axis=0)
    probs /= total
    return probs.T


def _fix_chunk(block: Block, chunk: _Chunk, lam: np.ndarray) -> np.ndarray:
    """``lam`` (n_c, C) with the one-hot of the gold class for the chunk's items with gold in the fit (what
    :func:`~crowdspark.models.common.fix_scores` then a normalization give)."""
    fixed = block.fixed[chunk.lo:chunk.hi]
    rows = np.flatnonzero(fixed >= 0)
    if rows.size:
        lam[rows] = 0.0
        lam[rows, fixed[rows]] = 1.0
    return lam


def cvb_update(
    block: Block,
    tables: dict[str, np.ndarray],
    lam: np.ndarray,
    rho: np.ndarray,
    mult: tuple[np.ndarray, np.ndarray],
    priors: CvbPriors,
    exclude: bool = True,
    layout: dict[str, np.ndarray] | None = None,
    order: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One CVB update of every item of a block: lambda (eq. 23), then rho (eq. 22) with the new lambda.

    The labels are taken a chunk of items at a time (:data:`CHUNK_LABELS`), both updates of a chunk before
    the next, so that the per-label arrays stay in cache.

    Parameters
    ----------
    block : Block
    tables : dict
        :func:`cvb_layout` of the summed tables with the counts ``n_t``, ``n_t_sq``, ``n_q``, ``n_q_sq``
        (as made by :meth:`IdblaCvb.step_params`), or the output of :func:`tables_to_params`.
    lam, rho : ndarray, shape (n, C) and (n, H)
        The items' current factors (with which they entered ``tables``).
    mult : tuple of ndarray, shape (m,) each
        :func:`label_multiplicity`.
    priors : CvbPriors
    exclude : bool
        Subtract each item's own contribution (True); False when ``tables`` already exclude the items.
    layout : dict, optional
        :func:`cvb_layout` of ``tables`` and ``priors``, when already made.
    order : ndarray of int32, shape (m,), optional
        :func:`gather_order` of the block (the same result, faster); None: the labels in stored order.

    Returns
    -------
    lam_new : ndarray, shape (n, C)
        Rows sum to 1; the one-hot of the gold class for an item with gold in the fit.
    rho_new : ndarray, shape (n, H)
        Both damped with ``priors.damping``.
    """
    layout = cvb_layout(tables, priors) if layout is None else layout
    n_classes = lam.shape[1]
    floors = (priors.omega, n_classes * priors.omega + priors.diagonal_prior)
    own_t, own_q = (lam, rho) if exclude else (None, None)
    score_t = count_term(tables["n_t"], tables["n_t_sq"], own_t, priors.gamma_alpha, priors.second_order)
    score_q = count_term(tables["n_q"], tables["n_q_sq"], own_q, priors.gamma_beta, priors.second_order)
    score_t, score_q = np.broadcast_to(score_t, lam.shape), np.broadcast_to(score_q, rho.shape)
    lam_new, rho_new = np.empty_like(lam), np.empty_like(rho)
    for chunk in _chunks(block, n_classes, CHUNK_LABELS, order):
        lo, hi = chunk.lo, chunk.hi
        lam_c, rho_c = lam[lo:hi], rho[lo:hi]
        repeats = None
        if np.any(mult[1][chunk.labels] != 1.0):
            repeats = np.stack([mult[0][chunk.labels], mult[1][chunk.labels]], axis=1)
        own = (lam_c, np.einsum("ij,ij->i", rho_c, rho_c), repeats) if exclude else None
        score = score_t[lo:hi] + _label_sums(chunk, layout, "lam", rho_c, own, floors)
        new = _fix_chunk(block, chunk, _normalize_rows_log(score))
        lam_new[lo:hi] = _damp(new, lam_c, priors.damping)
        new = lam_new[lo:hi]
        own = (rho_c, np.einsum("ij,ij->i", new, lam_c), repeats) if exclude else None
        score = score_q[lo:hi] + _label_sums(chunk, layout, "rho", new, own, floors)
        rho_new[lo:hi] = _damp(_normalize_rows_log(score), rho_c, priors.damping)
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

    def footprint(self) -> Footprint:
        """The tables ``n_l`` (K, H, C, C) and, with the correction, ``s_tt`` (K, C, C, H, C) and ``s_hh``
        (K, H, H, C, C), with the parameters derived from them; per item, the joint (H, C) and the second
        moments (C, C, H) and (H, H, C) of a block, and the lambda and rho (C + H) the blocks keep."""
        k, h, c = self.n_workers, self.n_levels, self.n_classes
        second = c * c * h + h * h * c if self.correction else 0
        largest = (("workers", k), ("classes", c), ("classes", c), ("levels", h), ("classes", c)) if self.correction \
            else (("workers", k), ("levels", h), ("classes", c), ("classes", c))
        return Footprint(params=2 * k * (h * c * c + c * second), item=h * c + second, state=c + h, largest=largest)

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
        state.update(lam=lam, rho=rho, mult_class=same_class, mult_worker=same_worker,
                     gather_order=gather_order(block, self.n_classes), gather_chunk=CHUNK_LABELS)
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

    def step_params(self, params: Any) -> dict[str, Any]:
        """What an update reads: the summed tables of :func:`tables_to_params` and the damping (not the
        counts at the most probable T and Q, nor the driver's bookkeeping)."""
        keys = TABLE_KEYS + ("n_l_dot", "damping") + tuple(
            key + suffix for key in SECOND_ORDER_KEYS for suffix in ("", "_dot") if self.correction)
        return {key: params[key] for key in keys}

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        assert state is not None
        lam, rho = state["lam"], state["rho"]
        mult = (state["mult_class"], state["mult_worker"])
        priors = replace(self.priors, damping=float(params["damping"]))
        layout = _layout_of(params, priors)
        # a state made with other chunks (an older checkpoint) gathers in stored order: the same result
        order = state.get("gather_order") if state.get("gather_chunk") == CHUNK_LABELS else None
        lam_new, rho_new = cvb_update(block, params, lam, rho, mult, priors, exclude=True, layout=layout,
                                      order=order)
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
