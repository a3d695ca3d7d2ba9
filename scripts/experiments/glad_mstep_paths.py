"""Which GLAD M-step makes crowd-kit's stopping rule stop where crowd-kit's GLAD stops (experiment, not library code).

    .venv/bin/python scripts/experiments/glad_mstep_paths.py music_genre web_search web_search_filtered cf

EM on the whole dataset in numpy (crowd-kit's model, priors and start), with crowd-kit's rule (stop at the
first iteration t >= 2 whose objective, the expected complete log-likelihood with the log priors over m C,
rises by less than 1e-5) and these M-steps from the previous point, for the posteriors of the E-step:

- ``rounds r``: crowdspark's, ``r`` times 3 Fisher-scoring steps per ``beta`` and one Newton step per
  ``alpha`` (``glad.m_step_rounds``);
- ``cg``: Polak-Ribiere conjugate gradients over all of ``alpha`` and ``beta`` (at most 25 steps, stop when
  no gradient entry exceeds 1e-2: crowd-kit's settings), each line search two Newton steps on the step length
  with the analytic first and second derivatives along the direction (sums over labels: additive), the step
  halved while the objective does not decrease;
- ``scipy cg``: crowd-kit's own M-step (``scipy.optimize.minimize(method="CG")``, the same settings).

Printed per dataset and M-step: the iteration the rule stops at and the agreement with crowd-kit's labels on
the items untied in both posteriors (crowd-kit's results from ``benchmarks.catalogue``'s cache, else fitted);
then the steps and the evaluations of the objective with its gradient of scipy's M-steps (each would be a
pass over the data on the engine), and the largest entry of the gradient where crowd-kit's first M-step ends
(0 at the M-step's optimum).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.catalogue import agreement, load, theirs  # noqa: E402


class Crowd:
    """One dataset's labels as index arrays, in crowd-kit's worker, task and class orders."""

    def __init__(self, labels: pd.DataFrame, classes: pd.Index) -> None:
        self.workers, self.tasks = pd.Index(pd.unique(labels["worker"])), pd.Index(pd.unique(labels["item"]))
        self.classes = classes
        self.w = self.workers.get_indexer(labels["worker"])
        self.i = self.tasks.get_indexer(labels["item"])
        self.c = classes.get_indexer(labels["label"])
        self.K, self.n, self.C, self.m = len(self.workers), len(self.tasks), len(classes), len(labels)

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x[: self.K], x[self.K:]

    def logs(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = a[self.w] * np.exp(b[self.i])
        return -np.logaddexp(0.0, -z), -np.logaddexp(0.0, z) - np.log(self.C - 1)

    def posterior(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        right, wrong = self.logs(a, b)
        scores = np.zeros((self.n, self.C))
        np.add.at(scores, (self.i, slice(None)), wrong[:, None])
        np.add.at(scores, (self.i, self.c), right - wrong)
        scores -= scores.max(axis=1, keepdims=True)
        p = np.exp(scores)
        return p / p.sum(axis=1, keepdims=True)

    def loss(self, x: np.ndarray, p: np.ndarray) -> float:
        """Minus the expected complete log-likelihood with the log priors (constants left out)."""
        a, b = self.split(x)
        right, wrong = self.logs(a, b)
        return -float(np.sum(p * right + (1 - p) * wrong) - 0.5 * np.sum((a - 1) ** 2) - 0.5 * np.sum((b - 1) ** 2))

    def gradient(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        a, b = self.split(x)
        e = np.exp(b[self.i])
        r = p - 1 / (1 + np.exp(-a[self.w] * e))
        return -np.concatenate([np.bincount(self.w, r * e, self.K) - (a - 1),
                                np.bincount(self.i, r * a[self.w] * e, self.n) - (b - 1)])

    def along(self, x: np.ndarray, d: np.ndarray, p: np.ndarray) -> tuple[float, float]:
        """First and second derivatives of :meth:`loss` along ``d`` at ``x``."""
        a, b = self.split(x)
        da, db = self.split(d)
        e = np.exp(b[self.i])
        z = a[self.w] * e
        s = 1 / (1 + np.exp(-z))
        dz = e * (da[self.w] + a[self.w] * db[self.i])
        ddz = e * (2 * da[self.w] * db[self.i] + a[self.w] * db[self.i] ** 2)
        first = -np.sum((p - s) * dz) + (a - 1) @ da + (b - 1) @ db
        second = np.sum(s * (1 - s) * dz ** 2 - (p - s) * ddz) + da @ da + db @ db
        return float(first), float(second)

    def objective(self, x: np.ndarray, q: np.ndarray) -> float:
        """crowd-kit's: over m C, with the priors' constants."""
        return (-self.loss(x, q[self.i, self.c]) - 0.5 * np.log(2 * np.pi) * (self.K + self.n)) / (self.m * self.C)


def rounds_step(crowd: Crowd, x: np.ndarray, p: np.ndarray, r: int) -> np.ndarray:
    a, b = crowd.split(x.copy())
    for _ in range(r):
        for _ in range(3):
            ax = a[crowd.w] * np.exp(b[crowd.i])
            s = 1 / (1 + np.exp(-ax))
            g = np.bincount(crowd.i, ax * (p - s), crowd.n) - (b - 1)
            h = np.bincount(crowd.i, ax * ax * s * (1 - s), crowd.n) + 1
            b = b + np.clip(g / h, -1, 1)
        e = np.exp(b[crowd.i])
        s = 1 / (1 + np.exp(-a[crowd.w] * e))
        g = np.bincount(crowd.w, e * (p - s), crowd.K) - (a - 1)
        h = np.bincount(crowd.w, e * e * s * (1 - s), crowd.K) + 1
        a = a + np.clip(g / h, -2, 2)
    return np.concatenate([a, b])


def cg_step(crowd: Crowd, x: np.ndarray, p: np.ndarray, steps: int = 25, gtol: float = 1e-2) -> np.ndarray:
    g = crowd.gradient(x, p)
    d = -g
    for _ in range(steps):
        if np.abs(g).max() < gtol:
            break
        t = 0.0
        for _ in range(2):
            first, second = crowd.along(x + t * d, d, p)
            t = t - first / second if second > 0 else t + 1e-3
        start = crowd.loss(x, p)
        while crowd.loss(x + t * d, p) > start and abs(t) > 1e-12:
            t /= 2
        x = x + t * d
        new = crowd.gradient(x, p)
        d = -new + max(0.0, (new - g) @ new / (g @ g)) * d
        g = new
    return x


#: (steps, evaluations of the objective and its gradient) of every scipy M-step run
SCIPY_COUNTS: list[tuple[int, int]] = []


def scipy_step(crowd: Crowd, x: np.ndarray, p: np.ndarray) -> np.ndarray:
    result = minimize(crowd.loss, x, args=(p,), method="CG", jac=crowd.gradient, tol=1e-2, options={"maxiter": 25})
    SCIPY_COUNTS.append((result.nit, result.nfev))
    return result.x


def fit(crowd: Crowd, m_step, tol: float = 1e-5, max_iter: int = 100) -> tuple[int, pd.DataFrame]:
    x = np.ones(crowd.K + crowd.n)
    last = -np.inf
    for t in range(1, max_iter + 1):
        q = crowd.posterior(*crowd.split(x))
        x = m_step(crowd, x, q[crowd.i, crowd.c])
        objective = crowd.objective(x, q)
        if objective - last < tol:
            break
        last = objective
    return t, pd.DataFrame(q, index=crowd.tasks, columns=crowd.classes)


def main(names: list[str]) -> None:
    steps = {"rounds 1": lambda c, x, p: rounds_step(c, x, p, 1), "rounds 4": lambda c, x, p: rounds_step(c, x, p, 4),
             "cg": cg_step, "scipy cg": scipy_step}
    for name in names:
        labels, _ = load(name)
        ck = theirs("glad", labels)
        crowd = Crowd(labels, ck["probas"].columns)
        cells = []
        SCIPY_COUNTS.clear()
        for step_name, step in steps.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                stop, probas = fit(crowd, step)
            ours = {"labels": probas.idxmax(axis=1), "probas": probas}
            cells.append(f"{step_name}: stops at {stop}, {agreement(ours, ck):.2f}%")
        steps_run, evaluations = zip(*SCIPY_COUNTS)
        cells.append(f"scipy's M-steps: {min(steps_run)}-{max(steps_run)} steps, "
                     f"{min(evaluations)}-{max(evaluations)} evaluations each")
        start = np.ones(crowd.K + crowd.n)
        first = crowd.posterior(*crowd.split(start))[crowd.i, crowd.c]
        cells.append(f"largest gradient entry after scipy's first M-step: "
                     f"{np.abs(crowd.gradient(scipy_step(crowd, start, first), first)).max():.2f}")
        print(f"{name}: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
