"""Prototype (issue 5, an alternative design): difficulty as a temperature on every worker's log-probabilities.

Usage: ``python scripts/experiments/difficulty_temper.py rte,temp,bluebird,web_search,web_search_filtered,syn0
[--min-base-share 0.5]`` (``synN`` = ``paper_synthetic(N)``).

Model: worker k has one matrix ``B[k] = softmax(theta[k])``; at level h it labels with
``pi[k, h, t, :] = softmax(tau[h] * theta[k, t, :])``, ``tau[0] = 1 >= tau[1] >= ...`` (a harder level flattens
every worker's log-odds by the same factor, which keeps each worker's biases instead of mixing towards
uniform as ``dds`` does).  MAP EM from majority vote, smoothing 0.5 as DS; the M-step for ``theta`` is a few
diagonal Newton steps per row (it is not closed-form), ``tau`` by 1-D Newton steps.  ``--min-base-share b``
constrains ``beta[0] >= b`` (the untempered level holds at least that share of the items; the constrained
M-step sets ``beta[0] = b`` and shares the rest in proportion when the free one is below), a test of
whether anchoring the base level removes the non-identified direction.  Prints DS's error and
the prototype's, with the fitted ``tau`` and ``beta``.  Experiment code on the project's kernels
(``label_loglik``, ``confusion_counts``), local only; not part of the library.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from functools import partial
from pathlib import Path

import numpy as np
from scipy.special import logsumexp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from difficulty_eval import load, synthetic_blocks  # noqa: E402

from crowdspark.block import Block  # noqa: E402
from crowdspark.engine.local import LocalEngine  # noqa: E402
from crowdspark.engine.loop import finish_fn, fit  # noqa: E402
from crowdspark.models.common import confusion_counts, label_loglik, normalize_log, vote_counts  # noqa: E402
from crowdspark.models.dawid_skene import DawidSkene  # noqa: E402


def log_pi_of(theta: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """``log softmax(tau[h] * theta[k, t])``, shape (K, H, C, C), from theta (K, C, C) and tau (H,)."""
    z = tau[None, :, None, None] * theta[:, None]
    return z - logsumexp(z, axis=-1, keepdims=True)


def m_step_theta(theta: np.ndarray, N: np.ndarray, tau: np.ndarray, s: float, steps: int = 20) -> np.ndarray:
    """Diagonal Newton ascent on ``sum N log pi + s sum log B`` per row; N is (K, H, C, C)."""
    C = theta.shape[-1]
    Nh = N.sum(-1, keepdims=True)
    for _ in range(steps):
        p = np.exp(log_pi_of(theta, tau))
        B = np.exp(theta - logsumexp(theta, -1, keepdims=True))
        grad = (tau[None, :, None, None] * (N - Nh * p)).sum(1) + s - s * C * B
        hess = (tau[None, :, None, None] ** 2 * Nh * p * (1 - p)).sum(1) + s * C * B * (1 - B) + 1e-9
        theta = theta + np.clip(grad / hess, -2, 2)
    return theta


def m_step_tau(theta: np.ndarray, N: np.ndarray, tau: np.ndarray, steps: int = 20) -> np.ndarray:
    """1-D Newton steps on each ``tau[h]``, h >= 1, clipped to [0, 1]; returned in decreasing order."""
    tau = tau.copy()
    for h in range(1, len(tau)):
        Nh = N[:, h].sum(-1, keepdims=True)
        for _ in range(steps):
            z = tau[h] * theta
            p = np.exp(z - logsumexp(z, -1, keepdims=True))
            mean = (p * theta).sum(-1, keepdims=True)
            d1 = (N[:, h] * theta).sum() - (Nh * mean).sum()
            d2 = -(Nh * ((p * theta**2).sum(-1, keepdims=True) - mean**2)).sum() - 1e-9
            tau[h] = float(np.clip(tau[h] - d1 / d2, 0.0, 1.0))
    return np.sort(tau)[::-1]


def e_step(blocks: list[Block], log_pi: np.ndarray, alpha: np.ndarray, beta: np.ndarray, K: int, C: int):
    """Summed counts (K, H, C, C), class and level weights, and log p(L)."""
    H = beta.shape[0]
    N, classes, levels, loglik = 0.0, 0.0, 0.0, 0.0
    for b in blocks:
        table = label_loglik(b, log_pi) + np.log(alpha)[None, None, :] + np.log(beta)[None, :, None]
        r, log_evidence = normalize_log(table.reshape(b.n_items, H * C), axis=1)
        r = r.reshape(b.n_items, H, C)
        N = N + confusion_counts(b, r, K, C)
        classes = classes + r.sum((0, 1))
        levels = levels + r.sum((0, 2))
        loglik += float(log_evidence.sum())
    return N, classes, levels, loglik


def fit_temper(blocks: list[Block], K: int, C: int, H: int = 2, s: float = 0.5, iters: int = 200,
               tau_init: float = 0.5, min_base_share: float = 0.0):
    """MAP EM from majority vote; returns (error %, tau, beta, iterations)."""
    shares = [vote_counts(b, C) / vote_counts(b, C).sum(1, keepdims=True) for b in blocks]
    N1 = sum(confusion_counts(b, r, K, C) for b, r in zip(blocks, shares))
    classes = sum(r.sum(0) for r in shares)
    theta = np.log((N1 + s) / (N1 + s).sum(-1, keepdims=True))
    alpha = (classes + s) / (classes + s).sum()
    beta = np.full(H, 1.0 / H)
    tau = np.linspace(1.0, tau_init, H)
    previous = -np.inf
    for it in range(iters):
        N, classes, levels, loglik = e_step(blocks, log_pi_of(theta, tau), alpha, beta, K, C)
        theta = m_step_theta(theta, N, tau, s)
        tau = m_step_tau(theta, N, tau)
        alpha = (classes + s) / (classes + s).sum()
        beta = (levels + s) / (levels + s).sum()
        if beta[0] < min_base_share:
            rest = levels[1:] + s
            beta = np.concatenate([[min_base_share], (1.0 - min_base_share) * rest / rest.sum()])
        if abs(loglik - previous) < 1e-6 * abs(loglik):
            break
        previous = loglik
    log_pi = log_pi_of(theta, tau)
    errors = n_gold = 0
    for b in blocks:
        table = label_loglik(b, log_pi) + np.log(alpha)[None, None, :] + np.log(beta)[None, :, None]
        posterior = np.exp(table - logsumexp(table, axis=(1, 2), keepdims=True)).sum(1)
        gold = b.truth >= 0
        errors += int((posterior.argmax(1)[gold] != b.truth[gold]).sum())
        n_gold += int(gold.sum())
    return 100.0 * errors / n_gold, tau, beta, it


def ds_error(blocks: list[Block], K: int, C: int) -> float:
    model = DawidSkene(K, C)
    engine = LocalEngine(blocks)
    result = fit(model, engine)
    errors = n_gold = 0
    for b, r in engine.map_items(partial(finish_fn, model), result.params):
        gold = b.truth >= 0
        errors += int((r.label[gold] != b.truth[gold]).sum())
        n_gold += int(gold.sum())
    return 100.0 * errors / n_gold


def main(names: list[str], min_base_share: float = 0.0) -> None:
    warnings.simplefilter("ignore")
    for name in names:
        blocks, K, C = synthetic_blocks(int(name[3:])) if name.startswith("syn") else load(name)
        ds = ds_error(blocks, K, C)
        error, tau, beta, iterations = fit_temper(blocks, K, C, min_base_share=min_base_share)
        print(f"{name}: ds {ds:.2f} temper H=2 {error:.2f} ({error - ds:+.2f}) tau {np.round(tau, 3)} "
              f"beta {np.round(beta, 3)} iterations {iterations}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", default="rte,temp,bluebird")
    ap.add_argument("--min-base-share", type=float, default=0.0)
    args = ap.parse_args()
    main(args.data.split(","), args.min_base_share)
