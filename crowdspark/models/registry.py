"""The registry of aggregation models: what every face of crowdspark reads to offer an algorithm.

:data:`MODELS` lists the model classes, in the order the faces list them; an algorithm's name is its class's
``name``.  Registering a model there makes it appear in the command line (``--algorithm``, ``crowdspark
algorithms``), the configuration (its ``[<name>]`` section, whose keys are the class's fields), the pandas API
(a class named ``api_name``), the pyspark.ml face (``<api_name>Aggregator``), warm starts and saved models,
and the conformance tests (``tests/test_conformance.py``).  ``docs/adding_a_model.md`` shows the whole recipe.

A model class is a frozen dataclass whose fields are ``n_workers``, ``n_classes``, ``seed`` (set from the
data and the run) and its hyperparameters; the hyperparameters, and the :data:`RUN_KEYS`, are the keys of
the algorithm's configuration section (``[ds]``, ``[mv]`` ...).  :func:`check_params` rejects unknown
keys, listing the known ones, and brings the values to the model's declared types; the model's own
``__post_init__`` checks them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, fields, replace
from typing import Any

from crowdspark.docstrings import field_docs
from crowdspark.errors import ConfigError
from crowdspark.faces import display_key, field_name
from crowdspark.models.base import RUN_BOUNDS, LevelModel, Model
from crowdspark.models.adaptive_ds import AdaptiveDawidSkene
from crowdspark.models.bwa import Bwa
from crowdspark.models.dawid_skene import DawidSkene
from crowdspark.models.difficulty_ds import DifficultyDawidSkene
from crowdspark.models.ebcc import Ebcc
from crowdspark.models.glad import Glad
from crowdspark.models.gold_majority_vote import GoldMajorityVote
from crowdspark.models.idbla_cvb import IdblaCvb, IdblaCvb0
from crowdspark.models.idbla_gibbs import Bcc, FixedIdbla, IdblaGibbs
from crowdspark.models.majority_vote import MajorityVote
from crowdspark.models.kos import Kos
from crowdspark.models.mace import Mace
from crowdspark.models.mmsr import Mmsr
from crowdspark.models.one_coin import OneCoinDawidSkene
from crowdspark.models.wawa import Wawa
from crowdspark.models.zero_based_skill import ZeroBasedSkill
from crowdspark.validation import check_at_most, check_choice, check_int, did_you_mean

__all__ = ["MODELS", "ALGORITHMS", "PRESETS", "RUN_KEYS", "register", "algorithm_names", "hyperparameters",
           "model_class", "check_params", "build_model", "model_parameters", "describe"]

_DATA_FIELDS = ("n_workers", "n_classes", "seed")

#: keys of a section that are not model fields: a named parameter set, and how the run chooses H (models
#: with levels only; see :func:`crowdspark.pipeline.fit.fit_configured`)
RUN_KEYS = ("preset", "select_levels", "level_criterion")

#: every registered model class, in the order the faces list them
MODELS: tuple[type[Model], ...] = (
    MajorityVote,
    DawidSkene,
    Bcc,
    IdblaGibbs,
    FixedIdbla,
    IdblaCvb,
    IdblaCvb0,
    DifficultyDawidSkene,
    OneCoinDawidSkene,
    AdaptiveDawidSkene,
    Wawa,
    ZeroBasedSkill,
    Kos,
    Mmsr,
    GoldMajorityVote,
    Glad,
    Mace,
    Ebcc,
    Bwa,
)

#: algorithm name -> model class
ALGORITHMS: dict[str, type[Model]] = {}


def register(cls: type[Model]) -> type[Model]:
    """Make ``cls`` available as ``--algorithm <cls.name>`` (and in every other face)."""
    if not cls.name or cls.name in ALGORITHMS or not cls.api_name:
        raise ValueError(f"a model needs a new name and an api_name to be registered, but {cls.__name__} has "
                         f"name {cls.name!r} and api_name {cls.api_name!r}")
    ALGORITHMS[cls.name] = cls
    return cls


for _cls in MODELS:
    register(_cls)


#: named parameter sets (``--set <algorithm>.preset=<name>``): preset name -> algorithm -> Preset
PRESETS: dict[str, dict[str, Any]] = {}
for _name, _cls in ALGORITHMS.items():
    for _preset, _value in _cls.presets.items():
        PRESETS.setdefault(_preset, {})[_name] = _value


def algorithm_names() -> list[str]:
    return list(ALGORITHMS)


def model_class(name: str) -> type[Model]:
    """The model class registered as ``name``, or ConfigError listing the names."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ConfigError(
            f"algorithm must be one of {algorithm_names()}, but got {name!r}{did_you_mean(str(name), ALGORITHMS)}"
        ) from None


def hyperparameters(name: str) -> dict[str, Any]:
    """The configurable parameters of algorithm ``name`` with their defaults."""
    out = {}
    for f in fields(model_class(name)):
        if f.name in _DATA_FIELDS:
            continue
        out[f.name] = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    return out


def describe(name: str) -> dict[str, Any]:
    """What the faces say about algorithm ``name``: title, description, class names, and every parameter with
    its default and documentation (``crowdspark algorithms`` prints this)."""
    cls = model_class(name)
    docs = field_docs(cls)
    parameters = {key: {"default": value, "doc": docs.get(key, "")} for key, value in hyperparameters(name).items()}
    if getattr(cls, "auto_levels", ()):  # H is chosen at run time unless it is set
        parameters["n_levels"]["default"] = (f"chosen among {list(cls.auto_levels)} by "
                                             f"{cls.default_level_criterion.upper()} unless set")
    return {
        "title": cls.title,
        "description": cls.description,
        "python": {"pandas": f"crowdspark.api.{cls.api_name}", "pyspark.ml": f"crowdspark.ml.{cls.api_name}Aggregator"},
        "presets": sorted(cls.presets),
        "parameters": parameters,
    }


def model_parameters(model: Model) -> dict[str, Any]:
    """Every hyperparameter of a built model, with its ``seed`` (what ``summary.json`` and a saved model
    record)."""
    return {f.name: getattr(model, f.name) for f in fields(model) if f.name not in ("n_workers", "n_classes")}


def _check_run_keys(name: str, params: dict[str, Any], known: dict[str, Any]) -> None:
    """Check (and coerce in place) ``preset``, ``select_levels`` and ``level_criterion``."""
    for key in ("select_levels", "level_criterion"):
        if key in params and not issubclass(model_class(name), LevelModel):
            raise ConfigError(f"{name}.{key} applies only to models with difficulty levels; remove it")
    if "select_levels" in params:
        levels = params["select_levels"]
        message = f"{name}.select_levels must be a list of integers >= 1, but got {levels!r}"
        if not isinstance(levels, (list, tuple)) or not levels:
            raise ConfigError(message)
        try:
            params["select_levels"] = [check_int(f"{name}.select_levels", h, minimum=1) for h in levels]
        except ConfigError:
            raise ConfigError(message) from None
        maximum, why = RUN_BOUNDS["n_levels"]
        for h in params["select_levels"]:
            check_at_most(f"{name}.select_levels", h, maximum, why)
    if "level_criterion" in params:
        check_choice(f"{name}.level_criterion", params["level_criterion"], list(model_class(name).level_criteria()))
    if "preset" in params:
        available = sorted(model_class(name).presets)
        if not available:
            raise ConfigError(f"{name} has no presets, but got {name}.preset = {params['preset']!r}; remove it")
        check_choice(f"{name}.preset", params["preset"], available)


def check_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration section ``[name]``, checked, with its values in the model's declared types.

    Every key must be a hyperparameter of the model or one of :data:`RUN_KEYS`.  The values are coerced
    and checked by the model's own ``__post_init__`` (on a placeholder problem of one worker and two
    classes, whose checks do not depend on the data), so an ``int`` parameter given ``1e9`` comes back as
    ``1000000000`` and ``2.5`` is an error; ``select_levels`` comes back as a list of ints.

    Parameters
    ----------
    name : str
        A registered algorithm name.
    params : mapping
        The section's keys and values.

    Returns
    -------
    dict
        The same keys, with coerced values.

    Raises
    ------
    ConfigError
        Unknown algorithm, unknown key, or an invalid value.
    """
    cls = model_class(name)
    if not isinstance(params, Mapping):
        raise ConfigError(f"[{name}] must be a table of keys, but got {params!r}")
    params = dict(params)
    known = hyperparameters(name)
    unknown = sorted(set(params) - set(known) - set(RUN_KEYS))
    if unknown:
        raise ConfigError(
            f"unknown parameter(s) {', '.join(display_key(f'{name}.{k}') for k in unknown)} for algorithm {name!r}; "
            f"known: {', '.join(sorted(field_name(k) for k in known)) or '(none)'}"
            f"{did_you_mean(field_name(unknown[0]), [field_name(k) for k in [*known, *RUN_KEYS]])}"
        )
    _check_run_keys(name, params, known)
    model = cls(n_workers=1, n_classes=2, seed=0, **{k: v for k, v in params.items() if k in known})
    params.update({k: getattr(model, k) for k in params if k in known})
    return params


def build_model(name: str, params: dict[str, Any], n_workers: int, n_classes: int, seed: int) -> Model:
    """Construct the model for a run.

    Parameters
    ----------
    name : str
        Algorithm name (``--algorithm``).
    params : dict
        The algorithm's configuration section, without ``select_levels`` and ``level_criterion`` (which
        choose among several models).
    n_workers, n_classes, seed : int

    Raises
    ------
    ConfigError
        Unknown algorithm, unknown key, or an invalid value.
    """
    cls = model_class(name)
    params = check_params(name, params)
    preset = params.pop("preset", None)
    choosers = sorted(set(params) & {"select_levels", "level_criterion"})
    if choosers:
        raise ConfigError(f"build_model builds one model; choose H with crowdspark.engine.select.choose_levels ({choosers})")
    model = cls(n_workers=n_workers, n_classes=n_classes, seed=seed, **params)
    if preset is not None:
        # the preset sets its values; explicit parameters given next to it still win
        model = replace(cls.presets[preset].apply(model), **params)
    return model
