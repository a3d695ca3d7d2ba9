"""A pandas API in crowd-kit's style, for users without a cluster.

>>> import pandas as pd
>>> from crowdspark.api import DawidSkene
>>> df = pd.DataFrame({"item": ["a", "a", "a", "b", "b", "b"],
...                    "worker": ["w1", "w2", "w3", "w1", "w2", "w3"],
...                    "label": ["x", "x", "y", "y", "y", "y"]})
>>> DawidSkene(seed=0).fit_predict(df).to_dict()
{'a': 'x', 'b': 'y'}

Data from crowd-kit uses a ``task`` column: pass ``item="task"``.  Every estimator runs the same kernels
as the Spark engine (on the local engine) and validates its input with the same messages.  Fitted
attributes end in ``_``: ``labels_`` (Series item -> label), ``probas_`` (DataFrame item x class),
``workers_`` (the worker table), ``classes_``, ``history_`` (per iteration), ``n_iter_``, ``converged_``,
``summary_`` (what ``summary.json`` would hold).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from crowdspark.config import GoldConfig, InputConfig, RunConfig
from crowdspark.errors import InputError
from crowdspark.pipeline import aggregate_frames

__all__ = ["Aggregator", "MajorityVote", "DawidSkene"]


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
        The algorithm's parameters (see ``crowdspark algorithms``).
    """

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
        self.params = params

    def _config(self) -> RunConfig:
        return RunConfig(
            algorithm=self.algorithm,
            seed=self.seed,
            input=InputConfig(item=self.item, worker=self.worker, label=self.label, classes=self.classes),
            gold=GoldConfig(item=self.item, truth="truth"),
            algorithms={self.algorithm: dict(self.params)},
        )

    def fit(self, data: pd.DataFrame, gold: pd.DataFrame | None = None) -> "Aggregator":
        """Fit on a labels frame; ``gold`` (columns ``<item>``, ``truth``) adds ``summary_['metrics']``.

        Raises
        ------
        InputError
            For data that is not a pandas DataFrame, a frame naming a column twice, and every input error
            of the command line (missing columns, nulls, ...).
        """
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


class MajorityVote(Aggregator):
    """Majority vote; ties broken at random from ``seed``."""

    def __init__(self, *, seed: int = 0, **kwargs: Any) -> None:
        super().__init__("mv", seed=seed, **kwargs)


class DawidSkene(Aggregator):
    """Dawid-Skene EM from majority vote (see :class:`crowdspark.models.dawid_skene.DawidSkene`).

    Parameters
    ----------
    max_iter : int
    tol : float
    smoothing : float
        Dirichlet pseudo-count.
    """

    def __init__(
        self, *, max_iter: int = 100, tol: float = 1e-6, smoothing: float = 0.5, seed: int = 0, **kwargs: Any
    ) -> None:
        super().__init__("ds", seed=seed, max_iter=max_iter, tol=tol, smoothing=smoothing, **kwargs)
