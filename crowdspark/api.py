"""A pandas API in crowd-kit's style, for users without a cluster.

>>> import pandas as pd
>>> from crowdspark.api import DawidSkene
>>> df = pd.DataFrame({"item": ["a", "a", "a", "b", "b", "b"],
...                    "worker": ["w1", "w2", "w3", "w1", "w2", "w3"],
...                    "label": ["x", "x", "y", "y", "y", "y"]})
>>> DawidSkene(seed=0).fit_predict(df).to_dict()
{'a': 'x', 'b': 'y'}

Every registered algorithm has a class here, named by its model's ``api_name`` (:data:`CLASSES`:
``MajorityVote``, ``DawidSkene``, ``Bcc``, ``Idbla``, ``FixedIdbla``, ``IdblaCvb``, ``IdblaCvb0``,
``DifficultyDawidSkene``), whose keyword arguments are the algorithm's parameters with their defaults (the
fields of its model class) and crowd-kit's names for them (``n_iter`` for ``max_iter``,
:mod:`crowdspark.faces`); :class:`Aggregator` runs any algorithm by name.  Data from crowd-kit uses a
``task`` column: pass ``item="task"``.  Every estimator runs the same kernels as the Spark engine (on the
local engine), checks its parameters when it is built, and validates its input with the command line's rules
and messages (naming settings as this API does).  Fitted attributes end in ``_``: ``labels_`` (Series item ->
label), ``probas_`` (DataFrame item x class), ``workers_`` (the worker table), ``classes_``, ``history_`` (per
iteration), ``n_iter_``, ``converged_``, ``summary_`` (what ``summary.json`` would hold).
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import pandas as pd

from crowdspark.config import GoldConfig, InputConfig, RunConfig
from crowdspark.docstrings import field_docs
from crowdspark.errors import ConfigError, InputError
from crowdspark.faces import CROWDKIT_ALIASES, PANDAS, using_face
from crowdspark.models.registry import MODELS, check_params, hyperparameters, model_class
from crowdspark.pipeline import aggregate_frames

__all__ = ["Aggregator", "CLASSES"]


def _canonical(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with crowd-kit's names replaced by the algorithm's (both given is an error)."""
    cls = model_class(name)
    aliases = {**{a: f for a, f in CROWDKIT_ALIASES.items() if f in hyperparameters(name)}, **cls.aliases}
    out = {}
    for key, value in params.items():
        field = aliases.get(key, key)
        if field in out:
            raise ConfigError(f"{field} is given twice (as {field} and as {key}); give it once")
        out[field] = value
    return out


class Aggregator:
    """Any registered algorithm behind the crowd-kit-style interface.

    Parameters
    ----------
    algorithm : str
        A name from ``crowdspark algorithms`` (``mv``, ``ds`` ...).
    seed : int
        Seed of every random choice.
    item, worker, label : str
        Column names of the labels frame.
    classes : sequence of str, optional
        The class set, in posterior order; inferred from the labels when omitted.
    **params
        The algorithm's parameters (see ``crowdspark algorithms``), or crowd-kit's names for them.

    Raises
    ------
    ConfigError
        For an unknown algorithm, an unknown parameter or a value out of range, when the estimator is built.
    """

    #: the algorithm of a class made for one algorithm (``None``: given to the constructor)
    algorithm_name: ClassVar[str | None] = None

    def __init__(
        self,
        algorithm: str,
        *,
        seed: int = 0,
        item: str = "item",
        worker: str = "worker",
        label: str = "label",
        classes: list[str] | tuple[str, ...] | None = None,
        **params: Any,
    ) -> None:
        self.algorithm = algorithm
        self.seed = seed
        self.item, self.worker, self.label = item, worker, label
        self.classes = tuple(str(c) for c in classes) if classes else ()
        with using_face(PANDAS):
            self.params = check_params(algorithm, _canonical(algorithm, params))
            self._config()  # the same checks as at fit time, now

    def _config(self) -> RunConfig:
        return RunConfig(
            algorithm=self.algorithm,
            seed=self.seed,
            input=InputConfig(item=self.item, worker=self.worker, label=self.label, classes=self.classes),
            gold=GoldConfig(item=self.item, truth="truth"),
            algorithms={self.algorithm: dict(self.params)},
        )

    def fit(self, data: pd.DataFrame, gold: pd.DataFrame | None = None) -> Aggregator:
        """Fit on a labels frame; ``gold`` (columns ``<item>``, ``truth``) adds ``summary_['metrics']``.

        Raises
        ------
        InputError
            For data that is not a pandas DataFrame, a frame naming a column twice, and every input error
            of the command line (missing columns, nulls, ...).
        """
        with using_face(PANDAS):
            self._check_frame(data, "data", [self.item, self.worker, self.label])
            if gold is not None:
                self._check_frame(gold, "gold", [self.item, "truth"])
            run = aggregate_frames(self._config(), data, gold)
        items = run.items.set_index("item")
        self.summary_ = run.summary
        self.classes_ = list(run.summary["classes"])
        self.labels_ = items["label"].rename_axis(self.item)
        self.probas_ = pd.DataFrame(
            list(items["posterior"]), index=items.index.rename(self.item), columns=self.classes_
        )
        self.items_ = items
        self.workers_ = run.workers.set_index("worker")
        self.history_ = pd.DataFrame(run.summary["history"])
        self.n_iter_ = run.summary["iterations"]
        self.converged_ = run.summary["converged"]
        return self

    def _check_frame(self, frame: Any, what: str, columns: list[str]) -> None:
        """``frame`` is a pandas DataFrame whose columns have distinct names."""
        names = ", ".join(columns)
        if not isinstance(frame, pd.DataFrame):
            spark_hint = (" For a Spark DataFrame use crowdspark.ml." if type(frame).__module__.startswith("pyspark")
                          else "")
            raise InputError(
                f"{what}: pass a pandas DataFrame with columns {names} (name other columns with "
                f"item=..., worker=..., label=...), but got a {type(frame).__name__}; e.g. "
                f"pd.DataFrame(rows, columns={columns!r}).{spark_hint}"
            )
        repeated = list(dict.fromkeys(c for c in frame.columns if list(frame.columns).count(c) > 1))
        if repeated:
            raise InputError(
                f"{what}: the DataFrame has columns named {repeated} more than once; give every column its own "
                f"name (the columns used are {names})."
            )

    def fit_predict(self, data: pd.DataFrame) -> pd.Series:
        """Fit and return the inferred label of each item (Series indexed by item)."""
        return self.fit(data).labels_

    def fit_predict_proba(self, data: pd.DataFrame) -> pd.DataFrame:
        """Fit and return the posterior of each item (rows: items, columns: classes)."""
        return self.fit(data).probas_


def _face_class(model: type) -> type[Aggregator]:
    """The class of the pandas API for one registered model: its fields are its keyword arguments."""
    name = model.name
    defaults = hyperparameters(name)

    def __init__(self, **kwargs: Any) -> None:
        if "algorithm" in kwargs:
            raise ConfigError(
                f"{type(self).__name__} always runs {name!r}; for another algorithm use "
                f"Aggregator({kwargs['algorithm']!r}) or its own class"
            )
        Aggregator.__init__(self, name, **kwargs)

    common = [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=default) for key, default in
              (("seed", 0), ("item", "item"), ("worker", "worker"), ("label", "label"), ("classes", None))]
    fields = [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=value) for key, value in defaults.items()]
    __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *fields, *common])
    docs = field_docs(model)
    parameters = "\n".join(f"{key} : default {value!r}\n    {docs.get(key, '')}" for key, value in defaults.items())
    doc = (f"{model.title[:1].upper()}{model.title[1:]} (``{name}``): {model.description}.\n\n"
           f"Parameters\n----------\n{parameters}\nseed, item, worker, label, classes\n    As :class:`Aggregator`.\n")
    return type(model.api_name, (Aggregator,), {"__init__": __init__, "__doc__": doc, "__module__": __name__,
                                                "algorithm_name": name})


#: the class of every registered algorithm, by its name in this API
CLASSES: dict[str, type[Aggregator]] = {model.api_name: _face_class(model) for model in MODELS}
globals().update(CLASSES)
__all__ += list(CLASSES)
