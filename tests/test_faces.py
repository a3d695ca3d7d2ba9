"""One registry drives every face: each registered algorithm has a class in the pandas API and the pyspark.ml
face with the same parameters, and every face names settings its own way in messages."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

import crowdspark.api as api
import crowdspark.ml as ml
from crowdspark.cli import build_parser, main
from crowdspark.errors import ConfigError, InputError
from crowdspark.faces import CLI, ML, PANDAS, camel, display_key, setting, using_face
from crowdspark.models.registry import MODELS, algorithm_names, hyperparameters, model_class
from tests.helpers import DATA


def test_every_registered_model_has_a_class_in_each_face():
    for model in MODELS:
        pandas_class = getattr(api, model.api_name)
        assert pandas_class.algorithm_name == model.name and issubclass(pandas_class, api.Aggregator)
        estimator = getattr(ml, f"{model.api_name}Aggregator")
        assert estimator().getAlgorithm() == model.name and issubclass(estimator, ml.CrowdAggregator)
        fields = hyperparameters(model.name)
        assert {p.name for p in estimator().params} >= {camel(f) for f in fields}
        assert all(estimator.__dict__[camel(f)].doc for f in fields)
    assert sorted(m.name for m in MODELS) == sorted(algorithm_names())


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_the_faces_take_the_same_parameters_and_check_them_when_built(model):
    for field, default in hyperparameters(model.name).items():
        pandas_object = getattr(api, model.api_name)(**{field: default})
        assert pandas_object.params == {field: default}
        estimator = getattr(ml, f"{model.api_name}Aggregator")
        assert estimator(**{field: default})._algorithm_params() == {field: default}
        assert estimator(**{camel(field): default})._algorithm_params() == {field: default}
    with pytest.raises(ConfigError, match="unknown parameter"):
        getattr(api, model.api_name)(no_such_parameter=1)
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) \['noSuchParameter'\]"):
        getattr(ml, f"{model.api_name}Aggregator")(noSuchParameter=1)


def test_a_class_for_one_algorithm_refuses_another():
    with pytest.raises(ConfigError, match=r"DawidSkene always runs 'ds'; .*Aggregator\('mv'\)"):
        api.DawidSkene(algorithm="mv")
    with pytest.raises(ConfigError, match=r"DawidSkeneAggregator always runs 'ds'"):
        ml.DawidSkeneAggregator(algorithm="mv")
    with pytest.raises(ConfigError, match=r"always runs 'ds', but its algorithm Param was set to 'mv'"):
        ml.DawidSkeneAggregator().setAlgorithm("mv")


def test_crowd_kit_and_pyspark_names_are_aliases_of_one_setting():
    assert api.DawidSkene(n_iter=7).params == {"max_iter": 7}
    with pytest.raises(ConfigError, match="max_iter is given twice"):
        api.DawidSkene(n_iter=7, max_iter=8)
    assert ml.DawidSkeneAggregator(maxIter=7).getMaxIter() == 7
    assert ml.DawidSkeneAggregator(max_iter=7)._algorithm_params() == {"max_iter": 7}
    with pytest.raises(ConfigError, match="maxIter is given twice"):
        ml.DawidSkeneAggregator(maxIter=7, max_iter=8)
    with pytest.raises(ConfigError, match=r"maxIter is set twice on DawidSkeneAggregator \(as a Param and in "
                                          r"algorithmParams\)"):
        ml.DawidSkeneAggregator(maxIter=7, algorithmParams={"max_iter": 9})
    # a level model's H is chosen from the data unless it is set
    assert ml.DifficultyDawidSkeneAggregator().getNLevels() is None
    assert ml.DifficultyDawidSkeneAggregator()._algorithm_params() == {}


def test_messages_name_settings_as_the_calling_face_does():
    assert (display_key("ds.max_iter"), setting("input.item", "task")) == ("ds.max_iter", "--set input.item=task")
    with using_face(PANDAS):
        assert (display_key("ds.max_iter"), setting("input.item", "task")) == ("max_iter", "item='task'")
    with using_face(ML):
        assert (display_key("ds.max_iter"), setting("input.item", "task")) == ("maxIter", "itemCol='task'")
    with pytest.raises(ConfigError, match=r"^max_iter must be an integer, but got 2.5$"):
        api.DawidSkene(max_iter=2.5)
    with pytest.raises(ConfigError, match=r"^maxIter must be an integer, but got 2.5$"):
        ml.DawidSkeneAggregator(maxIter=2.5)
    frame = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str).rename(columns={"item": "question"})
    with pytest.raises(InputError) as missing:
        api.DawidSkene().fit(frame)
    assert "item='<column>'" in str(missing.value) and "(crowd-kit data: item='task')" in str(missing.value)
    assert "--set" not in str(missing.value)
    assert api.DawidSkene(item="question").fit(frame).labels_.index.name == "question"
    # crowd-kit's task column is read without item=
    tasks = frame.rename(columns={"question": "task"})
    assert api.DawidSkene().fit(tasks).labels_.index.name == "task"


def test_the_command_line_lists_every_registered_algorithm():
    assert build_parser().parse_args(["aggregate", "--labels", "x", "--output", "y"]).command == "aggregate"
    out = subprocess.run([sys.executable, "-m", "crowdspark", "algorithms", "--json"], check=True,
                         capture_output=True, text=True)
    listing = json.loads(out.stdout)
    assert list(listing) == algorithm_names()
    for name, entry in listing.items():
        cls = model_class(name)
        assert entry["title"] == cls.title and entry["description"] == cls.description
        assert set(entry["parameters"]) == set(hyperparameters(name))
        assert all(param["doc"] for param in entry["parameters"].values())
    assert "chosen among [1, 2] by BIC" in listing["dds"]["parameters"]["n_levels"]["default"]
    assert main(["algorithms"]) == 0
    assert CLI == "cli"


def test_every_face_runs_one_default_algorithm():
    import inspect

    from crowdspark.config import DEFAULT_ALGORITHM, RunConfig, load_config

    assert ml.CrowdAggregator().getAlgorithm() == DEFAULT_ALGORITHM
    assert inspect.signature(ml.aggregate_df).parameters["algorithm"].default == DEFAULT_ALGORITHM
    assert api.Aggregator().algorithm == DEFAULT_ALGORITHM
    assert RunConfig().algorithm == load_config().algorithm == DEFAULT_ALGORITHM
    args = build_parser().parse_args(["aggregate", "--labels", "x.csv", "--output", "o"])
    assert load_config(args.config, args.overrides, algorithm=args.algorithm).algorithm == DEFAULT_ALGORITHM
