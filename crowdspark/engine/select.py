"""Choosing the number of difficulty levels H of any :class:`~crowdspark.models.base.LevelModel`.

For each candidate H the model is fitted with the one fit loop on the engine that holds the blocks, and the
model's additive evidence at the fitted parameters is summed over the blocks
(:meth:`~crowdspark.models.base.LevelModel.evidence_block`).  With ``m`` labels, ``p`` free parameters
(:meth:`~crowdspark.models.base.LevelModel.n_free_parameters`), ``log p(L | params)`` the labels' log
likelihood with every item's latent variables summed out, and ``E`` the summed entropy of the items'
posteriors over those latent variables:

* ``aic`` = ``-2 log p(L | params) + 2 p``;
* ``bic`` = ``-2 log p(L | params) + p log m``;
* ``icl`` = ``bic + 2 E``, the integrated completed likelihood (Biernacki, Celeux & Govaert 2000): it also
  charges levels that do not separate the items clearly.

All three are lower-is-better.  A model may add its own criteria (``extra_level_criteria``, e.g. the IDBLA
paper's ``log p(L | pi, T, Q)``), computed by its ``level_row``.  Ties go to the first candidate.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from crowdspark.engine.base import Engine
from crowdspark.engine.loop import FitResult, fit
from crowdspark.errors import ConfigError
from crowdspark.models.base import LevelModel, State
from crowdspark.stats import Stats
from crowdspark.validation import check_choice, check_int

__all__ = ["LevelChoice", "LevelPlan", "criteria", "choose_levels", "level_plan"]

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class LevelChoice:
    """The result of :func:`choose_levels`.

    Attributes
    ----------
    table : list of dict
        One row per candidate H: ``n_levels``, ``log_evidence``, ``n_params``, ``aic``, ``bic``, ``icl``,
        ``n_iter``, ``converged`` and the model's own columns (``level_row``).
    chosen : int
        The selected H.
    criterion : str
    fits : dict of int to FitResult
        Each candidate's fit (its ``warnings`` are those the fit raised), by H.
    """

    table: list[dict[str, Any]] = field(default_factory=list)
    chosen: int = 1
    criterion: str = "aic"
    fits: dict[int, FitResult] = field(default_factory=dict, repr=False, compare=False)


def criteria(model: LevelModel) -> dict[str, bool]:
    """Every criterion ``model`` can be chosen by: name -> whether larger is better."""
    return type(model).level_criteria()


def _evidence(model: LevelModel, block, state: State, params: Any) -> tuple[State, Stats]:
    return state, model.evidence_block(block, params)


def level_row(model: LevelModel, engine: Engine) -> tuple[dict[str, Any], FitResult]:
    """Fit ``model`` on ``engine`` and return its row of the selection table and the fit.

    The fit's warnings go to ``FitResult.warnings`` and on to the caller's filters.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fit(model, engine)
    result.warnings = [str(w.message) for w in caught]
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    evidence = engine.map_reduce(partial(_evidence, model), result.params, stateful=False)
    log_evidence = float(evidence["log_evidence"])
    n_params = int(model.n_free_parameters())
    bic = -2.0 * log_evidence + n_params * math.log(max(float(result.counts["n_labels"]), 1.0))
    row: dict[str, Any] = {
        "n_levels": int(model.n_levels),
        "log_evidence": log_evidence,
        "n_params": n_params,
        "aic": -2.0 * log_evidence + 2.0 * n_params,
        "bic": bic,
        "icl": bic + 2.0 * float(evidence["entropy"]),
        "n_iter": result.n_iter,
        "converged": result.converged,
    }
    row.update(model.level_row(result.params, result.history, evidence))
    return row, result


def choose_levels(
    make: Callable[[int], LevelModel],
    engine: Engine,
    levels: Iterable[int],
    criterion: str | None = None,
) -> LevelChoice:
    """Fit ``make(h)`` for each ``h`` in ``levels`` and keep the best H by ``criterion``.

    Parameters
    ----------
    make : callable
        ``make(h)`` returns the level model with ``n_levels = h``.
    engine : Engine
        Holds the blocks; only the fit loop and ``engine.map_reduce`` are used, so every engine gives the
        same choice.
    levels : iterable of int
        Candidate H values (each >= 1).
    criterion : str, optional
        One of :func:`criteria`; default: the model's ``default_level_criterion``.

    Returns
    -------
    LevelChoice

    Raises
    ------
    ConfigError
        For no candidates, a candidate below 1, or a criterion the model does not have.
    """
    candidates = [check_int("select_levels", h, minimum=1) for h in levels]
    if not candidates:
        raise ConfigError("select_levels must list at least one number of levels, but got []")
    models = [make(h) for h in candidates]
    if not all(isinstance(model, LevelModel) for model in models):
        raise ConfigError(f"{models[0].name} has no difficulty levels to choose; remove select_levels")
    directions = criteria(models[0])
    criterion = check_choice("level_criterion", criterion or type(models[0]).default_level_criterion,
                             list(directions))
    table, fits = [], {}
    for model in models:
        row, fits[int(model.n_levels)] = level_row(model, engine)
        log.info("%s H=%d: log evidence %.1f, %s %.1f", model.name, model.n_levels, row["log_evidence"],
                 criterion, row[criterion])
        table.append(row)
    values = np.array([row[criterion] for row in table])
    best = int(np.argmax(values) if directions[criterion] else np.argmin(values))
    return LevelChoice(table=table, chosen=int(table[best]["n_levels"]), criterion=criterion, fits=fits)


@dataclass(frozen=True)
class LevelPlan:
    """What a configured run does about H (see :func:`level_plan`).

    Attributes
    ----------
    params : dict
        The algorithm's parameters without the selection keys (``n_levels`` set when a warm start fixes it).
    candidates : tuple of int, optional
        The H values to choose among; ``None``: no choice, H is ``params``' (or the default).
    criterion : str, optional
        The criterion of the choice (``None``: the model's default).
    """

    params: dict[str, Any]
    candidates: tuple[int, ...] | None = None
    criterion: str | None = None


def level_plan(cls: type, params: dict[str, Any], warm_parameters: dict[str, Any] | None = None) -> LevelPlan:
    """Whether and among which H a run of model class ``cls`` chooses.

    ``select_levels`` (and ``level_criterion``) in ``params`` ask for a choice; else a preset that names
    candidates (``preset = "paper"``) implies its own; else a model with ``auto_levels`` chooses among them
    unless ``n_levels`` is set or a warm start fixes H to the previous run's (``warm_parameters``: a
    different H would refuse the warm start).

    Raises
    ------
    ConfigError
        Selection keys for a model without levels, or malformed candidates.
    """
    params = dict(params)
    name = getattr(cls, "name", "model")
    candidates = params.pop("select_levels", None)
    criterion = params.pop("level_criterion", None)
    if not issubclass(cls, LevelModel):
        if candidates is not None or criterion is not None:
            raise ConfigError(f"{name}.select_levels applies only to models with difficulty levels; remove it")
        return LevelPlan(params)
    preset = cls.presets.get(params.get("preset"))
    if candidates is None and preset is not None and preset.select_levels:
        candidates, criterion = preset.select_levels, criterion or preset.level_criterion
    if candidates is None and "n_levels" not in params and cls.auto_levels:
        if warm_parameters and "n_levels" in warm_parameters:
            params["n_levels"] = warm_parameters["n_levels"]
            log.info("%s: H = %d, as in the warm-start model", name, params["n_levels"])
        else:
            candidates = cls.auto_levels
    if candidates is None and criterion is None:
        return LevelPlan(params)
    if candidates is None:
        raise ConfigError(f"{name}.level_criterion needs {name}.select_levels, the numbers of levels to compare")
    if not isinstance(candidates, (list, tuple)) or not candidates:
        raise ConfigError(f"{name}.select_levels must be a list of integers >= 1, but got {candidates!r}")
    return LevelPlan(params, tuple(check_int(f"{name}.select_levels", h, minimum=1) for h in candidates),
                     criterion)
