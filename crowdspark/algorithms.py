"""The registry from an algorithm's command-line name to its model class.

A model class is a frozen dataclass whose fields are ``n_workers``, ``n_classes``, ``seed`` (set from the
data and the run) and its hyperparameters; the hyperparameters are the keys of the algorithm's
configuration section (``[ds]``, ``[mv]`` ...).  ``build_model`` rejects unknown keys, listing the known
ones, and the model's own ``__post_init__`` checks the values.
"""

from __future__ import annotations

from dataclasses import MISSING, fields, replace
from typing import Any

from crowdspark.errors import ConfigError
from crowdspark.models.base import Model
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.models.difficulty_ds import DifficultyDawidSkene
from crowdspark.models.idbla_cvb import IdblaCvb, IdblaCvb0
from crowdspark.models.idbla_gibbs import Bcc, FixedIdbla, IdblaGibbs
from crowdspark.models.majority_vote import MajorityVote

__all__ = ["ALGORITHMS", "PRESETS", "register", "algorithm_names", "algorithm_class", "hyperparameters", "build_model"]

_DATA_FIELDS = ("n_workers", "n_classes", "seed")

ALGORITHMS: dict[str, type[Model]] = {}


def register(name: str, cls: type[Model]) -> None:
    """Make ``cls`` available as ``--algorithm name``."""
    ALGORITHMS[name] = cls


register("mv", MajorityVote)
register("ds", DawidSkene)
register("bcc", Bcc)
register("idbla", IdblaGibbs)
register("fixed-idbla", FixedIdbla)
register("idbla-cvb", IdblaCvb)
register("idbla-cvb0", IdblaCvb0)
register("dds", DifficultyDawidSkene)

#: named parameter sets (``--set <algorithm>.preset=<name>``): preset name -> algorithm -> Preset
PRESETS: dict[str, dict[str, Any]] = {}
for _name, _cls in ALGORITHMS.items():
    for _preset, _value in _cls.presets.items():
        PRESETS.setdefault(_preset, {})[_name] = _value



def algorithm_names() -> list[str]:
    return list(ALGORITHMS)


def algorithm_class(name: str) -> type[Model]:
    """The model class of algorithm ``name``."""
    return _lookup(name)


def _lookup(name: str) -> type[Model]:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ConfigError(f"algorithm must be one of {algorithm_names()}, but got {name!r}") from None


def hyperparameters(name: str) -> dict[str, Any]:
    """The configurable parameters of algorithm ``name`` with their defaults."""
    out = {}
    for f in fields(_lookup(name)):
        if f.name in _DATA_FIELDS:
            continue
        out[f.name] = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    return out


def build_model(name: str, params: dict[str, Any], n_workers: int, n_classes: int, seed: int) -> Model:
    """Construct the model for a run.

    Parameters
    ----------
    name : str
        Algorithm name (``--algorithm``).
    params : dict
        The algorithm's configuration section.
    n_workers, n_classes, seed : int

    Raises
    ------
    ConfigError
        Unknown algorithm, unknown key, or an invalid value.
    """
    cls = _lookup(name)
    params = dict(params)
    preset = params.pop("preset", None)
    known = hyperparameters(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown parameter(s) {', '.join(f'{name}.{k}' for k in unknown)} for algorithm {name!r}; "
            f"known: {', '.join(sorted(known)) or '(none)'}"
        )
    model = cls(n_workers=n_workers, n_classes=n_classes, seed=seed, **params)
    if preset is not None:
        if preset not in cls.presets:
            raise ConfigError(f"{name}.preset must be one of {sorted(cls.presets)}, but got {preset!r}")
        # the preset sets its values; explicit parameters given next to it still win
        model = replace(cls.presets[preset].apply(model), **params)
    return model
