"""The pandas API's crowd-kit interface without crowd-kit: true_labels, initial_error, the fitted attributes'
layouts and the frames' own value types (``tests/test_crowdkit_compat.py`` runs crowd-kit beside it)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdspark.api import CLASSES, DawidSkene, GoldMajorityVote, MajorityVote, Wawa
from crowdspark.errors import ConfigError, InputError
from crowdspark.models.registry import model_class
from tests.helpers import DATA


@pytest.fixture(scope="module")
def rte():
    """RTE as crowd-kit users read it: integer tasks and labels, a task column."""
    data = pd.read_csv(DATA / "rte" / "labels.csv").rename(columns={"item": "task"})
    gold = pd.read_csv(DATA / "rte" / "truth.csv").set_index("item")["truth"]
    return data, gold


def test_fitted_attributes_keep_the_frames_values_and_crowd_kits_names(rte):
    data, _ = rte
    model = DawidSkene(n_iter=50).fit(data)
    assert model.labels_.name == "agg_label" and model.labels_.index.name == "task"
    assert model.labels_.dtype == np.int64 and model.labels_.index.dtype == np.int64
    assert list(model.probas_.columns) == [0, 1] and model.probas_.columns.name == "label"
    assert model.classes_ == [0, 1]
    np.testing.assert_allclose(model.probas_.sum(axis=1), 1.0)
    assert (model.probas_.idxmax(axis=1) == model.labels_).all()
    assert model.priors_.name == "prior" and model.priors_.index.name == "label"
    np.testing.assert_allclose(model.priors_.sum(), 1.0)
    assert model.skills_.name == "skill" and model.skills_.index.name == "worker"
    assert model.errors_.index.names == ["worker", "label"] and list(model.errors_.columns) == [0, 1]
    # a row per (worker, label) the worker gave, holding P(label | true label) from its confusion matrix
    pairs = data[["worker", "label"]].drop_duplicates()
    assert len(model.errors_) == len(pairs)
    worker, given = pairs.iloc[0]
    confusion = np.asarray(list(model.workers_.loc[worker, "confusion"]), dtype=float)
    np.testing.assert_allclose(model.errors_.loc[(worker, given)].to_numpy(), confusion[:, given])
    assert model.loss_history_ == [h["objective"] for h in model.summary_["history"]]


def test_string_frames_give_strings_as_before():
    data = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str)
    model = DawidSkene(seed=0).fit(data)
    assert model.labels_.index.name == "item" and model.classes_ == ["1", "2"]
    assert model.labels_.map(type).eq(str).all()


def test_true_labels_are_held_fixed_in_the_fit(rte):
    data, gold = rte
    wrong = 1 - gold.iloc[::4]  # contradict the gold on a quarter of the items: the fit must follow
    model = DawidSkene().fit(data, wrong)
    assert (model.labels_.loc[wrong.index] == wrong).all()
    assert (model.probas_.loc[wrong.index].max(axis=1) == 1.0).all()
    assert model.summary_["gold_split"]["fit_items"] == len(wrong)
    assert "metrics" in model.summary_ and model.summary_["metrics"]["n_gold"] == 0
    free = DawidSkene().fit(data)
    assert not model.workers_["accuracy"].equals(free.workers_["accuracy"])
    assert GoldMajorityVote().fit_predict(data, gold.iloc[::3]).loc[gold.index[::3]].equals(gold.iloc[::3].rename(
        "agg_label").rename_axis("task"))


def test_bad_true_labels_get_the_existing_errors(rte):
    data, gold = rte
    unknown = pd.concat([gold.iloc[:10], pd.Series({999999: 1})])
    model = DawidSkene().fit(data, unknown)
    assert model.summary_["counts"]["gold_items_without_labels"] == 1
    with pytest.raises(InputError, match=r"truth.*'7'"):
        DawidSkene().fit(data, gold.iloc[:10].replace({1: 7}))
    with pytest.raises(InputError, match=r"true_labels: pass a pandas Series"):
        DawidSkene().fit(data, [1, 0])
    with pytest.raises(ConfigError, match=r"not both"):
        DawidSkene().fit(data, gold, gold=gold.rename_axis("task").rename("truth").reset_index())


def test_gold_scores_with_a_share_of_it_in_the_fit(rte):
    data, gold = rte
    frame = gold.rename_axis("task").rename("truth").reset_index()
    model = DawidSkene(gold_fit_fraction=0.3, gold_split_seed=1).fit(data, gold=frame)
    split = model.summary_["gold_split"]
    assert split["fit_fraction"] == 0.3 and split["seed"] == 1
    assert split["held_out_items"] == model.summary_["metrics"]["n_gold"] and split["fit_items"] > 150
    positional = DawidSkene(gold_fit_fraction=0.3, gold_split_seed=1).fit(data, frame)  # fit(data, gold_frame)
    assert positional.summary_["metrics"] == model.summary_["metrics"]


def test_initial_error_in_crowd_kits_layout_starts_the_workers(rte):
    data, _ = rte
    first = DawidSkene().fit(data)
    again = DawidSkene().fit(data, initial_error=first.errors_)
    assert again.summary_["warm_start"]["workers_known"] == data["worker"].nunique()
    assert again.n_iter_ < first.n_iter_
    assert (again.labels_ == first.labels_).mean() > 0.99
    table = DawidSkene().fit(data, initial_error=first.workers_)
    assert table.summary_["warm_start"]["workers_known"] == data["worker"].nunique()
    some = sorted(data["worker"].unique())[:50]
    partial = first.errors_.loc[first.errors_.index.get_level_values("worker").isin(some)]
    started = DawidSkene().fit(data, initial_error=partial)
    assert started.summary_["warm_start"]["workers_listed"] == started.summary_["warm_start"]["workers_known"] == 50


def test_crowd_kit_parameters(rte):
    data, _ = rte
    assert MajorityVote(random_state=5).seed == 5
    with pytest.raises(ConfigError, match="seed is given twice"):
        MajorityVote(seed=1, random_state=5)
    with pytest.raises(ConfigError, match="initial_error_strategy must be one of"):
        DawidSkene(initial_error_strategy="add")
    assert DawidSkene(initial_error_strategy="assign").initial_error_strategy == "assign"
    both = data.assign(item=data["task"])
    with pytest.raises(InputError, match="both a task and an item column"):
        Wawa().fit(both)
    assert Wawa(item="item").fit(both).labels_.index.name == "item"


def _int_ids(data: pd.DataFrame) -> pd.DataFrame:
    """``data`` with integer workers too (RTE's tasks and labels are integers already)."""
    return data.assign(worker=pd.factorize(data["worker"], sort=True)[0].astype(np.int64) + 1000)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_attribute_of_every_class_keeps_the_callers_ids_and_dtype(rte, name):
    data, gold = _int_ids(rte[0].iloc[:1500]), rte[1]
    model = CLASSES[name]().fit(data, true_labels=gold.loc[gold.index.isin(data["task"])].iloc[::3])
    tasks, workers = pd.Index(data["task"].unique()), pd.Index(data["worker"].unique())
    by_task = {"labels_": model.labels_, "probas_": model.probas_, "items_": model.items_}
    by_worker = {"skills_": model.skills_, "workers_": model.workers_}
    by_task.update({a: getattr(model, a) for a, (t, c) in model_class(model.algorithm).api_attributes.items()
                    if t == "items" and isinstance(c, str)})
    by_worker.update({a: getattr(model, a) for a, (t, c) in model_class(model.algorithm).api_attributes.items()
                      if t == "workers" and isinstance(c, str)})
    for attr, frame in by_task.items():
        assert frame.index.dtype == np.int64 and set(frame.index) == set(tasks), attr
    for attr, frame in by_worker.items():
        assert frame.index.dtype == np.int64 and set(frame.index) <= set(workers), attr
    assert model.labels_.dtype == model.items_["label"].dtype == np.int64
    assert len(model.labels_.to_frame().join(model.items_[["confidence"]])) == len(tasks)
    assert model.items_.loc[model.labels_.index, "label"].equals(model.labels_.rename("label"))
    if hasattr(model, "errors_"):
        assert model.errors_.index.get_level_values("worker").dtype == np.int64
        assert model.errors_.index.get_level_values("label").dtype == np.int64
    if hasattr(model, "priors_"):
        assert model.priors_.index.dtype == np.int64
    assert list(model.probas_.columns) == model.classes_ and all(type(c) is int for c in model.classes_)
    assert model.relabel_["task"].dtype == model.relabel_["label"].dtype == np.int64
