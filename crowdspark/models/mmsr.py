"""M-MSR: worker reliabilities from a robust rank-one fit of the worker covariance (Ma & Olshevsky 2020;
crowd-kit's ``MMSR``).

Notation
--------
K workers, C classes, I items.  For workers k != l with ``n[k, l] > 0`` items in common, of which
``a[k, l]`` got the same label from both, the covariance is ``cov[k, l] = C / (C - 1) * a / n - 1 / (C - 1)``.
Under the one-coin model (worker k right with probability ``p_k``, uniformly wrong otherwise) it is
``s_k s_l`` with ``s_k = (C p_k - 1) / (C - 1)``: a rank-one matrix seen on the pairs that share items.

1. One pass over the data sums ``n`` and ``a`` (K x K, additive; every pair of labels of an item).
2. On the driver, M-MSR fits ``|cov| ~ u v^T`` by alternating trimmed means: ``v_l`` becomes the mean of
   ``|cov[k, l]| / u_k`` over the observed k after dropping up to ``F`` values on each side of the current
   ``v_l`` (values below ``v_l`` while there are fewer than ``F`` of them, else the ``F`` smallest; the same
   above), then ``u`` the same way over rows; a ratio with a zero denominator does not count.  ``F = floor(d / 2) - 1`` for the smallest number ``d`` of
   workers any worker shares items with (at least 0).  It stops when ``||u v^T - u' v'^T||_F < tol``.
3. ``|s| = u * sqrt(|v| / |u|)``; the signs are those of the leading eigenvector of ``cov`` (flipped so that
   most workers are better than chance), ``s`` is clipped to ``[-1 / (C - 1) + 1 / sqrt(I), 1 - 1 /
   sqrt(I)]``, and ``p = s (C - 1) / C + 1 / C``.
4. Each label of worker k weighs ``w_k = log(p_k (C - 1) / (1 - p_k))``, its log-likelihood ratio under the
   one-coin model; the posterior is ``softmax`` of the weighted votes (the one-coin posterior with uniform
   class proportions) and the answer its top class.

The M-MSR iterations read only the K x K covariance, so they run on the driver after the one data pass;
the fit loop sees a one-pass model, and the iterations and their last change are in ``summary.json``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from crowdspark.block import Block
from crowdspark.errors import ConfigError
from crowdspark.models.base import Footprint, ItemResult, Model, Preset, State
from crowdspark.models.common import fix_scores, incidence, normalize_log, worker_label_counts
from crowdspark.models.weighted_vote import check_ties, first_ties, pick_labels, weighted_scores
from crowdspark.stats import Stats
from crowdspark.validation import check_float, check_int

__all__ = ["Mmsr", "pair_counts", "msr_fit", "trimmed_means"]

log = logging.getLogger(__name__)


def pair_counts(block: Block, n_workers: int, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Items in common and agreements of every pair of workers in a block.

    A worker's repeated labels of an item count once in ``common``.

    Returns
    -------
    common : ndarray of float64, shape (K, K)
        ``common[k, l]`` items labelled by both k and l (0 on the diagonal).
    agree : ndarray of float64, shape (K, K)
        ``agree[k, l]`` of those items that k and l gave the same label (0 on the diagonal).
    """
    # a copy: sign() sums repeated entries in place, and the memoized matrix shares the block's read-only arrays
    by_label = incidence(block, n_workers, n_classes).copy().sign()  # (K * C, n)
    joint = (by_label @ by_label.T).tocoo()  # (K * C, K * C)
    same = (joint.row % n_classes) == (joint.col % n_classes)
    agree = np.zeros((n_workers, n_workers))
    np.add.at(agree, (joint.row[same] // n_classes, joint.col[same] // n_classes), joint.data[same])
    by_worker = sp.csr_matrix((np.ones(block.n_labels), (block.worker, block.item_of_label)),
                              shape=(n_workers, block.n_items)).sign()
    common = np.asarray((by_worker @ by_worker.T).todense(), dtype=np.float64)
    np.fill_diagonal(common, 0.0)
    np.fill_diagonal(agree, 0.0)
    return common, agree


def trimmed_means(ratios: np.ndarray, valid: np.ndarray, centre: np.ndarray, trim: int,
                  empty: float, total: np.ndarray | None = None, n_valid: np.ndarray | None = None) -> np.ndarray:
    """M-MSR's trimmed mean of every row of ``ratios`` around its current value.

    Parameters
    ----------
    ratios : ndarray of float64, shape (K, K)
        The values of each row (only ``valid`` ones count).
    valid : ndarray of bool, shape (K, K)
    centre : ndarray of float64, shape (K,)
        Each row's current value ``a``.
    trim : int
        ``F``: below ``a``, the values are dropped when fewer than ``F``, else the ``F`` smallest; the
        same above.
    empty : float
        The value of a row whose only kept value is 0.
    total : ndarray of float64, shape (K,), optional
        The sum of each row's valid values, when the caller has it.
    n_valid : ndarray of int, shape (K,), optional
        The number of each row's valid values, when the caller has it.

    Returns
    -------
    ndarray of float64, shape (K,)
        The mean of the kept values; ``centre`` where none is kept.
    """
    c = centre[:, None]
    # invalid values take their row's centre, neither below nor above it: one partition of each row then
    # holds its ``trim`` smallest and ``trim`` largest values, which are the dropped ones wherever at least
    # ``trim`` values lie on that side (the ``trim``-th smallest below the centre, the ``trim``-th largest above)
    padded = np.where(valid, ratios, c)
    if n_valid is None:
        n_valid = valid.sum(axis=1)
    if total is None:
        total = np.where(valid, ratios, 0.0).sum(axis=1)
    kept, kept_sum = n_valid, total
    if trim > 0:
        padded.partition((trim - 1, padded.shape[1] - trim), axis=1)  # a row's sums do not depend on its order
        ends = padded
        for side, rows, cut in ((np.less, ends[:, trim - 1] >= centre, ends[:, :trim]),
                                (np.greater, ends[:, -trim] <= centre, ends[:, -trim:])):
            dropped, n_dropped = cut.sum(axis=1), np.full(len(centre), trim)
            few = np.flatnonzero(rows)  # fewer than ``trim`` values on this side: all of them are dropped
            if few.size:
                beyond = side(padded[few], c[few])
                dropped[few] = np.where(beyond, padded[few], 0.0).sum(axis=1)
                n_dropped[few] = beyond.sum(axis=1)
            kept, kept_sum = kept - n_dropped, kept_sum - dropped
    out = np.divide(kept_sum, kept, out=centre.astype(np.float64, copy=True), where=kept > 0)
    lone_zero = (kept == 1) & (kept_sum == 0)
    out[lone_zero] = empty
    return out


def _half_step(X: np.ndarray, X_observed: np.ndarray, observed: np.ndarray, n_observed: np.ndarray,
               other: np.ndarray, centre: np.ndarray, trim: int, empty: float) -> np.ndarray:
    """One side of an M-MSR iteration: each row's trimmed mean of ``X[k, j] / other[j]`` over its observed
    pairs (``X_observed``: ``X`` with 0 where unobserved; ``n_observed``: observed pairs per row)."""
    ratios = X / other[None, :]
    if np.all(other > 0) and np.all(np.isfinite(other)):
        return trimmed_means(ratios, observed, centre, trim, empty, total=X_observed @ (1.0 / other),
                             n_valid=n_observed)
    return trimmed_means(ratios, observed & np.isfinite(ratios), centre, trim, empty)


def msr_fit(cov: np.ndarray, observed: np.ndarray, trim: int, n_items: int, max_iter: int,
            tol: float) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Alternating trimmed means for ``|cov| ~ u v^T`` on the observed pairs.

    Parameters
    ----------
    cov : ndarray of float64, shape (K, K)
    observed : ndarray of bool, shape (K, K)
    trim : int
        ``F`` of :func:`trimmed_means`.
    n_items : int
        I (a lone kept 0 becomes ``1 / sqrt(I)``).
    max_iter : int
    tol : float

    Returns
    -------
    u, v : ndarray of float64, shape (K,)
    n_iter : int
    change : float
        ``||u v^T - u' v'^T||_F`` of the last iteration.
    """
    X = np.abs(cov)
    sides = []
    for matrix, mask in ((np.ascontiguousarray(X.T), np.ascontiguousarray(observed.T)), (X, observed)):
        sides.append((matrix, np.where(mask, matrix, 0.0), mask, mask.sum(axis=1)))
    empty = 1.0 / np.sqrt(max(n_items, 1))
    u = np.ones(X.shape[0])
    v = np.ones(X.shape[0])
    change, n_iter = float("inf"), 0
    with np.errstate(divide="ignore", invalid="ignore"):
        for n_iter in range(1, max_iter + 1):
            u_prev, v_prev = u, v
            v = _half_step(*sides[0], u, v, trim, empty)
            u = _half_step(*sides[1], v, u, trim, empty)
            squared = (u @ u) * (v @ v) + (u_prev @ u_prev) * (v_prev @ v_prev) - 2 * (u @ u_prev) * (v @ v_prev)
            change = float(np.sqrt(max(squared, 0.0)))
            if change < tol:
                break
    return u, v, n_iter, change


def leading_signs(cov: np.ndarray) -> np.ndarray:
    """Signs (+1, -1, 0) of the leading eigenvector of ``cov`` (K,), most of them +1; 0 for a worker who
    shares no item with anyone."""
    from scipy.sparse.linalg import eigsh

    linked = np.any(cov != 0, axis=1)
    signs = np.zeros(cov.shape[0])
    if not linked.any():
        return signs
    sub = cov[np.ix_(linked, linked)]
    if sub.shape[0] < 3:
        _, vectors = np.linalg.eigh(sub)
        vector = vectors[:, -1]
    else:
        _, vectors = eigsh(sub, k=1, which="LA", v0=np.ones(sub.shape[0]))
        vector = vectors[:, 0]
    vector = np.where(vector >= 0, 1.0, -1.0)
    signs[linked] = vector if vector.sum() >= 0 else -vector
    return signs


@dataclass(frozen=True)
class Mmsr(Model):
    """M-MSR: each worker's reliability from a robust rank-one fit of the worker-pair covariance, then a
    vote weighted by each worker's one-coin log-likelihood ratio.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C.
    seed : int
        Seed of the tie-breaking draws.
    max_iter : int
        Largest number of M-MSR iterations (driver-side, over the K x K covariance).
    tol : float
        Stop when ``||u v^T - u' v'^T||_F`` falls below this.
    max_workers : int
        Largest K: the driver and every partition hold two K x K tables of float64 (K = 5000: 200 MB each).
    ties : str
        How ties between top scores are broken: ``"random"`` (a uniform draw from the seed and the item) or
        ``"first"`` (the first class in the class order, as crowd-kit does).
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    max_iter: int = 10000
    tol: float = 1e-10
    max_workers: int = 5000
    ties: str = "random"

    name: ClassVar[str] = "mmsr"
    title: ClassVar[str] = "M-MSR"
    api_name: ClassVar[str] = "MMSR"
    description: ClassVar[str] = (
        "worker reliabilities from a robust rank-one fit of the worker covariance (Ma & Olshevsky), then a "
        "weighted vote"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("mmsr.max_iter", self.max_iter, minimum=1)
        check_float("mmsr.tol", self.tol, minimum=0.0)
        check_int("mmsr.max_workers", self.max_workers, minimum=2)
        check_ties(self.name, self.ties)
        if self.n_workers > self.max_workers:
            raise ConfigError(
                f"mmsr keeps two K x K tables of worker pairs, but the labels have K = {self.n_workers} workers, "
                f"more than mmsr.max_workers = {self.max_workers} ({8 * self.n_workers ** 2 / 2**20:.0f} MiB per "
                "table); raise mmsr.max_workers if the driver and the executors have the memory, or choose "
                "another algorithm"
            )

    def footprint(self) -> Footprint:
        """Two K x K tables of worker pairs (counts and agreements; the covariance and the mask of observed pairs
        beside them on the driver) and the vote scores (n, C) of a block."""
        k, c = self.n_workers, self.n_classes
        return Footprint(params=4 * k * k, item=c, state=0, label=0, largest=(("workers", k), ("workers", k)))

    def init_block(self, block: Block) -> tuple[State, Stats]:
        common, agree = pair_counts(block, self.n_workers, self.n_classes)
        return None, {
            "common": common,
            "agree": agree,
            "labels": worker_label_counts(block, self.n_workers),
            "items": np.array(float(block.n_items)),
        }

    def covariance(self, common: np.ndarray, agree: np.ndarray) -> np.ndarray:
        """``cov[k, l] = C / (C - 1) * agree / common - 1 / (C - 1)`` where ``common > 0``, else 0 (K, K)."""
        C = max(self.n_classes, 2)
        share = np.divide(agree, common, out=np.zeros_like(common), where=common > 0)
        return np.where(common > 0, C / (C - 1) * share - 1 / (C - 1), 0.0)

    def init_params(self, stats: Stats) -> dict[str, Any]:
        C = max(self.n_classes, 2)
        n_items = int(stats["items"])
        observed = stats["common"] > 0
        cov = self.covariance(stats["common"], stats["agree"])
        degree = observed.sum(axis=0)
        trim = max(int(degree.min(initial=0)) // 2 - 1, 0) if degree.size else 0
        u, v, n_iter, change = msr_fit(cov, observed, trim, n_items, self.max_iter, self.tol)
        if change >= self.tol:
            log.warning("mmsr: M-MSR stopped at max_iter=%d with change %.3g >= tol %g; increase mmsr.max_iter",
                        self.max_iter, change, self.tol)
        norm_u, norm_v = np.linalg.norm(u), np.linalg.norm(v)
        scale = np.sqrt(norm_u / norm_v) if norm_u > 0 and norm_v > 0 else 1.0
        s = leading_signs(cov) * (u / scale)
        floor = 1.0 / np.sqrt(max(n_items, 1))
        s = np.clip(s, -1.0 / (C - 1) + floor, 1.0 - floor)
        accuracy = s * (C - 1) / C + 1.0 / C
        return {
            "skill": np.log(accuracy * (C - 1) / (1.0 - accuracy)),
            "accuracy": accuracy,
            "labels": stats["labels"],
            "msr_iterations": np.array(float(n_iter)),
            "msr_change": np.array(change),
            "trim": np.array(float(trim)),
        }

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        scores = weighted_scores(block, params["skill"], self.n_classes)
        posterior, _ = normalize_log(fix_scores(block, scores.copy()), axis=1)
        return ItemResult(posterior=posterior, label=pick_labels(block, scores, self.seed, self.ties))

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        """``n_labels``, ``accuracy`` (the estimated probability of a right label, ``p_k``) and ``skill``
        (the weight of the worker's labels, ``log(p_k (C - 1) / (1 - p_k))``)."""
        return {"n_labels": params["labels"].round().astype(np.int64), "accuracy": params["accuracy"],
                "skill": params["skill"]}

    def summary(self, params: Any) -> dict[str, Any]:
        return {"msr_iterations": int(params["msr_iterations"]), "msr_change": float(params["msr_change"]),
                "msr_trim": int(params["trim"]), "msr_converged": bool(params["msr_change"] < self.tol)}



Mmsr.presets = {"crowd-kit": Preset(first_ties)}
