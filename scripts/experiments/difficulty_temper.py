"""Prototype of a rejected alternative to ``dds``: difficulty as a temperature on every worker's log-probabilities
(results in ``docs/difficulty_model.md``, "Alternatives tried").

Usage: ``python scripts/experiments/difficulty_temper.py rte,temp,bluebird,web_search,web_search_filtered,syn0``
(``synN`` = ``paper_synthetic(N)``).

Model: worker k has one matrix ``B[k] = softmax(theta[k])``; at level h it labels with
``pi[k, h, t, :] = softmax(tau[h] * theta[k, t, :])``, ``tau[0] = 1 >= tau[1] >= ...`` (a harder level flattens
every worker's log-odds by the same factor, which keeps each worker's biases instead of mixing towards
uniform as ``dds`` does).  MAP EM from majority vote, smoothing 0.5 and stopping rule as DS; the M-step for
``theta`` is Newton steps per row with step halving (it is not closed-form), ``tau`` by 1-D Newton steps.
H = 1 is Dawid-Skene (same numbers); each dataset is fitted with H = 1 and H = 2 and BIC picks.  Prints DS's
error and the prototype's, with the fitted ``tau`` and ``beta`` (H = 2) and BIC's choice.  Experiment code on
the project's kernels (``label_loglik``, ``confusion_counts``), local only; not part of the library.
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


def row_objective(theta: np.ndarray, N: np.ndarray, tau: np.ndarray, s: float) -> np.ndarray:
    """``sum_h N[k, h, t] . log pi[k, h, t] + s sum_c log B[k, t, c]`` per row, shape (K, C)."""
    log_B = theta - logsumexp(theta, -1, keepdims=True)
    return (N * log_pi_of(theta, tau)).sum((1, 3)) + s * log_B.sum(-1)


def m_step_theta(theta: np.ndarray, N: np.ndarray, tau: np.ndarray, s: float, steps: int = 10) -> np.ndarray:
    """Newton ascent on ``row_objective`` (concave in each row of theta), one full (C, C) Hessian per row,
    with per-row step halving so that no row's objective decreases; N is (K, H, C, C).

    A row's objective is invariant to adding a constant to the row, so the Hessian is singular along the
    ones vector: ``ones / C`` times a positive scale is added to it and the step is centred.  A diagonal
    Newton step ignores that direction, overshoots and oscillates on a softmax without converging (its H = 1
    fit is then not Dawid-Skene; ``docs/difficulty_model.md``, "Alternatives tried").
    """
    C = theta.shape[-1]
    eye = np.eye(C)
    weight = tau[None, :, None, None] ** 2 * N.sum(-1, keepdims=True)  # (K, H, C, 1)
    for _ in range(steps):
        p = np.exp(log_pi_of(theta, tau))
        B = np.exp(theta - logsumexp(theta, -1, keepdims=True))
        grad = (tau[None, :, None, None] * (N - N.sum(-1, keepdims=True) * p)).sum(1) + s - s * C * B
        if np.abs(grad).max() < 1e-9:
            break
        hess = (weight * p).sum(1)[..., None] * eye - np.einsum("khtc,khtd->ktcd", weight * p, p)
        hess += s * C * (B[..., None] * eye - B[..., :, None] * B[..., None, :])
        hess += (1.0 + np.trace(hess, axis1=-2, axis2=-1))[..., None, None] / C
        step = np.linalg.solve(hess, grad[..., None])[..., 0]
        step -= step.mean(-1, keepdims=True)
        before = row_objective(theta, N, tau, s)
        size = np.ones(theta.shape[:2])
        for _ in range(40):
            better = row_objective(theta + size[..., None] * step, N, tau, s) >= before
            if better.all():
                break
            size = np.where(better, size, size / 2)
        theta = theta + np.where(better, size, 0.0)[..., None] * step
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


def fit_temper(blocks: list[Block], K: int, C: int, H: int = 2, s: float = 0.5, iters: int = 300,
               tau_init: float = 0.5, tol: float = 1e-6):
    """MAP EM from majority vote, stopped when the log posterior per label changes by less than ``tol``
    (as DS).  Returns (error %, BIC, tau, beta, iterations); H = 1 is Dawid-Skene."""
    shares = [vote_counts(b, C) / vote_counts(b, C).sum(1, keepdims=True) for b in blocks]
    N1 = sum(confusion_counts(b, r, K, C) for b, r in zip(blocks, shares))
    classes = sum(r.sum(0) for r in shares)
    theta = np.log((N1 + s) / (N1 + s).sum(-1, keepdims=True))
    alpha = (classes + s) / (classes + s).sum()
    beta = np.full(H, 1.0 / H)
    tau = np.linspace(1.0, tau_init, H)
    n_labels = sum(b.n_labels for b in blocks)
    previous = -np.inf
    for it in range(iters):
        N, classes, levels, loglik = e_step(blocks, log_pi_of(theta, tau), alpha, beta, K, C)
        log_B = theta - logsumexp(theta, -1, keepdims=True)
        objective = (loglik + s * (log_B.sum() + np.log(alpha).sum() + np.log(beta).sum())) / n_labels
        if abs(objective - previous) < tol:
            break
        previous = objective
        theta = m_step_theta(theta, N, tau, s)
        if H > 1:
            tau = m_step_tau(theta, N, tau)
        alpha = (classes + s) / (classes + s).sum()
        beta = (levels + s) / (levels + s).sum()
    log_pi = log_pi_of(theta, tau)
    errors = n_gold = 0
    log_evidence = 0.0
    for b in blocks:
        table = label_loglik(b, log_pi) + np.log(alpha)[None, None, :] + np.log(beta)[None, :, None]
        log_evidence += float(logsumexp(table, axis=(1, 2)).sum())
        posterior = np.exp(table - logsumexp(table, axis=(1, 2), keepdims=True)).sum(1)
        gold = b.truth >= 0
        errors += int((posterior.argmax(1)[gold] != b.truth[gold]).sum())
        n_gold += int(gold.sum())
    n_params = K * C * (C - 1) + (C - 1) + 2 * (H - 1)
    bic = -2.0 * log_evidence + n_params * np.log(n_labels)
    return 100.0 * errors / n_gold, bic, tau, beta, it


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


def main(names: list[str]) -> None:
    warnings.simplefilter("ignore")
    for name in names:
        blocks, K, C = synthetic_blocks(int(name[3:])) if name.startswith("syn") else load(name)
        ds = ds_error(blocks, K, C)
        one, two = (fit_temper(blocks, K, C, H=h) for h in (1, 2))
        pick = one if one[1] <= two[1] else two
        print(f"{name}: ds {ds:.2f} | H=1 {one[0]:.2f} (BIC {one[1]:.0f}) | H=2 {two[0]:.2f} ({two[0] - ds:+.2f}, "
              f"BIC {two[1]:.0f}) tau {np.round(two[2], 3)} beta {np.round(two[3], 3)} iterations {two[4]} | "
              f"BIC picks H={1 if pick is one else 2}: {pick[0] - ds:+.2f}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", default="rte,temp,bluebird")
    args = ap.parse_args()
    main(args.data.split(","))
