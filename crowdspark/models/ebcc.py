"""EBCC, enhanced Bayesian classifier combination (Li, Rubinstein & Cohn, "Exploiting Worker Correlation for
Label Aggregation in Crowdsourcing", ICML 2019).

Notation
--------
K workers, C classes, M subtypes per class (``n_subtypes``), R restarts (``n_restarts``); in a block n items.
Every item has a true class ``T_i`` and a subtype ``G_i`` of it; items of one subtype share how every worker
errs on them, which is how EBCC models workers whose errors are correlated.

* ``tau ~ Dirichlet(alpha)``: the class proportions (C,).  ``alpha`` is the setting, or with
  ``empirical_prior`` the items' summed majority-vote shares.
* ``pi[t] ~ Dirichlet(a_pi / M)``: the subtype proportions of class t (M,).
* ``V[k, g, t] ~ Dirichlet(beta[t])``: worker k's label distribution on items of class t and subtype g (C,),
  with ``beta[t, c] = a_v`` for ``c = t`` and ``b_v`` elsewhere.
* ``(T_i, G_i) ~ tau[t] pi[t, g]``, and every label of item i by worker k ``~ Categorical(V[k, G_i, T_i])``.

Mean-field variational inference
--------------------------------
``q(T_i, G_i) = r[i, g, t]`` per item and Dirichlet posteriors ``q(tau) = Dir(nu)``, ``q(pi[t]) =
Dir(eta[:, t])``, ``q(V[k, g, t]) = Dir(lam[k, g, t])``.  A sweep is one round of coordinate ascent:

* blocks: ``log r[i, g, t] = E log tau[t] + E log pi[t, g] + sum over i's labels (k, c) of E log V[k, g, t, c]``
  + const (``E log`` of a Dirichlet is a difference of digammas), normalized over (g, t) per item; they add
  the counts ``sum_i r[i, g, t]`` (M, C), per worker ``sum over k's labels c of r[i, g, t]`` (K, M, C, C),
  and the entropy of ``r``;
* driver: ``nu = alpha + sum_g counts``, ``eta = a_pi / M + counts``, ``lam = beta + worker counts``.

With every posterior Dirichlet its optimum given ``r``, the evidence lower bound is ``H(r) + sum over the
Dirichlets of (log B(posterior) - log B(prior))`` (``B`` the multivariate beta function): the objective, per
label, after each sweep.  Coordinate ascent never lowers it.

Restarts
--------
The fit starts from ``r[i, g, t] = z[i, t] w[i, g, t]``, ``z`` the majority-vote shares and ``w[i, :, t]`` a
``Dirichlet(1)`` draw keyed by (seed, restart, item) (:mod:`crowdspark.rng`), followed by the driver's update.
R restarts run side by side (their statistics carry a leading restart axis); a restart stops, and keeps its
parameters, once its bound moved by less than ``tol`` per label; the fit stops when all have.  The answer is
the restart with the largest bound (the first of equals): its posterior over the true class ``sum_g r[i, g,
t]`` at its final parameters; ties between top classes are broken at random.  Items with gold in the fit have
``T_i`` observed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy.special import digamma, entr, gammaln

from crowdspark.block import Block
from crowdspark.models.base import Footprint, ItemResult, Model, Schedule, State, Update
from crowdspark.models.common import (
    argmax_random_ties,
    confusion_counts,
    fix_scores,
    label_loglik,
    normalize_log,
    tie_uniforms,
    vote_counts,
    worker_label_counts,
)
from crowdspark.rng import uniforms
from crowdspark.stats import Stats
from crowdspark.validation import check_bool, check_float, check_int

__all__ = ["Ebcc", "dirichlet_expected_log", "log_beta"]

#: the most cells of the per-item tables a block makes at once (restarts beyond them wait for the next group)
_CHUNK_CELLS = 1 << 20
#: the sweep number of the start's draws (sweeps of the fit count from 1; 0 is the final tie-break's)
_START_SWEEP = -1


def dirichlet_expected_log(concentration: np.ndarray) -> np.ndarray:
    """``E log theta`` under ``Dirichlet(concentration)`` along the last axis (same shape)."""
    return digamma(concentration) - digamma(concentration.sum(axis=-1, keepdims=True))


def log_beta(concentration: np.ndarray) -> np.ndarray:
    """The log multivariate beta function along the last axis (shape without it)."""
    return gammaln(concentration).sum(axis=-1) - gammaln(concentration.sum(axis=-1))


@dataclass(frozen=True)
class Ebcc(Model):
    """EBCC: subtypes of every class, a confusion matrix per worker and subtype; mean-field VI, best of R
    restarts.

    Parameters
    ----------
    n_workers, n_classes : int
        K and C.
    seed : int
        Seed of the restarts' starting draws and of the tie-breaking draws of the final labels.
    n_subtypes : int
        M, the subtypes of every class.
    n_restarts : int
        R, the restarts; the answer is the one with the largest evidence lower bound.
    max_iter : int
        Largest number of sweeps.
    tol : float
        A restart stops when its evidence lower bound per label changes by less than this.
    a_pi : float
        ``a_pi`` > 0: the subtype proportions of a class have a ``Dirichlet(a_pi / M)`` prior.
    alpha : float
        Pseudo-count of every class in the ``Dirichlet(alpha)`` prior of the class proportions (unless
        ``empirical_prior``).
    empirical_prior : bool
        The class prior's pseudo-counts are the items' summed majority-vote shares (the paper's setting).
    a_v, b_v : float
        The prior pseudo-counts of a worker's right label (``a_v``) and of each wrong one (``b_v``) on every
        class and subtype.
    """

    n_workers: int
    n_classes: int
    seed: int = 0
    n_subtypes: int = 10
    n_restarts: int = 20
    max_iter: int = 500
    tol: float = 1e-5
    a_pi: float = 0.1
    alpha: float = 1.0
    empirical_prior: bool = True
    a_v: float = 4.0
    b_v: float = 1.0

    name: ClassVar[str] = "ebcc"
    title: ClassVar[str] = "enhanced Bayesian classifier combination"
    api_name: ClassVar[str] = "EBCC"
    description: ClassVar[str] = (
        "subtypes of every class with a confusion matrix per worker and subtype, for correlated workers; "
        "mean-field VI, best of several restarts (EBCC, ICML 2019)"
    )
    random_fit: ClassVar[bool] = True
    param_domains: ClassVar[dict[str, tuple[str, str]]] = {
        "nu": ("positive", "*C"), "eta": ("positive", "**C"), "lam": ("positive", "K***C"), "best": ("index", ""),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(f"{self.name}.n_subtypes", self.n_subtypes, minimum=1)
        check_int(f"{self.name}.n_restarts", self.n_restarts, minimum=1)
        check_int(f"{self.name}.max_iter", self.max_iter, minimum=1)
        check_float(f"{self.name}.tol", self.tol, minimum=0.0)
        check_float(f"{self.name}.a_pi", self.a_pi, minimum=0.0, strict_min=True)
        check_float(f"{self.name}.alpha", self.alpha, minimum=0.0, strict_min=True)
        check_bool(f"{self.name}.empirical_prior", self.empirical_prior)
        check_float(f"{self.name}.a_v", self.a_v, minimum=0.0, strict_min=True)
        check_float(f"{self.name}.b_v", self.b_v, minimum=0.0, strict_min=True)

    @property
    def schedule(self) -> Schedule:
        return Schedule(max_sweeps=self.max_iter, tol=self.tol)

    def footprint(self) -> Footprint:
        """The Dirichlet posteriors and expected logs of every restart, (K, R, M, C, C) twice; per item, one
        restart's (M, C) tables (a sweep makes the restarts' in groups of at most :data:`_CHUNK_CELLS` cells,
        one restart when a block has more items than that)."""
        k, r, m, c = self.n_workers, self.n_restarts, self.n_subtypes, self.n_classes
        return Footprint(params=2 * k * r * m * c * c + 2 * r * m * c, item=m * c,
                         largest=(("workers", k), ("restarts", r), ("subtypes", m), ("classes", c), ("classes", c)))

    # -- priors --------------------------------------------------------------------------------------------

    def _beta(self) -> np.ndarray:
        """``beta[t, c]``, (C, C)."""
        return np.where(np.eye(self.n_classes, dtype=bool), self.a_v, self.b_v)

    def _posteriors(self, stats: Stats, alpha: np.ndarray) -> dict[str, np.ndarray]:
        """The Dirichlet posteriors from the counts of every restart: ``nu`` (R, C), ``eta`` (R, M, C), ``lam``
        (K, R, M, C, C)."""
        subtypes = stats["subtypes"]
        return {"nu": alpha + subtypes.sum(axis=1), "eta": self.a_pi / self.n_subtypes + subtypes,
                "lam": self._beta() + stats["counts"]}

    def _bound(self, post: dict[str, np.ndarray], alpha: np.ndarray, entropy: np.ndarray) -> np.ndarray:
        """The evidence lower bound of every restart, (R,)."""
        m = self.n_subtypes
        eta_prior = log_beta(np.full(m, self.a_pi / m))
        lam_prior = log_beta(self._beta())  # (C,)
        return (entropy + log_beta(post["nu"]) - log_beta(alpha)
                + (log_beta(np.moveaxis(post["eta"], 1, 2)) - eta_prior).sum(axis=1)
                + (log_beta(post["lam"]) - lam_prior).sum(axis=(0, 2, 3)))

    @staticmethod
    def _expected_logs(post: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"log_tau": dirichlet_expected_log(post["nu"]),
                "log_pi": dirichlet_expected_log(np.moveaxis(post["eta"], 1, 2)).swapaxes(1, 2),
                "log_v": dirichlet_expected_log(post["lam"])}

    # -- kernels -------------------------------------------------------------------------------------------

    def _start(self, block: Block, restart: int, shares: np.ndarray) -> np.ndarray:
        """The start of one restart: ``z[i, t] w[i, g, t]``, (n, M, C)."""
        m, c = self.n_subtypes, self.n_classes
        draws = np.empty((block.n_items, m, c))
        for g in range(m):
            for t in range(c):
                u = uniforms(self.seed, _START_SWEEP, block.item_keys, (restart * c + t) * m + g)
                draws[:, g, t] = -np.log1p(-u)  # Exponential(1): normalized over g, a Dirichlet(1) draw
        return draws / draws.sum(axis=1, keepdims=True) * shares[:, None, :]

    def _chunks(self, n_items: int, restarts: np.ndarray) -> list[np.ndarray]:
        """``restarts`` in groups whose per-item tables, (n, r, M, C), hold at most :data:`_CHUNK_CELLS` cells
        (one restart at least)."""
        size = max(1, _CHUNK_CELLS // max(1, n_items * self.n_subtypes * self.n_classes))
        return [restarts[i:i + size] for i in range(0, len(restarts), size)]

    def _stack(self, block: Block, restarts: np.ndarray,
               responsibilities: Callable[[np.ndarray], np.ndarray]) -> Stats:
        """``counts`` (K, R, M, C, C), ``subtypes`` (R, M, C) and ``entropy`` (R,) of the responsibilities of
        ``restarts``, ``responsibilities(chunk)`` (n, r, M, C) made a chunk of restarts at a time (zeros for
        the other restarts)."""
        k, r, m, c = self.n_workers, self.n_restarts, self.n_subtypes, self.n_classes
        counts, subtypes, entropy = np.zeros((k, r, m, c, c)), np.zeros((r, m, c)), np.zeros(r)
        for chunk in self._chunks(block.n_items, restarts):
            resp = responsibilities(chunk)
            counts[:, chunk] = confusion_counts(block, resp, k, c)
            subtypes[chunk] = resp.sum(axis=0)
            entropy[chunk] = entr(resp).sum(axis=(0, 2, 3))
        return {"counts": counts, "subtypes": subtypes, "entropy": entropy}

    def init_block(self, block: Block) -> tuple[State, Stats]:
        votes = vote_counts(block, self.n_classes)
        shares = fix_scores(block, votes / np.maximum(votes.sum(axis=1, keepdims=True), 1.0), log=False)
        stats = self._stack(block, np.arange(self.n_restarts),
                            lambda chunk: np.stack([self._start(block, r, shares) for r in chunk], axis=1))
        del stats["entropy"]
        stats["votes"] = shares.sum(axis=0)
        stats["labels"] = worker_label_counts(block, self.n_workers)
        return None, stats

    def init_params(self, stats: Stats) -> dict[str, Any]:
        alpha = stats["votes"] if self.empirical_prior else np.full(self.n_classes, self.alpha)
        alpha = np.maximum(alpha, np.finfo(np.float64).tiny)  # a class no item votes for keeps a proper prior
        post = self._posteriors(stats, alpha)
        return {**post, **self._expected_logs(post), "alpha": alpha, "n_labels": float(stats["labels"].sum()),
                "bound": np.full(self.n_restarts, -np.inf), "active": np.ones(self.n_restarts),
                "best": np.array(0)}

    def step_params(self, params: Any) -> Any:
        return {key: params[key] for key in ("log_tau", "log_pi", "log_v", "active")}

    def _responsibilities(self, block: Block, log_tau: np.ndarray, log_pi: np.ndarray,
                          log_v: np.ndarray) -> np.ndarray:
        """``r`` of r restarts, (n, r, M, C), from their expected logs (r, C), (r, M, C), (K, r, M, C, C)."""
        scores = log_tau[:, None, :] + log_pi + label_loglik(block, log_v)
        return normalize_log(fix_scores(block, scores), axis=(2, 3))[0]

    def local_step(self, block: Block, state: State, params: Any, sweep: int) -> tuple[State, Stats]:
        def responsibilities(chunk: np.ndarray) -> np.ndarray:
            return self._responsibilities(block, params["log_tau"][chunk], params["log_pi"][chunk],
                                          params["log_v"][:, chunk])

        return None, self._stack(block, np.flatnonzero(params["active"]), responsibilities)

    def global_step(self, stats: Stats, params: Any, sweep: int) -> Update:
        active = params["active"] > 0
        post = self._posteriors(stats, params["alpha"])
        bound = np.where(active, self._bound(post, params["alpha"], stats["entropy"]), params["bound"])
        with np.errstate(invalid="ignore"):  # the first sweep's bounds move from -inf
            moved = np.abs(bound - params["bound"]) / max(params["n_labels"], 1.0)
        moved = np.where(np.isnan(moved), np.inf, moved)
        new = dict(params)
        for key in ("nu", "eta"):
            new[key] = np.where(active.reshape((-1,) + (1,) * (post[key].ndim - 1)), post[key], params[key])
        new["lam"] = np.where(active[None, :, None, None, None], post["lam"], params["lam"])
        new.update(self._expected_logs(new))
        change = float(moved[active].max()) if active.any() else 0.0
        new["bound"] = bound
        new["active"] = (active & (moved >= self.tol)).astype(np.float64)
        new["best"] = np.array(int(np.argmax(bound)))
        objective = float(bound.max() / max(params["n_labels"], 1.0))
        return Update(params=new, objective=objective, change=change,
                      extra={"restarts_running": float(new["active"].sum())})

    def class_posterior(self, block: Block, params: Any) -> np.ndarray:
        """The best restart's posterior over every item's true class, (n, C)."""
        b = int(params["best"])
        logs = self._expected_logs({"nu": params["nu"][b:b + 1], "eta": params["eta"][b:b + 1],
                                    "lam": params["lam"][:, b:b + 1]})
        return self._responsibilities(block, logs["log_tau"], logs["log_pi"], logs["log_v"]).sum(axis=(1, 2))

    def finish_block(self, block: Block, state: State, params: Any) -> ItemResult:
        posterior = self.class_posterior(block, params)
        return ItemResult(posterior=posterior, label=argmax_random_ties(posterior, tie_uniforms(block, self.seed)))

    def worker_table(self, params: Any, init_stats: Stats) -> dict[str, np.ndarray]:
        """``n_labels``; ``confusion`` (K, C, C), ``sum_g E pi[t, g] E V[k, g, t]`` of the best restart;
        ``accuracy``, its diagonal weighted by ``E tau``."""
        b = int(params["best"])
        eta = params["eta"][b]
        subtype_share = eta / eta.sum(axis=0, keepdims=True)  # (M, C)
        lam = params["lam"][:, b]
        confusion = np.einsum("gt,kgtc->ktc", subtype_share, lam / lam.sum(axis=-1, keepdims=True))
        tau = params["nu"][b] / params["nu"][b].sum()
        return {"n_labels": init_stats["labels"].round().astype(np.int64), "confusion": confusion,
                "accuracy": np.einsum("t,ktt->k", tau, confusion)}

    def export_params(self, params: Any) -> dict[str, np.ndarray]:
        """The best restart's posteriors (a restart axis of length 1), what :meth:`finish_block` reads."""
        b = int(params["best"])
        return {"nu": params["nu"][b:b + 1], "eta": params["eta"][b:b + 1], "lam": params["lam"][:, b:b + 1],
                "best": np.array(0)}

    def summary(self, params: Any) -> dict[str, Any]:
        b = int(params["best"])
        n_labels = max(params["n_labels"], 1.0)
        return {"best_restart": b, "bounds_per_label": (params["bound"] / n_labels).tolist(),
                "class_proportions": (params["nu"][b] / params["nu"][b].sum()).tolist()}
