"""The methods a reproduction fits: a registered algorithm with a parameter set.

A method key is ``<algorithm>`` (crowdspark's defaults), ``<algorithm>:<preset>`` (e.g. ``idbla:paper``,
``preset="paper"``) or ``<algorithm>:random-init`` (``init="random"``, the initialization ablation of the
paper's Table 3).  The algorithms and presets come from :mod:`crowdspark.models.registry` at run time, so models
registered later are included and absent ones are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crowdspark.models.registry import PRESETS, algorithm_names, hyperparameters
from crowdspark.errors import ConfigError

__all__ = [
    "ABLATION_ALGORITHMS",
    "CURVE_ALGORITHMS",
    "PAPER_LEVEL_MODELS",
    "QUICK_PARAMS",
    "PRESET_SEP",
    "RANDOM_INIT",
    "Method",
    "variant_of",
    "parse_methods",
    "default_methods",
    "run_params",
]

#: the paper's Table 3 models; ablated when registered
ABLATION_ALGORITHMS = ("idbla", "fixed-idbla")
#: models whose iteration curves make Figure 2 (when registered)
CURVE_ALGORITHMS = ("idbla-cvb", "idbla-cvb0")
#: the paper's models with difficulty levels (the level claim of 5.3.4 is about these)
PAPER_LEVEL_MODELS = ("idbla", "fixed-idbla", *CURVE_ALGORITHMS)
#: parameters that shorten a run with ``--quick``; applied only to algorithms that have them
QUICK_PARAMS: dict[str, int] = {"burn_in": 5, "n_samples": 10, "max_iter": 20}

PRESET_SEP = ":"
RANDOM_INIT = "random-init"


def variant_of(key: str) -> str:
    """The variant of a method key: ``""`` for the defaults, else the part after ``:``."""
    return key.partition(PRESET_SEP)[2]


@dataclass(frozen=True)
class Method:
    """A registered algorithm with a parameter set.

    Attributes
    ----------
    key : str
        ``<algorithm>``, ``<algorithm>:paper`` (a preset) or ``<algorithm>:random-init``.
    algorithm : str
    params : mapping
        Parameters passed to the algorithm (``preset``, ``init``).
    """

    key: str
    algorithm: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def variant(self) -> str:
        """``""`` for the defaults, else the part after ``:``."""
        return variant_of(self.key)


def _method(key: str) -> Method:
    algorithm, _, variant = key.partition(PRESET_SEP)
    if algorithm not in algorithm_names():
        raise ConfigError(f"method algorithm must be one of {algorithm_names()}, but got {algorithm!r} in {key!r}")
    if not variant:
        return Method(key, algorithm)
    if variant == RANDOM_INIT:
        if "init" not in hyperparameters(algorithm):
            raise ConfigError(f"{key}: algorithm {algorithm!r} has no 'init' parameter to ablate")
        return Method(key, algorithm, {"init": "random"})
    if algorithm in PRESETS.get(variant, {}):
        return Method(key, algorithm, {"preset": variant})
    known = sorted([p for p, makers in PRESETS.items() if algorithm in makers] + [RANDOM_INIT])
    raise ConfigError(f"variant of {algorithm!r} must be one of {known}, but got {variant!r}")


def parse_methods(keys: Iterable[str]) -> list[Method]:
    """Methods from keys such as ``mv``, ``idbla:paper``, ``fixed-idbla:random-init``.

    Raises
    ------
    ConfigError
        An unregistered algorithm, an unknown preset, or ``random-init`` of a model without ``init``.
    """
    return [_method(k.strip()) for k in keys if k.strip()]


def default_methods(ablation: bool = True) -> list[Method]:
    """Every registered algorithm, then its paper preset(s), then the initialization ablation."""
    names = algorithm_names()
    keys = list(names)
    keys += [f"{a}{PRESET_SEP}{p}" for p, makers in PRESETS.items() for a in names if a in makers]
    if ablation:
        keys += [f"{a}{PRESET_SEP}{RANDOM_INIT}" for a in ABLATION_ALGORITHMS if a in names]
    return parse_methods(keys)


def run_params(method: Method, quick: bool) -> dict[str, Any]:
    """The parameters of one run: the method's, plus :data:`QUICK_PARAMS` the algorithm knows."""
    params = dict(method.params)
    if quick:
        known = hyperparameters(method.algorithm)
        params.update({k: v for k, v in QUICK_PARAMS.items() if k in known})
    return params
