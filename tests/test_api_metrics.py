"""crowd-kit's metric functions in the pandas API: crowd-kit's signatures, return types and values.

Each function is compared with crowd-kit 1.4.2's on bundled crowds (binary, 5, 6 and 11 classes): equal within
1e-9 where both compute from the same aggregated labels and skills (crowd-kit's own aggregator passed to
both, given skills, or the default vote, which takes crowd-kit's tie rule)."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pandas as pd
import pytest

from crowdspark import api
from crowdspark.errors import ConfigError, InputError
from tests.helpers import DATA

crowdkit = pytest.importorskip("crowdkit.aggregation", reason="crowd-kit is not installed (pip install -e '.[test]')")
kit_data = pytest.importorskip("crowdkit.metrics.data")
kit_workers = pytest.importorskip("crowdkit.metrics.workers")

CROWDS = ("bluebird", "cf", "music_genre")


@pytest.fixture(scope="module", params=CROWDS)
def crowd(request):
    data = pd.read_csv(DATA / request.param / "labels.csv").rename(columns={"item": "task"})
    skills = pd.Series(np.random.default_rng(0).uniform(0.3, 1.0, data["worker"].nunique()),
                       index=np.sort(data["worker"].unique()))
    return data, skills


def assert_series(ours, theirs):
    assert isinstance(ours, pd.Series) and ours.index.name == theirs.index.name and ours.name == theirs.name
    assert sorted(ours.index) == sorted(theirs.index)
    np.testing.assert_allclose(ours.loc[theirs.index].to_numpy(), theirs.to_numpy(), rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", ["alpha_krippendorff", "consistency", "uncertainty", "accuracy_on_aggregates"])
def test_the_four_functions_take_crowd_kits_parameters_in_its_order(name):
    theirs = getattr(kit_workers if name == "accuracy_on_aggregates" else kit_data, name)
    ours = inspect.signature(getattr(api, name)).parameters
    expected = inspect.signature(theirs).parameters
    assert list(ours) == list(expected)
    for key, parameter in expected.items():
        if key == "aggregator" and parameter.default is not None:
            assert repr(ours[key].default) == "MajorityVote()"
        elif key != "distance":
            assert ours[key].default == parameter.default, key
    assert set(api.METRICS) <= set(api.__all__)


@pytest.mark.slow
def test_alpha_is_crowd_kits_with_its_default_and_another_distance(crowd):
    from nltk.metrics.distance import binary_distance, interval_distance

    data, _ = crowd
    ours = api.alpha_krippendorff(data)
    assert type(ours) is float
    assert ours == pytest.approx(kit_data.alpha_krippendorff(data), abs=1e-9)
    assert api.alpha_krippendorff(data, binary_distance) == pytest.approx(ours, abs=1e-12)
    interval = kit_data.alpha_krippendorff(data, interval_distance)
    assert api.alpha_krippendorff(data, interval_distance) == pytest.approx(interval, abs=1e-9)
    assert interval != pytest.approx(ours, abs=1e-3) or data["label"].nunique() == 2


def test_alpha_is_the_runs_quality_alpha():
    data = pd.read_csv(DATA / "rte" / "labels.csv").rename(columns={"item": "task"})
    fitted = api.MajorityVote().fit(data)
    assert api.alpha_krippendorff(data) == pytest.approx(fitted.quality_["krippendorff_alpha"], abs=1e-12)


@pytest.mark.slow
@pytest.mark.xfail(int(pd.__version__.split(".")[0]) >= 3, strict=False,
                   reason="on pandas 3 crowd-kit's own majority vote orders the classes as pandas 3's groupby does, "
                          "so its ties differ on cf and music_genre (equal on pandas 2)")
def test_consistency_is_crowd_kits(crowd):
    data, skills = crowd
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_series(api.consistency(data, by_task=True), kit_data.consistency(data, by_task=True))
        assert_series(api.consistency(data, skills, crowdkit.MajorityVote(), by_task=True),
                      kit_data.consistency(data, skills, crowdkit.MajorityVote(), by_task=True))
        some = skills.iloc[::2]  # an unlisted worker counts for nothing
        assert_series(api.consistency(data, some, crowdkit.MajorityVote(), True),
                      kit_data.consistency(data, some, crowdkit.MajorityVote(), True))
    mean = api.consistency(data)
    assert type(mean) is float and mean == pytest.approx(kit_data.consistency(data), abs=1e-9)


@pytest.mark.slow
def test_uncertainty_is_crowd_kits(crowd):
    data, skills = crowd
    for compute_by in ("task", "worker"):
        assert_series(api.uncertainty(data, compute_by=compute_by, aggregate=False),
                      kit_data.uncertainty(data, compute_by=compute_by, aggregate=False))
        assert_series(api.uncertainty(data, skills, compute_by=compute_by, aggregate=False),
                      kit_data.uncertainty(data, skills, compute_by=compute_by, aggregate=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = api.uncertainty(data, aggregator=crowdkit.Wawa())
        assert ours == pytest.approx(kit_data.uncertainty(data, aggregator=crowdkit.Wawa()), abs=1e-9)
    assert type(ours) is float
    with pytest.raises(InputError, match="workers have no skill"):
        api.uncertainty(data, skills.iloc[1:])


def test_uncertainty_without_skills_is_the_runs_vote_entropy():
    data = pd.read_csv(DATA / "rte" / "labels.csv").rename(columns={"item": "task"})
    fitted = api.MajorityVote().fit(data)
    ours = api.uncertainty(data, aggregate=False)
    np.testing.assert_allclose(ours.loc[fitted.items_.index].to_numpy(), fitted.items_["vote_entropy"].to_numpy(),
                               atol=1e-12)


@pytest.mark.slow
@pytest.mark.xfail(int(pd.__version__.split(".")[0]) >= 3, strict=False,
                   reason="on pandas 3 crowd-kit's own majority vote orders the classes as pandas 3's groupby does, "
                          "so its ties differ on cf and music_genre (equal on pandas 2)")
def test_accuracy_on_aggregates_is_crowd_kits(crowd):
    data, _ = crowd
    assert_series(api.accuracy_on_aggregates(data, by="worker"), kit_workers.accuracy_on_aggregates(data, by="worker"))
    assert api.accuracy_on_aggregates(data) == pytest.approx(kit_workers.accuracy_on_aggregates(data), abs=1e-9)
    aggregates = api.DawidSkene().fit_predict(data).iloc[::2]
    weighted = data.assign(weight=np.linspace(0.5, 1.0, len(data)))
    for frame in (data, weighted):
        assert_series(api.accuracy_on_aggregates(frame, None, aggregates, "task"),
                      kit_workers.accuracy_on_aggregates(frame, None, aggregates, "task"))
    with pytest.raises(ConfigError, match="give aggregator or aggregates"):
        api.accuracy_on_aggregates(data, None)


def test_the_default_vote_is_a_new_one_at_each_call():
    data = pd.read_csv(DATA / "bluebird" / "labels.csv").rename(columns={"item": "task"})
    first = api.accuracy_on_aggregates(data)
    api.accuracy_on_aggregates(data.iloc[: len(data) // 3])
    assert api.accuracy_on_aggregates(data) == first


def test_answers_without_crowd_kits_columns_are_refused():
    with pytest.raises(InputError, match="no column task"):
        api.alpha_krippendorff(pd.DataFrame({"item": [1], "worker": [1], "label": [1]}))
    with pytest.raises(InputError, match="pass a pandas DataFrame"):
        api.consistency([("t", "w", "l")])
