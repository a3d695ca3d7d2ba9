"""A pandas API in crowd-kit's style, for users without a cluster: switching from crowd-kit is a changed import.

>>> import pandas as pd
>>> from crowdspark.api import DawidSkene
>>> df = pd.DataFrame({"task": ["a", "a", "a", "b", "b", "b"],
...                    "worker": ["w1", "w2", "w3", "w1", "w2", "w3"],
...                    "label": ["x", "x", "y", "y", "y", "y"]})
>>> DawidSkene(n_iter=50).fit_predict(df).to_dict()
{'a': 'x', 'b': 'y'}

Every registered algorithm has a class here, named by its model's ``api_name`` (:data:`CLASSES`; crowd-kit's
names for the methods both have: ``MajorityVote``, ``DawidSkene``, ``GoldMajorityVote``, ``Wawa``,
``ZeroBasedSkill``, ``KOS``, ``MMSR``), whose keyword arguments are the algorithm's parameters with their
defaults (the fields of its model class) and crowd-kit's names for them (``n_iter`` for ``max_iter``,
``random_state`` for ``seed``, :mod:`crowdspark.faces`); :class:`Aggregator` runs any algorithm by name.
Every estimator runs the same kernels as the Spark engine (on the local engine), checks its parameters when
it is built, and validates its input with the command line's rules and messages (naming settings as this API
does).

As in crowd-kit, the labels frame has the columns ``task`` (or ``item``), ``worker`` and ``label``;
``fit(data, true_labels)`` holds the true labels of the items of ``true_labels`` (a Series indexed by task)
fixed during the fit; ``fit(data, initial_error=...)`` starts the workers it lists from their confusion
matrices (crowd-kit's ``errors_`` layout, or a worker table); ``fit(data, gold=frame)`` scores the fit on
gold (columns ``<task>``, ``truth``), of which ``gold_fit_fraction`` is held fixed in the fit.  Fitted
attributes end in ``_``, in crowd-kit's layouts where crowd-kit has them: ``labels_`` (Series ``agg_label``
indexed by task), ``probas_`` (task x class, the classes as column names), ``errors_`` (per worker and
observed label, a column per true label: ``P(label | true label)``), ``skills_`` (Series ``skill`` by
worker), ``priors_`` (Series ``prior`` by class), ``loss_history_``; and ``workers_`` (the worker table),
``classes_``, ``history_`` (per iteration), ``n_iter_``, ``converged_``, ``summary_`` (what ``summary.json``
would hold), ``items_`` (the item table), ``quality_`` (``summary_['quality']``) and ``relabel_`` (every
item in the relabel queue's order, docs/quality.md).  Every attribute holds the tasks, workers and classes as
given, in the frame's dtype.

The classes crowd-kit has take its positional arguments in its order (``DawidSkene(100)``,
:data:`crowdspark.faces.CROWDKIT_POSITIONAL`) and accept its parameters that mean nothing here with one warning
(:data:`crowdspark.faces.CROWDKIT_IGNORED`); ``DawidSkene``, ``OneCoinDawidSkene`` and ``GLAD`` take crowd-kit's
stopping rule (and Dawid-Skene its M-step) as their defaults (:data:`crowdspark.faces.CROWDKIT_DEFAULTS`), so that
a crowd-kit script gets crowd-kit's answers.  ``MajorityVote().fit(data, skills)`` is crowd-kit's vote weighted
by given worker skills (gold is ``true_labels=``); ``MMSR`` adds ``scores_`` and ``fit_predict_score``.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from crowdspark.config import DEFAULT_ALGORITHM, GoldConfig, InputConfig, RelabelConfig, RunConfig
from crowdspark.docstrings import field_docs
from crowdspark.errors import ConfigError, InputError
from crowdspark.faces import (
    CROWDKIT_ALIASES,
    CROWDKIT_DEFAULTS,
    CROWDKIT_IGNORED,
    CROWDKIT_POSITIONAL,
    PANDAS,
    using_face,
)
from crowdspark.io.cells import canonical_values
from crowdspark.io.chain import read_items
from crowdspark.io.rules import order_classes
from crowdspark.io.worker_table import WorkerTable, worker_table_from_frame
from crowdspark.label_metrics import alpha as krippendorff_alpha, label_probabilities
from crowdspark.models.registry import MODELS, check_params, hyperparameters, model_class
from crowdspark.pipeline.fit import RunOptions
from crowdspark.pipeline.run import RunResult, aggregate_frames
from crowdspark.pipeline.quality import relabel_queue
from crowdspark.quality import entropy
from crowdspark.validation import check_choice, check_float

__all__ = ["Aggregator", "CLASSES", "read_items"]


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


def _without_ignored(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` without crowd-kit's parameters that have no meaning here (:data:`CROWDKIT_IGNORED`), after
    one warning that names them and says what crowdspark does instead."""
    meanings = CROWDKIT_IGNORED.get(model_class(name).api_name, {})
    ignored = [key for key in params if key in meanings]
    if ignored:
        reasons = "; ".join(f"{key}: {meanings[key]}" for key in ignored)
        warnings.warn(f"{model_class(name).api_name} accepts crowd-kit's {', '.join(ignored)} but does not use "
                      f"{'it' if len(ignored) == 1 else 'them'} ({reasons})", UserWarning, stacklevel=4)
    return {key: value for key, value in params.items() if key not in meanings}


#: crowd-kit's initial_error strategies: ``assign`` (the matrices start the fit), ``addition`` (they are counts
#: added to those of a vote-share start)
_STRATEGIES = (None, "assign", "addition")


class Aggregator:
    """Any registered algorithm behind the crowd-kit-style interface.

    Parameters
    ----------
    algorithm : str
        A name from ``crowdspark algorithms`` (``mv``, ``ds`` ...); default
        :data:`crowdspark.config.DEFAULT_ALGORITHM` (``ads``), as in every face.
    seed : int
        Seed of every random choice (crowd-kit's ``random_state`` is accepted for it).
    item : str, optional
        The item column of the labels frame; default ``task`` in a frame that has it (crowd-kit's), else ``item``.
    worker, label : str
        Column names of the labels frame.
    classes : sequence, optional
        The class set, in posterior order; inferred from the labels when omitted.
    gold_fit_fraction, gold_split_seed : float, int
        With ``fit(..., gold=frame)``: the share of the gold held fixed in the fit and the seed of that choice
        (``gold.fit_fraction``, ``gold.split_seed``); the rest scores the fit.
    initial_error_strategy : str, optional
        crowd-kit's: ``None`` or ``"assign"`` (the matrices of ``initial_error`` start the workers it lists), or
        ``"addition"`` (its values are counts added to each worker's counts against the vote shares of a
        majority vote, crowd-kit's first M-step; every worker then starts from the sum).
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
        algorithm: str = DEFAULT_ALGORITHM,
        *,
        seed: int = 0,
        item: str | None = None,
        worker: str = "worker",
        label: str = "label",
        classes: list[Any] | tuple[Any, ...] | None = None,
        gold_fit_fraction: float = 0.0,
        gold_split_seed: int = 0,
        random_state: int | None = None,
        initial_error_strategy: str | None = None,
        **params: Any,
    ) -> None:
        self.algorithm = algorithm
        self.seed = seed if random_state is None else random_state
        self.item, self.worker, self.label = item, worker, label
        self.classes = tuple(classes) if classes else ()
        self.gold_fit_fraction, self.gold_split_seed = gold_fit_fraction, gold_split_seed
        self.initial_error_strategy = initial_error_strategy
        with using_face(PANDAS):
            if random_state is not None and seed != 0:
                raise ConfigError(f"seed is given twice (as seed={seed!r} and random_state={random_state!r}); give it once")
            if initial_error_strategy not in _STRATEGIES:
                raise ConfigError(
                    f"initial_error_strategy must be one of {list(_STRATEGIES)}, but got {initial_error_strategy!r}")
            self.params = check_params(algorithm, _canonical(algorithm, _without_ignored(algorithm, params)))
            check_params(algorithm, self._algorithm_params())
            self._config(item or "item", 0.0)  # the same checks as at fit time, now

    def _algorithm_params(self) -> dict[str, Any]:
        """The parameters the fit runs with: the ones given (:attr:`params`) over crowd-kit's settings of a
        crowd-kit class (:data:`crowdspark.faces.CROWDKIT_DEFAULTS`); none of those beside a preset (it sets its
        own values) or for :class:`Aggregator` itself."""
        if self.algorithm_name is None or "preset" in self.params:
            return dict(self.params)
        return {**CROWDKIT_DEFAULTS.get(model_class(self.algorithm).api_name, {}), **self.params}

    def _config(self, item: str, fit_fraction: float) -> RunConfig:
        return RunConfig(
            algorithm=self.algorithm,
            seed=self.seed,
            input=InputConfig(item=item, worker=self.worker, label=self.label,
                              classes=tuple(_text(pd.Series(self.classes, dtype=object), "classes"))),
            gold=GoldConfig(item=item, truth="truth", fit_fraction=fit_fraction, split_seed=self.gold_split_seed),
            algorithms={self.algorithm: self._algorithm_params()},
            relabel=RelabelConfig(budget=0),  # relabel_ holds every item
        )

    def fit(self, data: pd.DataFrame, true_labels: pd.Series | None = None,
            initial_error: pd.DataFrame | None = None, *, gold: pd.DataFrame | None = None) -> Aggregator:
        """Fit on a labels frame (columns ``task`` or ``item``, ``worker``, ``label``).

        Parameters
        ----------
        data : DataFrame
        true_labels : Series, optional
            crowd-kit's: the true label of some tasks (indexed by task), held fixed during the fit (every
            model answers them with it and learns its workers from them).  A DataFrame here is ``gold``.
        initial_error : DataFrame, optional
            crowd-kit's: starting confusion matrices of some workers, indexed by (worker, label) with a column
            per true label (``errors_``'s layout; counts or probabilities), or a worker table (``worker`` and
            ``confusion`` or ``accuracy``, as ``workers_``); the other workers start as usual.
        gold : DataFrame, optional
            Gold (columns ``<task>``, ``truth``) that scores the fit: ``summary_['metrics']``; the share
            ``gold_fit_fraction`` of it is held fixed in the fit instead.

        Raises
        ------
        InputError
            For data that is not a pandas DataFrame, a frame naming a column twice, and every input error
            of the command line (missing columns, nulls, a true label outside the classes ...).
        ConfigError
            For ``true_labels`` with ``gold``.
        """
        if isinstance(true_labels, pd.DataFrame) and gold is None:
            gold, true_labels = true_labels, None  # fit(data, gold_frame)
        with using_face(PANDAS):
            self._check_frame(data, "data", [self.item or "item", self.worker, self.label])
            item = self._item_column(data)
            gold_frame, fraction = self._gold(item, true_labels, gold)
            if self.initial_error_strategy == "addition" and initial_error is not None:
                initial_error = self._added_errors(data, item, true_labels, initial_error)
            options = RunOptions(initial_workers=self._initial_table(initial_error, data))
            run = aggregate_frames(self._config(item, fraction), data, gold_frame, options=options)
        self._fitted(run, data, item)
        return self

    def _item_column(self, data: pd.DataFrame) -> str:
        """The item column: the one given, else ``task`` or ``item``, whichever the frame has."""
        if self.item is not None:
            return self.item
        present = [c for c in ("task", "item") if c in data.columns]
        if len(present) == 2:
            raise InputError("data: the frame has both a task and an item column; say which holds the items "
                             "(item='task' or item='item')")
        return present[0] if present else "item"

    def _gold(self, item: str, true_labels: Any, gold: Any) -> tuple[pd.DataFrame | None, float]:
        """The gold frame of the run and the share of it held fixed in the fit."""
        if true_labels is not None and gold is not None:
            raise ConfigError("give the gold either as true_labels (held fixed in the fit) or as gold= (scores the "
                              "fit, gold_fit_fraction of it held fixed), not both")
        if gold is not None:
            self._check_frame(gold, "gold", [item, "truth"])
            return gold, self.gold_fit_fraction
        if true_labels is None:
            return None, self.gold_fit_fraction
        if isinstance(true_labels, dict):
            true_labels = pd.Series(true_labels)
        if not isinstance(true_labels, pd.Series):
            raise InputError(f"true_labels: pass a pandas Series of true labels indexed by {item}, but got a "
                             f"{type(true_labels).__name__}; e.g. pd.Series({{'t1': 'x'}})")
        frame = pd.DataFrame({item: true_labels.index.to_numpy(), "truth": true_labels.to_numpy()})
        return frame, 1.0

    def _added_errors(self, data: pd.DataFrame, item: str, true_labels: Any, initial_error: Any) -> pd.DataFrame:
        """crowd-kit's ``addition``: per (worker, label) and true class, the summed vote shares of a majority vote
        (the true labels held fixed) of the items the worker gave the label, plus ``initial_error``'s counts."""
        if not isinstance(initial_error, pd.DataFrame) or not isinstance(initial_error.index, pd.MultiIndex):
            raise InputError("initial_error: with initial_error_strategy='addition' pass counts in crowd-kit's "
                             "layout: a DataFrame indexed by (worker, label) with a column per true label")
        vote = Aggregator("mv", seed=self.seed, item=item, worker=self.worker, label=self.label,
                          classes=self.classes or None).fit(data, true_labels)
        shares = vote.probas_.reindex(data[item].to_numpy()).set_axis(data.index)
        counts = shares.groupby([data[self.worker].rename("worker"), data[self.label].rename("label")]).sum()
        return counts.add(initial_error.rename_axis(["worker", "label"]), fill_value=0.0)

    def _initial_table(self, initial_error: Any, data: pd.DataFrame) -> WorkerTable | None:
        """``initial_error`` as a worker table (crowd-kit's error layout or a worker table)."""
        if initial_error is None:
            return None
        if not isinstance(initial_error, pd.DataFrame):
            raise InputError(f"initial_error: pass a pandas DataFrame indexed by worker and label with a column per "
                             f"true label, but got a {type(initial_error).__name__}")
        if isinstance(initial_error.index, pd.MultiIndex) and initial_error.index.nlevels == 2:
            return _error_table(initial_error)
        frame = initial_error.reset_index() if initial_error.index.name == "worker" else initial_error
        return worker_table_from_frame(frame.assign(worker=_text(frame["worker"], "worker"))
                                       if "worker" in frame.columns else frame, "initial_error")

    def _fitted(self, run: RunResult, data: pd.DataFrame, item: str) -> None:
        """The fitted attributes, in crowd-kit's layouts and the frames' own values."""
        tasks, workers, classes = (_originals(data[c]) for c in (item, self.worker, self.label))
        self.summary_ = run.summary
        self.classes_ = [classes.get(c, c) for c in run.summary["classes"]]
        task_index = _index([tasks.get(t, t) for t in run.items["item"]], data[item], item)
        worker_index = _index([workers.get(w, w) for w in run.workers["worker"]], data[self.worker], "worker")
        self.labels_ = _series([classes.get(c, c) for c in run.items["label"]], data[self.label], task_index, "agg_label")
        self.probas_ = pd.DataFrame(np.asarray(list(run.items["posterior"]), dtype=np.float64).reshape(len(task_index), -1),
                                    index=task_index, columns=_class_index(self.classes_, data[self.label]))
        self.items_ = run.items.drop(columns="item").set_axis(task_index).assign(label=self.labels_)
        self.workers_ = run.workers.drop(columns="worker").set_axis(worker_index)
        skill = "skill" if "skill" in self.workers_.columns else "accuracy"
        self.skills_ = pd.Series(self.workers_[skill].to_numpy(), index=worker_index, name="skill")
        if "confusion" in self.workers_.columns:
            self.errors_ = _errors_frame(self.workers_["confusion"], worker_index, self.classes_,
                                         data[[self.worker, self.label]].drop_duplicates())
        proportions = run.summary["model"].get("class_proportions")
        if proportions is not None:
            self.priors_ = pd.Series(proportions, index=_class_index(self.classes_, data[self.label]), name="prior")
        self._model_attributes(task_index, worker_index)
        self.history_ = pd.DataFrame(run.summary["history"])
        self.loss_history_ = [float(h["objective"]) for h in run.summary["history"]]
        self.n_iter_ = run.summary["iterations"]
        self.converged_ = run.summary["converged"]
        self.quality_ = run.summary.get("quality")
        if self.quality_ is not None:
            queue = relabel_queue(run.items, self.quality_["relabel"]["budget"])
            queue["item"] = _series([tasks.get(t, t) for t in queue["item"]], data[item], queue.index, "item")
            queue["label"] = _series([classes.get(c, c) for c in queue["label"]], data[self.label], queue.index, "label")
            self.relabel_ = queue.rename(columns={"item": item})

    def _model_attributes(self, task_index: pd.Index, worker_index: pd.Index) -> None:
        """The model's own fitted attributes (``Model.api_attributes``: GLAD's ``alphas_``, MACE's ``thetas_``)."""
        for attr, (table, columns) in model_class(self.algorithm).api_attributes.items():
            frame, index = (self.workers_, worker_index) if table == "workers" else (self.items_, task_index)
            if isinstance(columns, str):
                setattr(self, attr, pd.Series(frame[columns].to_numpy(dtype=np.float64), index=index, name=columns))
            else:
                setattr(self, attr, np.column_stack([np.stack(frame[c].to_numpy()) for c in columns]))

    def _check_frame(self, frame: Any, what: str, columns: list[str]) -> None:
        """``frame`` is a pandas DataFrame whose columns have distinct names."""
        names = ", ".join(columns)
        if not isinstance(frame, pd.DataFrame):
            spark_hint = (" For a Spark DataFrame use crowdspark.ml." if type(frame).__module__.startswith("pyspark")
                          else "")
            raise InputError(
                f"{what}: pass a pandas DataFrame with columns {names} (crowd-kit's task for item is read too; name "
                f"other columns with item=..., worker=..., label=...), but got a {type(frame).__name__}; e.g. "
                f"pd.DataFrame(rows, columns={columns!r}).{spark_hint}"
            )
        repeated = list(dict.fromkeys(c for c in frame.columns if list(frame.columns).count(c) > 1))
        if repeated:
            raise InputError(
                f"{what}: the DataFrame has columns named {repeated} more than once; give every column its own "
                f"name (the columns used are {names})."
            )

    def _weighted_scores(self, data: pd.DataFrame, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The vote of each fitted task with each label weighing ``weight`` (NaN: not counted), in the order of
        ``labels_`` and ``classes_``.

        Returns
        -------
        scores : ndarray of float64, shape (n_tasks, C)
            Summed weights of each class's labels.
        shares : ndarray of float64, shape (n_tasks, C)
            ``scores`` over their sum; uniform where it is 0 or less.
        """
        item = self.labels_.index.name
        counted = ~np.isnan(weight)
        frame = pd.DataFrame({"task": _text(data[item], item), "label": _text(data[self.label], self.label),
                              "weight": weight})[counted]
        classes = self.summary_["classes"]
        summed = frame.pivot_table(index="task", columns="label", values="weight", aggfunc="sum", fill_value=0.0)
        order = _text(pd.Series(self.labels_.index), item)
        unvoted = sorted(set(order) - set(summed.index))
        if unvoted:
            raise InputError(f"skills: the tasks {unvoted[:3]!r} have no label by a worker with a skill "
                             "(on_missing_skill='ignore'); give their workers skills or leave them out of data")
        scores = summed.reindex(index=order, columns=classes, fill_value=0.0).to_numpy(dtype=np.float64)
        total = scores.sum(axis=1, keepdims=True)
        positive = total[:, 0] > 0
        shares = np.full(scores.shape, 1.0 / len(classes))
        shares[positive] = scores[positive] / total[positive]
        return scores, shares

    def fit_predict(self, data: pd.DataFrame, true_labels: pd.Series | None = None,
                    initial_error: pd.DataFrame | None = None) -> pd.Series:
        """Fit and return the inferred label of each task (``labels_``)."""
        return self.fit(data, true_labels, initial_error).labels_

    def fit_predict_proba(self, data: pd.DataFrame, true_labels: pd.Series | None = None,
                          initial_error: pd.DataFrame | None = None) -> pd.DataFrame:
        """Fit and return the posterior of each task (``probas_``: rows tasks, columns classes)."""
        return self.fit(data, true_labels, initial_error).probas_


def _text(values: pd.Series, column: str) -> np.ndarray:
    """The canonical text crowdspark gives ``values`` (:mod:`crowdspark.io.cells`), object (n,)."""
    return canonical_values(values.reset_index(drop=True), "data", "<DataFrame>", column)


def _values(values: list[Any], column: pd.Series) -> Any:
    """``values`` (taken from ``column``) in ``column``'s dtype, (n,).

    A Series or Index built from them needs ``dtype=column.dtype`` too (:func:`_series`, :func:`_index`):
    pandas 3 infers ``str`` from an object array of strings.
    """
    if isinstance(column.dtype, np.dtype):
        return np.asarray(values, dtype=column.dtype)
    return pd.array(values, dtype=column.dtype)


def _series(values: list[Any], column: pd.Series, index: pd.Index, name: str) -> pd.Series:
    """A Series of ``values`` (taken from ``column``) in ``column``'s dtype, on ``index``, named ``name``."""
    return pd.Series(_values(values, column), index=index, dtype=column.dtype, name=name)


def _index(values: list[Any], column: pd.Series, name: str) -> pd.Index:
    """An index of ``values`` (ids taken from ``column``) in ``column``'s dtype, named ``name``."""
    return pd.Index(_values(values, column), dtype=column.dtype, name=name)


def _class_index(classes: list[Any], column: pd.Series, name: str | None = "label") -> pd.Index:
    """The classes (taken from the label ``column``) as an index named ``name``: object for an object column
    (pandas 3 would infer ``str``), else the dtype pandas infers from them."""
    return pd.Index(classes, dtype=object if column.dtype == object else None, name=name)


def _originals(column: pd.Series) -> dict[str, Any]:
    """Canonical text -> the value as given, for a column whose values are not all strings (else empty: the
    text is the value)."""
    values = column.drop_duplicates()
    if values.map(type).eq(str).all():
        return {}
    return dict(zip(_text(values, str(column.name)), values))


def _error_table(errors: pd.DataFrame) -> WorkerTable:
    """A worker table from crowd-kit's error layout: rows (worker, observed label), a column per true label,
    ``P(observed | true)`` or counts; a pair a worker never gave counts 0."""
    workers = _text(pd.Series(errors.index.get_level_values(0)), "worker")
    given = _text(pd.Series(errors.index.get_level_values(1)), "label")
    true = _text(pd.Series(list(errors.columns)), "label")
    classes = order_classes(sorted(set(given) | set(true)))
    position = {c: j for j, c in enumerate(classes)}
    names = list(dict.fromkeys(workers))
    row = {w: j for j, w in enumerate(names)}
    matrices = np.zeros((len(names), len(classes), len(classes)))
    values = errors.to_numpy(dtype=np.float64)
    for r, (w, g) in enumerate(zip(workers, given)):
        for c, t in enumerate(true):
            matrices[row[w], position[t], position[g]] += values[r, c]
    frame = pd.DataFrame({"worker": names, "confusion": list(matrices)})
    return worker_table_from_frame(frame, "initial_error", tuple(classes))


def _errors_frame(confusion: pd.Series, workers: pd.Index, classes: list[Any], pairs: pd.DataFrame) -> pd.DataFrame:
    """crowd-kit's ``errors_``: a row per (worker, label) the worker gave, a column per true label, holding
    ``P(label | true label)`` from each worker's confusion (row = true class, column = given label)."""
    matrices = np.asarray([np.asarray(list(m), dtype=np.float64) for m in confusion])  # (K, C, C)
    worker_pos = {w: k for k, w in enumerate(workers)}
    class_pos = {c: j for j, c in enumerate(classes)}
    pairs = pairs.sort_values(list(pairs.columns))
    k = np.array([worker_pos[w] for w in pairs.iloc[:, 0]])
    g = np.array([class_pos[c] for c in pairs.iloc[:, 1]])
    index = pd.MultiIndex.from_arrays([pairs.iloc[:, 0], pairs.iloc[:, 1]],
                                      names=["worker", "label"])
    return pd.DataFrame(matrices[k, :, g], index=index, columns=_class_index(classes, pairs.iloc[:, 1], None))


#: crowd-kit's rules for the labels of a worker without a skill in ``MajorityVote.fit(data, skills)``
SKILL_RULES = ("error", "ignore", "value")


class _SkillWeightedVote(Aggregator):
    """The base of :class:`MajorityVote`: crowd-kit's ``fit(data, skills)``, a vote weighted by given skills.

    Parameters
    ----------
    on_missing_skill : {"error", "ignore", "value"}
        crowd-kit's: what ``fit(data, skills)`` does with the labels of a worker ``skills`` does not list:
        refuse them, leave them out of the vote, or weigh them ``default_skill``.
    default_skill : float, optional
        The skill of such a worker with ``on_missing_skill="value"``.
    """

    def __init__(self, algorithm: str, *args: Any, on_missing_skill: str = "error",
                 default_skill: float | None = None, **kwargs: Any) -> None:
        super().__init__(algorithm, *args, **kwargs)
        with using_face(PANDAS):
            check_choice("on_missing_skill", on_missing_skill, SKILL_RULES)
            if (on_missing_skill == "value") != (default_skill is not None):
                raise ConfigError(f"default_skill is the skill of the workers skills does not list, with "
                                  f"on_missing_skill='value' only; but got on_missing_skill={on_missing_skill!r} "
                                  f"and default_skill={default_skill!r}")
            if default_skill is not None:
                check_float("default_skill", default_skill)
        self.on_missing_skill, self.default_skill = on_missing_skill, default_skill

    def fit(self, data: pd.DataFrame, skills: pd.Series | None = None, *, true_labels: pd.Series | None = None,
            initial_error: pd.DataFrame | None = None, gold: pd.DataFrame | None = None) -> Aggregator:
        """Fit on a labels frame; with ``skills`` (crowd-kit's), the vote of each label weighs its worker's skill.

        Parameters
        ----------
        data : DataFrame
        skills : Series, optional
            Each worker's skill (indexed by worker): the answer of a task is the class whose labels' skills sum
            highest (ties: the first in the class order, as crowd-kit), its posterior the sums' shares (uniform
            where they sum to 0 or less).  The fit then holds crowd-kit's attributes only: ``labels_``,
            ``probas_``, ``classes_`` and ``skills_`` (each worker's agreement with ``labels_``).  A DataFrame
            here is ``gold``.
        true_labels, initial_error, gold
            As :meth:`Aggregator.fit`, without ``skills``.
        """
        if isinstance(skills, pd.DataFrame) and gold is None:
            skills, gold = None, skills
        if skills is None:
            return super().fit(data, true_labels, initial_error, gold=gold)
        if true_labels is not None or initial_error is not None or gold is not None:
            raise ConfigError("skills weigh a plain vote: give them without true_labels, initial_error or gold")
        super().fit(data)
        with using_face(PANDAS):
            weight = self._label_weights(data, skills)
        self._weighted(data, weight)
        return self

    def _label_weights(self, data: pd.DataFrame, skills: Any) -> np.ndarray:
        """The skill of each label's worker, float64 (n_labels,); NaN: left out of the vote."""
        if not isinstance(skills, pd.Series):
            raise InputError(f"skills: pass a pandas Series of skills indexed by worker, but got a "
                             f"{type(skills).__name__}; e.g. pd.Series({{'w1': 0.9}})")
        values = pd.to_numeric(skills, errors="coerce").to_numpy(dtype=np.float64)
        if not np.isfinite(values).all():
            bad = skills[~np.isfinite(values)]
            raise InputError(f"skills: every skill must be a finite number, but worker {bad.index[0]!r} has "
                             f"{bad.iloc[0]!r}")
        known = pd.Series(values, index=_text(pd.Series(skills.index), "worker"))
        if known.index.duplicated().any():
            raise InputError(f"skills: worker {known.index[known.index.duplicated()][0]!r} is listed twice; "
                             "give each worker one skill")
        weight = known.reindex(_text(data[self.worker], self.worker)).to_numpy(dtype=np.float64, copy=True)
        missing = np.isnan(weight)
        if missing.any() and self.on_missing_skill == "error":
            workers = list(dict.fromkeys(data[self.worker].to_numpy()[missing]))
            raise InputError(f"skills: {int(missing.sum())} labels are by workers without a skill, e.g. "
                             f"{workers[:3]!r}; list them in skills, or build the model with "
                             "on_missing_skill='ignore' (leave their labels out) or on_missing_skill='value', "
                             "default_skill=... (weigh them that)")
        if self.on_missing_skill == "value":
            weight[missing] = self.default_skill
        return weight

    def _weighted(self, data: pd.DataFrame, weight: np.ndarray) -> None:
        """crowd-kit's weighted vote over the fitted tasks and classes: ``labels_``, ``probas_``, ``skills_``."""
        item = self.labels_.index.name
        scores, probas = self._weighted_scores(data, weight)
        labels = np.asarray(self.classes_, dtype=object)[scores.argmax(axis=1)]
        self.labels_ = _series(list(labels), data[self.label], self.labels_.index, "agg_label")
        self.probas_ = pd.DataFrame(probas, index=self.labels_.index, columns=self.probas_.columns)
        agree = pd.Series(data[self.label].to_numpy() == self.labels_.reindex(data[item]).to_numpy())
        accuracy = agree.groupby(data[self.worker].to_numpy()).mean()
        self.skills_ = pd.Series(accuracy.to_numpy(dtype=np.float64),
                                 index=_index(list(accuracy.index), data[self.worker], "worker"),
                                 name="skill")
        for attr in [a for a in vars(self) if a.endswith("_") and a not in _WEIGHTED_VOTE_ATTRIBUTES]:
            delattr(self, attr)

    def fit_predict(self, data: pd.DataFrame, skills: pd.Series | None = None, **kwargs: Any) -> pd.Series:
        """Fit and return the inferred label of each task (``labels_``)."""
        return self.fit(data, skills, **kwargs).labels_

    def fit_predict_proba(self, data: pd.DataFrame, skills: pd.Series | None = None, **kwargs: Any) -> pd.DataFrame:
        """Fit and return the posterior of each task (``probas_``: rows tasks, columns classes)."""
        return self.fit(data, skills, **kwargs).probas_


class _ScoredVote(Aggregator):
    """The base of :class:`MMSR`: crowd-kit's ``scores_`` and ``fit_predict_score``."""

    def fit(self, data: pd.DataFrame, true_labels: pd.Series | None = None,
            initial_error: pd.DataFrame | None = None, *, gold: pd.DataFrame | None = None) -> Aggregator:
        """As :meth:`Aggregator.fit`, and ``scores_`` (crowd-kit's): per task (rows) and class (columns), the
        share of the skills (``skills_``) of the task's workers that gave the class (uniform where they sum to 0
        or less)."""
        super().fit(data, true_labels, initial_error, gold=gold)
        weight = self.skills_.reindex(data[self.worker].to_numpy()).to_numpy(dtype=np.float64)
        _, shares = self._weighted_scores(data, weight)
        self.scores_ = pd.DataFrame(shares, index=self.labels_.index, columns=self.probas_.columns)
        return self

    def fit_predict_score(self, data: pd.DataFrame, true_labels: pd.Series | None = None,
                          initial_error: pd.DataFrame | None = None) -> pd.DataFrame:
        """Fit and return ``scores_``."""
        return self.fit(data, true_labels, initial_error).scores_


#: what a fit with skills holds (crowd-kit's MajorityVote's attributes)
_WEIGHTED_VOTE_ATTRIBUTES = ("labels_", "probas_", "skills_", "classes_")

#: the base of the class of an algorithm whose crowd-kit method takes more than :class:`Aggregator`
_BASES: dict[str, type[Aggregator]] = {"mv": _SkillWeightedVote, "mmsr": _ScoredVote}


def _positional(cls: str, names: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the positional ``args`` named in crowd-kit's order (``names``); TypeError as Python's."""
    if len(args) > len(names):
        takes = f"at most {len(names)} positional arguments ({', '.join(names)}, crowd-kit's order)" if names \
            else "its parameters by keyword only"
        raise TypeError(f"{cls}() takes {takes}, but {len(args)} were given")
    out = dict(kwargs)
    for key, value in zip(names, args):
        if key in out:
            raise TypeError(f"{cls}() got multiple values for argument {key!r}")
        out[key] = value
    return out


def _face_class(model: type) -> type[Aggregator]:
    """The class of the pandas API for one registered model: its fields are its keyword arguments."""
    name = model.name
    defaults = {**hyperparameters(name), **CROWDKIT_DEFAULTS.get(model.api_name, {})}
    base = _BASES.get(name, Aggregator)
    positional = CROWDKIT_POSITIONAL.get(model.api_name, ())

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs = _positional(type(self).__name__, positional, args, kwargs)
        if "algorithm" in kwargs:
            raise ConfigError(
                f"{type(self).__name__} always runs {name!r}; for another algorithm use "
                f"Aggregator({kwargs['algorithm']!r}) or its own class"
            )
        base.__init__(self, name, **kwargs)

    common = [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=default) for key, default in
              (("seed", 0), ("item", None), ("worker", "worker"), ("label", "label"), ("classes", None),
               ("gold_fit_fraction", 0.0), ("gold_split_seed", 0), ("random_state", None),
               ("initial_error_strategy", None))]
    known = {**{p.name: p.default for p in common}, **defaults, "on_missing_skill": "error"}
    by_position = [inspect.Parameter(key, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                     default=known.get(CROWDKIT_ALIASES.get(key, key))) for key in positional]
    fields = [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=value) for key, value in defaults.items()
              if key not in positional]
    __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *by_position, *fields,
         *[p for p in common if p.name not in positional]])
    docs = field_docs(model)
    parameters = "\n".join(f"{key} : default {value!r}\n    {docs.get(key, '')}" for key, value in defaults.items())
    doc = (f"{model.title[:1].upper()}{model.title[1:]} (``{name}``): {model.description}.\n\n"
           f"Parameters\n----------\n{parameters}\nseed, item, worker, label, classes, gold_fit_fraction, "
           "gold_split_seed, random_state, initial_error_strategy\n    As :class:`Aggregator`.\n")
    return type(model.api_name, (base,), {"__init__": __init__, "__doc__": doc, "__module__": __name__,
                                                "algorithm_name": name})


#: the class of every registered algorithm, by its name in this API
CLASSES: dict[str, type[Aggregator]] = {model.api_name: _face_class(model) for model in MODELS}
globals().update(CLASSES)
__all__ += list(CLASSES)


# ---- crowd-kit's metric functions (crowdkit.metrics.data, crowdkit.metrics.workers) ----------------------------

class _FreshVote:
    """The default ``aggregator`` of the metric functions: a new :class:`MajorityVote` at each call with
    crowd-kit's tie rule (:func:`_fit_predict`), so that no call sees the state another left in a shared
    default instance."""

    def __repr__(self) -> str:
        return "MajorityVote()"


_MAJORITY_VOTE = _FreshVote()


def binary_distance(label1: Any, label2: Any) -> float:
    """crowd-kit's (nltk's) default distance of :func:`alpha_krippendorff`: 0.0 for equal labels, else 1.0."""
    return 0.0 if label1 == label2 else 1.0


def _answers(answers: Any, columns: tuple[str, ...] = ("task", "worker", "label")) -> pd.DataFrame:
    """``answers``, checked: a pandas DataFrame with crowd-kit's columns."""
    if not isinstance(answers, pd.DataFrame):
        raise InputError(f"answers: pass a pandas DataFrame with columns {', '.join(columns)}, but got a "
                         f"{type(answers).__name__}")
    missing = [c for c in columns if c not in answers.columns]
    if missing:
        raise InputError(f"answers: the DataFrame has no column {', '.join(missing)} (it has "
                         f"{', '.join(map(str, answers.columns))}); name them {', '.join(columns)} as crowd-kit does")
    return answers


def _fit_predict(aggregator: Any, answers: pd.DataFrame) -> tuple[Any, pd.Series]:
    """``aggregator`` fitted on ``answers`` and its labels; the default is a new :class:`MajorityVote` that
    takes the first of tied labels in the class order, as crowd-kit's (every worker's vote weighing 1)."""
    if aggregator is not _MAJORITY_VOTE:
        return aggregator, aggregator.fit_predict(answers)
    model = CLASSES["MajorityVote"]()
    ones = pd.Series(1.0, index=pd.unique(answers["worker"]))
    return model, model.fit_predict(answers, ones)


def _skills(answers: pd.DataFrame, workers_skills: pd.Series | None, default: float | None) -> np.ndarray:
    """Each row's worker skill, float64 (m,): from ``workers_skills`` (NaN for an unlisted worker), else
    ``default``."""
    if workers_skills is None:
        return np.full(len(answers), default, dtype=np.float64)
    if not isinstance(workers_skills, pd.Series):
        raise InputError(f"workers_skills: pass a pandas Series of skills indexed by worker, but got a "
                         f"{type(workers_skills).__name__}")
    return pd.to_numeric(workers_skills.reindex(answers["worker"].to_numpy()), errors="coerce").to_numpy(np.float64)


def _probabilities(answers: pd.DataFrame, skill: np.ndarray) -> pd.DataFrame:
    """crowd-kit's one-coin label probabilities of each row (:func:`crowdspark.label_metrics.label_probabilities`),
    a column per distinct label, (m, C)."""
    codes, classes = pd.factorize(answers["label"])
    return pd.DataFrame(label_probabilities(codes, skill, len(classes)), index=answers.index,
                        columns=pd.Index(classes))


def alpha_krippendorff(answers: pd.DataFrame, distance: Any = binary_distance) -> float:
    """Krippendorff's alpha of the labels (crowd-kit's ``crowdkit.metrics.data.alpha_krippendorff``).

    The agreement of the labels of each task beyond chance: 1 for full agreement, 0 for agreement at chance
    level, negative below it (0.8 and above is commonly read as reliable).  The tasks with one label count
    for nothing.  With the default distance this is the nominal alpha of the run's quality signals
    (``summary_['quality']``, docs/quality.md).

    Parameters
    ----------
    answers : DataFrame
        Columns ``task``, ``worker`` and ``label``.
    distance : callable, default :func:`binary_distance`
        ``distance(label1, label2)`` in [0, 1] (nltk's distances work here).

    Returns
    -------
    float

    Raises
    ------
    InputError
        For answers without those columns, or without a task of two labels.
    """
    answers = _answers(answers)
    tasks, _ = pd.factorize(answers["task"])
    codes, classes = pd.factorize(answers["label"])
    if len(classes) == 1:
        return 1.0
    matrix = np.array([[float(distance(a, b)) for b in classes] for a in classes])
    value = krippendorff_alpha(tasks, codes, len(classes), matrix)
    if value is None:
        raise InputError("answers: Krippendorff's alpha needs a task with two labels or more, but every task has "
                         "one label")
    return value


def consistency(answers: pd.DataFrame, workers_skills: pd.Series | None = None, aggregator: Any = _MAJORITY_VOTE,
                by_task: bool = False) -> float | pd.Series:
    """The posterior probability of each task's aggregated label under workers of the given skills (crowd-kit's
    ``crowdkit.metrics.data.consistency``).

    A worker of skill ``s`` gives the true label with probability ``s`` and each other label with
    ``(1 - s) / (C - 1)`` (C: the distinct labels of ``answers``); a task's consistency is the product of its
    labels' probabilities under its aggregated label over the sum of those products under every label (0
    where they are all 0).  A worker ``workers_skills`` does not list counts for nothing.

    Parameters
    ----------
    answers : DataFrame
        Columns ``task``, ``worker`` and ``label``.
    workers_skills : Series, optional
        Skill by worker; default the aggregator's ``skills_``.
    aggregator : estimator, default a new ``MajorityVote()`` (the first tied label in the class order wins, as in
        crowd-kit)
        Fitted here with ``fit_predict(answers)``: its labels are the aggregated ones.
    by_task : bool
        Return each task's consistency (a Series indexed by task) instead of their mean.

    Returns
    -------
    float or Series
    """
    answers = _answers(answers)
    model, aggregated = _fit_predict(aggregator, answers)
    if workers_skills is None:
        if getattr(model, "skills_", None) is None:
            raise InputError(f"consistency: {type(model).__name__} has no skills_; pass workers_skills")
        workers_skills = model.skills_
    probabilities = _probabilities(answers, _skills(answers, workers_skills, None)).fillna(1.0)
    products = probabilities.groupby(answers["task"].to_numpy()).prod().rename_axis("task")
    chosen = aggregated.reindex(products.index).to_numpy()
    positions = products.columns.get_indexer(chosen)
    numerator = products.to_numpy()[np.arange(len(products)), positions]
    total = products.sum(axis=1).to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        values = np.where(total != 0, numerator / total, 0.0)
    result = pd.Series(values, index=products.index)
    return result if by_task else float(result.mean())


def uncertainty(answers: pd.DataFrame, workers_skills: pd.Series | None = None, aggregator: Any = None,
                compute_by: str = "task", aggregate: bool = True) -> float | pd.Series:
    """The entropy (nats) of each task's, or each worker's, label distribution (crowd-kit's
    ``crowdkit.metrics.data.uncertainty``).

    Each label spreads one unit over the classes as a worker of its skill would (``s`` on the label given,
    ``(1 - s) / (C - 1)`` on each other, :func:`consistency`); a task's (worker's) distribution is the sum over
    its labels, normalized.  Without skills every label weighs 1 on its class: a task's uncertainty is then
    its vote entropy (``items_['vote_entropy']``, docs/quality.md).

    Parameters
    ----------
    answers : DataFrame
        Columns ``task``, ``worker`` and ``label``.
    workers_skills : Series, optional
        Skill by worker; default the ``skills_`` of ``aggregator`` fitted on ``answers``, else 1.
    aggregator : estimator, optional
        Fitted here with ``fit(answers)`` when ``workers_skills`` is not given.
    compute_by : {"task", "worker"}
        Whose distributions.
    aggregate : bool
        Return their mean instead of the Series (indexed by task or worker).

    Returns
    -------
    float or Series

    Raises
    ------
    InputError
        For a worker without a skill.
    """
    answers = _answers(answers)
    check_choice("compute_by", compute_by, ("task", "worker"))
    if workers_skills is None and aggregator is not None:
        model = aggregator.fit(answers)
        workers_skills = getattr(model, "skills_", None)
        if workers_skills is None:
            raise InputError(f"uncertainty: {type(model).__name__} has no skills_; pass workers_skills")
    skill = _skills(answers, workers_skills, 1.0)
    if np.isnan(skill).any():
        missing = list(dict.fromkeys(answers["worker"].to_numpy()[np.isnan(skill)]))
        raise InputError(f"workers_skills: {len(missing)} workers have no skill, e.g. {missing[:3]!r}; give every "
                         "worker of answers a skill")
    sums = _probabilities(answers, skill).groupby(answers[compute_by].to_numpy()).sum().rename_axis(compute_by)
    values = sums.to_numpy()
    result = pd.Series(entropy(values / values.sum(axis=1, keepdims=True)), index=sums.index)
    return float(result.mean()) if aggregate else result


def accuracy_on_aggregates(answers: pd.DataFrame, aggregator: Any = _MAJORITY_VOTE,
                           aggregates: pd.Series | None = None, by: str | None = None) -> float | pd.Series:
    """The share of the labels that equal their task's aggregated label (crowd-kit's
    ``crowdkit.metrics.workers.accuracy_on_aggregates``).

    A label repeated on a task by its worker counts once; a ``weight`` column, where ``answers`` has one,
    weighs each label; labels of tasks without an aggregate count for nothing.

    Parameters
    ----------
    answers : DataFrame
        Columns ``task``, ``worker`` and ``label`` (and optionally ``weight``).
    aggregator : estimator, default a new ``MajorityVote()``
        Fitted here with ``fit_predict(answers)`` when ``aggregates`` is not given.
    aggregates : Series, optional
        The aggregated label by task.
    by : str, optional
        A column of ``answers`` (``"worker"``): return the accuracy per value of it (a Series) instead of over
        every label.

    Returns
    -------
    float or Series

    Raises
    ------
    ConfigError
        For neither ``aggregator`` nor ``aggregates``.
    """
    answers = _answers(answers)
    if aggregates is None and aggregator is None:
        raise ConfigError("accuracy_on_aggregates: give aggregator or aggregates")
    if aggregates is None:
        aggregates = _fit_predict(aggregator, answers)[1]
    columns = ["task", "worker", "label", *(["weight"] if "weight" in answers.columns else [])]
    frame = answers[columns].assign(true_label=aggregates.reindex(answers["task"].to_numpy()).to_numpy())
    frame = frame[frame["true_label"].notna()]
    weight = frame["weight"] if "weight" in frame.columns else pd.Series(1, index=frame.index)
    frame = frame.assign(weight=weight, score=weight * (frame["label"] == frame["true_label"]))
    frame = frame.sort_values("score").drop_duplicates(["task", "worker", "label"], keep="last")
    if by is None:
        return frame["score"].sum() / frame["weight"].sum()
    grouped = frame.groupby(by)
    return grouped["score"].sum() / grouped["weight"].sum()


METRICS = ("alpha_krippendorff", "consistency", "uncertainty", "accuracy_on_aggregates")
__all__ += [*METRICS, "binary_distance"]
