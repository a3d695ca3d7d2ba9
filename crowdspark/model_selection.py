"""Choosing the number of difficulty levels H of the IDBLA family.

Notation: H levels, ``L`` the labels, ``pi, alpha, beta`` the posterior means over kept samples,
``(T, Q)`` the sampled assignment, ``m`` the number of labels.  For each H in a range the model is fitted
(with :func:`crowdspark.engine.loop.fit`, so any engine works) and three criteria are computed:

* ``paper``: the paper's ``log p(L | pi, T, Q)`` (section 5.2), averaged over the kept sweeps.  It grows
  with H almost always (more confusion matrices fit the labels better), so it is not the default.
* ``bic``: ``-2 log p(L | pi, alpha, beta) + n_params * log(m)`` with T and Q summed out per item
  (lower is better); ``n_params`` counts the learned confusion rows, alpha and beta.
* ``aic``: ``-2 log p(L | pi, alpha, beta) + 2 n_params`` (lower is better).
* ``collapsed_raw``: ``log p(L, T, Q)`` with pi, alpha, beta integrated out (paper eq. 14) at the last
  sweep's counts.  As an estimate of ``log p(L)`` it is biased against H > 1: a single sampled (T, Q)
  pays up to ``log H`` per item for level assignments that are uncertain.
* ``collapsed``: ``collapsed_raw`` plus the entropy of the items' posteriors over (T, Q) at the posterior
  means, an ELBO-type estimate of ``log p(L)`` (higher is better).  It pays for extra levels through
  the Dirichlet normalizers.

The default criterion is ``aic``.  Measured on planted two-level data (``tests/test_model_selection.py``,
``docs/idbla_gibbs.md``): ``log p(L | pi, alpha, beta)`` peaks at the planted H and then flattens, the
paper's criterion keeps growing, and BIC's penalty (``K * C * (C - 1) * log m`` per level) is so large
that it always picks H = 1 when K is large; AIC keeps the penalty small enough to see a real second
level and still never grows without bound.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from crowdspark.block import Block
from crowdspark.engine.base import Engine
from crowdspark.engine.loop import fit
from crowdspark.models.base import Model, State
from crowdspark.models.common import normalize_log
from crowdspark.stats import Stats
from crowdspark.validation import check_choice

__all__ = ["CRITERIA", "LevelChoice", "choose_levels", "evidence_fn"]

log = logging.getLogger(__name__)

#: criterion -> whether larger is better
CRITERIA = {"aic": False, "bic": False, "collapsed": True, "collapsed_raw": True, "paper": True}


@dataclass(frozen=True)
class LevelChoice:
    """Result of :func:`choose_levels`.

    Attributes
    ----------
    table : list of dict
        One row per H: ``n_levels``, ``paper``, ``log_evidence``, ``aic``, ``bic``, ``collapsed``,
        ``collapsed_raw``, ``n_params``, ``level_sizes``.
    chosen : int
        The selected H.
    criterion : str
    """

    table: list[dict[str, Any]] = field(default_factory=list)
    chosen: int = 1
    criterion: str = "aic"


def evidence_fn(model: Any, block: Block, state: State, params: Any) -> tuple[State, Stats]:
    """Block function: ``log p(L_i | pi, alpha, beta)`` and the entropy of p(T_i, Q_i | L_i, pi, alpha, beta)
    summed over the block, at the posterior means.

    ``state`` is returned unchanged (use with ``stateful=False``).
    """
    table = model.joint_log_table(block, model.log_tables(**model.final_params(params)))
    n = table.shape[0]
    probs, log_evidence = normalize_log(table.reshape(n, -1), axis=1)
    entropy = -(probs * np.log(np.maximum(probs, 1e-300))).sum()
    return state, {"log_evidence": np.array(float(log_evidence.sum())), "entropy": np.array(float(entropy))}


def _row(model: Any, engine: Engine) -> dict[str, Any]:
    result = fit(model, engine)
    params = result.params
    kept = [h["loglik"] for h in result.history if model.is_kept(int(h["iteration"]))]
    paper = float(np.mean(kept)) if kept else float(result.history[-1]["loglik"])
    stats = engine.map_reduce(partial(evidence_fn, model), params, stateful=False)
    log_evidence = float(stats["log_evidence"])
    n_params = int(model.n_free_parameters())
    n_labels = float(result.counts["n_labels"])
    collapsed_raw = float(model.collapsed_log_marginal(params))
    return {
        "n_levels": int(model.n_levels),
        "paper": paper,
        "log_evidence": log_evidence,
        "aic": -2.0 * log_evidence + 2.0 * n_params,
        "bic": -2.0 * log_evidence + n_params * math.log(max(n_labels, 1.0)),
        "collapsed_raw": collapsed_raw,
        "collapsed": collapsed_raw + float(stats["entropy"]),
        "n_params": n_params,
        "level_sizes": model.summary(params)["level_sizes"],
    }


def choose_levels(
    make: Callable[[int], Model],
    engine: Engine,
    levels: Iterable[int] = (1, 2, 3, 4),
    criterion: str = "aic",
) -> LevelChoice:
    """Fit ``make(h)`` for each ``h`` in ``levels`` and pick H by ``criterion``.

    Parameters
    ----------
    make : callable
        ``make(h)`` returns an IDBLA-family model (:class:`~crowdspark.models.idbla_gibbs.IdblaGibbs` or
        a subclass) with ``n_levels = h``.
    engine : Engine
        Holds the blocks; only :func:`~crowdspark.engine.loop.fit` and ``engine.map_reduce`` are used.
    levels : iterable of int
        Candidate H values.
    criterion : {"aic", "bic", "collapsed", "collapsed_raw", "paper"}

    Returns
    -------
    LevelChoice
    """
    check_choice("criterion", criterion, list(CRITERIA))
    levels = [int(h) for h in levels]
    if not levels:
        raise ValueError("levels must not be empty")
    table = []
    for h in levels:
        row = _row(make(h), engine)
        log.info("H=%d: paper %.1f, bic %.1f, collapsed %.1f", h, row["paper"], row["bic"], row["collapsed"])
        table.append(row)
    values = np.array([row[criterion] for row in table])
    best = int(np.argmax(values) if CRITERIA[criterion] else np.argmin(values))
    return LevelChoice(table=table, chosen=table[best]["n_levels"], criterion=criterion)
