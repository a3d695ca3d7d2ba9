"""The pyspark.ml face: same answers as the command line and the pandas API, save/load, Pipeline, errors."""

from __future__ import annotations

import doctest
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

import crowdspark.ml as ml
from crowdspark.models.registry import algorithm_names
from crowdspark.api import Aggregator
from crowdspark.quality import ITEM_COLUMNS
from crowdspark.config import DEFAULT_ALGORITHM, EngineConfig, load_config, with_engine
from crowdspark.errors import ConfigError, InputError
from crowdspark.io.rules import Encoding
from crowdspark.ml import (
    BccAggregator,
    CrowdAggregator,
    CrowdAggregatorModel,
    DawidSkeneAggregator,
    FixedIdblaAggregator,
    IdblaAggregator,
    MajorityVoteAggregator,
    aggregate_df,
)
from crowdspark.models.base import ItemResult
from crowdspark.models.majority_vote import MajorityVote
from crowdspark.pipeline import aggregate, small_frame
from tests.helpers import DATA

LABELS = str(DATA / "rte" / "labels.csv")
TRUTH = str(DATA / "rte" / "truth.csv")
SEED = 5
#: (algorithm, parameters): the baselines and one IDBLA-family sampler with few sweeps
CASES = {"ds": {}, "mv": {}, "idbla": {"burn_in": 5, "n_samples": 5}, "glad": {"max_iter": 10}}


# --------------------------------------------------------------------------- no Spark needed


def test_params_have_docs_and_the_command_line_defaults():
    agg = CrowdAggregator()
    expected = {
        "itemCol": "item", "workerCol": "worker", "labelCol": "label", "algorithm": DEFAULT_ALGORITHM, "seed": 0,
        "algorithmParams": "{}", "classes": [], "partitions": 0, "maxBlockLabels": 2_000_000,
        "checkpointInterval": 10, "smallInputBytes": EngineConfig().small_input_bytes,
        "maxMemory": EngineConfig().max_memory, "handleUnknownWorkers": "error",
    }
    assert {p.name: agg.getOrDefault(p) for p in agg.params} == expected
    assert all(len(p.doc) > 20 for p in agg.params)
    assert "algorithm name, one of" in agg.explainParam("algorithm")


def test_max_memory_is_engine_max_memory_and_is_checked_at_construction():
    assert CrowdAggregator()._run_config().engine.max_memory_bytes == 0  # empty: a share of the host
    assert DawidSkeneAggregator(maxMemory="4g")._run_config().engine.max_memory_bytes == 4 << 30
    assert CrowdAggregator().setMaxMemory("512m").getMaxMemory() == "512m"
    for bad in ("lots", "-1g", True):
        with pytest.raises(ConfigError, match=r"^maxMemory must be a size such as \"4g\" or \"512m\""):
            CrowdAggregator(maxMemory=bad)
        with pytest.raises(ConfigError, match=r"^maxMemory must be a size"):
            CrowdAggregator().setMaxMemory(bad)


def test_subclasses_fix_the_algorithm_and_params_round_trip():
    subclasses = [MajorityVoteAggregator, DawidSkeneAggregator, BccAggregator, IdblaAggregator, FixedIdblaAggregator]
    assert [cls().getAlgorithm() for cls in subclasses] == ["mv", "ds", "bcc", "idbla", "fixed-idbla"]
    assert all(CrowdAggregator(algorithm=name).getAlgorithm() == name for name in algorithm_names())
    agg = DawidSkeneAggregator(algorithmParams='{"tol": 1e-8, "max_iter": 3}', itemCol="task", seed=7)
    assert agg.getAlgorithmParams() == {"max_iter": 3, "tol": 1e-8}
    assert agg.setParams(seed=8).getSeed() == 8 and agg.getItemCol() == "task"
    copied = agg.copy({agg.algorithmParams: {"smoothing": 1.0}})
    assert copied.getAlgorithmParams() == {"smoothing": 1.0} and agg.getAlgorithmParams()["max_iter"] == 3


@pytest.mark.parametrize("value", ["[1, 2]", "not json", 3])
def test_algorithm_params_must_be_a_json_object(value):
    with pytest.raises(ConfigError, match="algorithmParams must be a dict or a JSON object"):
        CrowdAggregator(algorithmParams=value)


def test_algorithm_params_and_seed_take_their_declared_types():
    config = DawidSkeneAggregator(algorithmParams={"max_iter": 5.0, "tol": 0}, seed=7.0)._run_config()
    typed = {k: (type(v), v) for k, v in config.algorithm_params().items()}
    assert typed == {"max_iter": (int, 5), "tol": (float, 0.0)} and type(config.seed) is int
    with pytest.raises(ConfigError, match=r"^maxIter must be an integer, but got 5.5$"):
        DawidSkeneAggregator(algorithmParams={"max_iter": 5.5})


@pytest.mark.parametrize("param", ["seed", "partitions", "maxBlockLabels", "checkpointInterval", "smallInputBytes"])
def test_int_params_take_integral_floats_and_refuse_the_rest_with_a_config_error(param):
    agg = CrowdAggregator(**{param: 3.0})
    assert repr(agg.getOrDefault(param)) == "3"
    for bad in (2.5, True, "3"):
        with pytest.raises(ConfigError, match=rf"^{param} must be an integer, but got {bad!r}$"):
            CrowdAggregator(**{param: bad})


@pytest.mark.spark
def test_fit_with_an_integral_float_parameter(labels):
    model = DawidSkeneAggregator(algorithmParams={"max_iter": 3.0}, seed=SEED).fit(labels)
    try:
        assert model.summary["parameters"]["max_iter"] == 3 and type(model.summary["parameters"]["max_iter"]) is int
        assert model.summary["iterations"] <= 3
    finally:
        model.close()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def labels(spark):
    return spark.read.csv(LABELS, header=True)


@pytest.fixture(scope="module")
def models(spark, labels):
    """Fitted models by algorithm, fitted once per module on first use."""
    cache: dict[str, CrowdAggregatorModel] = {}

    def get(algorithm: str) -> CrowdAggregatorModel:
        if algorithm not in cache:
            estimator = CrowdAggregator(algorithm=algorithm, seed=SEED, algorithmParams=CASES[algorithm])
            cache[algorithm] = estimator.fit(labels)
        return cache[algorithm]

    yield get
    for model in cache.values():
        model.close()


def by_item(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values("item").reset_index(drop=True)


def assert_same_items(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Labels (and levels) identical, posteriors and other numbers within 1e-9."""
    got, want = by_item(got), by_item(want)
    assert got["item"].tolist() == want["item"].tolist()
    assert got["label"].tolist() == want["label"].tolist()
    if "level" in want:
        assert got["level"].tolist() == want["level"].tolist()
    for column in ("posterior", "level_posterior"):
        if column in want:
            np.testing.assert_allclose(np.stack(got[column]), np.stack(want[column]), rtol=0, atol=1e-9)
    for column in ("confidence", "epsilon", "beta"):
        if column in want:
            np.testing.assert_allclose(got[column].astype(float), want[column].astype(float), rtol=0, atol=1e-9)


def cli_config(algorithm: str, engine: str):
    overrides = [f"{algorithm}.{key}={value}" for key, value in CASES[algorithm].items()]
    if engine == "spark":
        overrides.append("engine.small_input_bytes=0")  # the distributed engine, not the small-input path
    return load_config(overrides=overrides, algorithm=algorithm, engine_name=engine, seed=SEED)


# --------------------------------------------------------------------------- same answers everywhere


@pytest.mark.spark
@pytest.mark.parametrize("algorithm", list(CASES))
def test_ml_cli_and_pandas_api_give_the_same_answers(spark, labels, models, tmp_path, algorithm):
    model = models(algorithm)
    fitted = model.items.toPandas()
    local = aggregate(cli_config(algorithm, "local"), LABELS, None)
    cli_spark = aggregate(cli_config(algorithm, "spark"), LABELS, str(tmp_path / "out"), spark=spark).summary
    pandas_api = Aggregator(algorithm, seed=SEED, **CASES[algorithm]).fit(pd.read_csv(LABELS, dtype=str))
    assert_same_items(fitted, local.items)
    assert_same_items(pd.read_parquet(tmp_path / "out" / "items"), local.items)
    assert_same_items(pandas_api.items_.reset_index(), local.items)
    for summary in (model.summary, cli_spark, pandas_api.summary_):
        assert summary["counts"] == local.summary["counts"]
        assert summary["iterations"] == local.summary["iterations"]
        assert summary["parameters"] == local.summary["parameters"]
    workers = by_item(model.workers.toPandas().rename(columns={"worker": "item"}))
    want = by_item(local.workers.rename(columns={"worker": "item"}))
    assert workers["n_labels"].tolist() == want["n_labels"].tolist()
    np.testing.assert_allclose(np.stack(workers["accuracy"]), np.stack(want["accuracy"]), atol=1e-9)


@pytest.mark.spark
@pytest.mark.parametrize("algorithm", ["ds", "mv"])
def test_transform_of_the_training_labels_is_the_fitted_item_table(labels, models, algorithm):
    from chispa import assert_df_equality

    model = models(algorithm)
    scored = model.transform(labels)
    assert set(ITEM_COLUMNS) <= set(scored.columns)  # the per-item quality columns (docs/quality.md)
    assert_df_equality(scored, model.items, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.spark
def test_sampler_transform_scores_with_the_posterior_mean_parameters(labels, models):
    model = models("idbla")
    scored = by_item(model.transform(labels).toPandas())
    fitted = by_item(model.items.toPandas())
    assert list(scored.columns) == list(fitted.columns)
    assert scored["item"].tolist() == fitted["item"].tolist()
    assert scored["epsilon"].isna().all()
    np.testing.assert_allclose(np.stack(scored["posterior"]).sum(axis=1), 1.0, atol=1e-12)
    assert (scored["label"] == fitted["label"]).mean() > 0.98


@pytest.mark.spark
def test_aggregate_df_with_gold_matches_the_command_line(spark, labels):
    gold = spark.read.csv(TRUTH, header=True)
    items, workers, summary = aggregate_df(labels, "mv", gold_df=gold, seed=SEED)
    local = aggregate(cli_config("mv", "local"), LABELS, None, gold_path=TRUTH)
    assert_same_items(items.toPandas(), local.items)
    assert workers.count() == local.summary["counts"]["workers"]
    assert summary["metrics"]["error_rate"] == local.summary["metrics"]["error_rate"]
    assert summary["metrics"]["nll"] == pytest.approx(local.summary["metrics"]["nll"], abs=1e-9)


# --------------------------------------------------------------------------- the small-input path


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["ds", DEFAULT_ALGORITHM])
def test_a_small_frame_fits_on_the_driver_with_the_distributed_fits_answers(spark, labels, tmp_path, algorithm):
    """A DataFrame below the small-input rule fits with the local engine on the driver (the summary says so),
    smallInputBytes=0 fits it on Spark, and both give the same labels, posteriors (1e-9) and workers; the
    small path's model saves, loads and transforms like the distributed one."""
    from chispa import assert_df_equality

    small = CrowdAggregator(algorithm=algorithm, seed=SEED).fit(labels)
    spread = CrowdAggregator(algorithm=algorithm, seed=SEED, smallInputBytes=0).fit(labels)
    try:
        assert small.summary["engine"] == "local" and spread.summary["engine"] == "spark"
        assert "small_input" not in spread.summary
        rule = small.summary["small_input"]
        threshold = EngineConfig().small_input_bytes
        assert rule["rows"] == labels.count() and rule["threshold"] == threshold and rule["reader"] == "spark"
        assert rule["max_rows"] == threshold // small_frame.FRAME_LABEL_BYTES >= rule["rows"]
        assert 0 < rule["predicted_peak_bytes"] <= rule["budget_bytes"]
        assert rule["predicted_peak_bytes"] == small.summary["memory"]["predicted_peak_bytes"]
        assert_same_items(small.items.toPandas(), spread.items.toPandas())
        assert small.items.schema == spread.items.schema
        for key in ("counts", "iterations", "parameters", "classes"):
            assert small.summary[key] == spread.summary[key]
        assert small.encoding == spread.encoding and small.kernel == spread.kernel
        for name, value in spread.globalParams.items():
            np.testing.assert_allclose(small.globalParams[name], value, rtol=0, atol=1e-9)
        got, want = (by_item(m.workers.toPandas().rename(columns={"worker": "item"})) for m in (small, spread))
        assert got["n_labels"].tolist() == want["n_labels"].tolist()
        np.testing.assert_allclose(np.stack(got["accuracy"]), np.stack(want["accuracy"]), rtol=0, atol=1e-9)
        path = str(tmp_path / "small")
        small.write().save(path)
        loaded = CrowdAggregatorModel.load(path)
        assert loaded.summary["small_input"] == rule
        assert_df_equality(loaded.items, small.items, ignore_row_order=True, ignore_nullable=True,
                           allow_nan_equality=True)
        assert_same_items(loaded.transform(labels).toPandas(), spread.transform(labels).toPandas())
    finally:
        small.close()
        spread.close()


@pytest.mark.spark
def test_the_row_threshold_is_small_input_bytes_over_the_densest_bytes_per_label(labels):
    """A frame of exactly smallInputBytes / FRAME_LABEL_BYTES rows fits on the driver as a small input; one row
    more is left to the memory rule (on this local master: the driver, within the budget; on Spark with a
    maxMemory below the prediction); aggregate_df takes the same settings."""
    rows = labels.count()
    at = MajorityVoteAggregator(smallInputBytes=rows * small_frame.FRAME_LABEL_BYTES).fit(labels)
    over = MajorityVoteAggregator(smallInputBytes=rows * small_frame.FRAME_LABEL_BYTES - 1).fit(labels)
    tight = MajorityVoteAggregator(smallInputBytes=rows * small_frame.FRAME_LABEL_BYTES - 1,
                                   maxMemory="100m").fit(labels)
    try:
        assert at.summary["engine"] == "local" and at.summary["small_input"]["max_rows"] == rows
        assert at.summary["engine_choice"]["reason"] == "small input"
        assert over.summary["engine"] == "local" and "small_input" not in over.summary
        chosen = over.summary["engine_choice"]
        assert chosen["reason"] == "memory" and chosen["input"] == {**chosen["input"], "labels": rows, "method": "rows"}
        assert 0 < chosen["predicted_peak_bytes"] <= chosen["budget_bytes"]
        assert tight.summary["engine"] == "spark" and tight.summary["engine_choice"]["reason"] == "memory"
        assert tight.summary["engine_choice"]["budget_bytes"] == 100 << 20 and "small_input" not in tight.summary
    finally:
        at.close()
        over.close()
        tight.close()
    _, _, summary = aggregate_df(labels, "mv", small_input_bytes=0)
    assert summary["engine"] == "spark" and summary["engine_choice"]["reason"] == "forced distributed"
    _, _, summary = aggregate_df(labels, "mv", small_input_bytes=3, max_memory="100m")
    assert summary["engine"] == "spark" and summary["engine_choice"]["reason"] == "memory"
    _, _, summary = aggregate_df(labels, "mv")
    assert summary["engine"] == "local" and summary["small_input"]["rows"] == rows


@pytest.mark.spark
def test_a_small_frame_whose_fit_the_budget_does_not_hold_is_fitted_on_spark(labels):
    """The memory predictor's half of the rule: with a budget below the local fit's predicted peak the frame
    is not fitted on the driver (fit_small_frame says None, nothing is left open)."""
    config = with_engine(MajorityVoteAggregator()._run_config(), max_memory="1k")
    assert small_frame.max_frame_rows(config) >= labels.count()
    assert small_frame.fit_small_frame(config, labels) is None
    roomy = small_frame.fit_small_frame(with_engine(config, max_memory="64g"), labels)
    try:
        assert roomy is not None and roomy.summary["small_input"]["budget_bytes"] == 64 << 30
    finally:
        roomy.close()


# --------------------------------------------------------------------------- save and load


@pytest.mark.spark
@pytest.mark.parametrize("algorithm", ["ds", "idbla"])
def test_saved_and_reloaded_model_transforms_identically(labels, models, tmp_path, algorithm):
    from chispa import assert_df_equality

    model = models(algorithm)
    path = str(tmp_path / "model")
    model.write().save(path)
    loaded = CrowdAggregatorModel.load(path)
    assert loaded.uid == model.uid and loaded.kernel == model.kernel and loaded.encoding == model.encoding
    values = {p.name: model.getOrDefault(p) for p in model.params}
    assert {p.name: loaded.getOrDefault(p) for p in loaded.params} == values
    assert set(loaded.globalParams) == set(model.globalParams)
    for name, value in model.globalParams.items():
        assert type(loaded.globalParams[name]) is type(value)
        np.testing.assert_array_equal(loaded.globalParams[name], value)
    assert loaded.summary["counts"] == model.summary["counts"]
    assert_df_equality(loaded.transform(labels), model.transform(labels), ignore_row_order=True, ignore_nullable=True,
                       allow_nan_equality=True)
    assert_df_equality(loaded.items, model.items, ignore_row_order=True, ignore_nullable=True, allow_nan_equality=True)
    assert_df_equality(loaded.workers, model.workers, ignore_row_order=True, ignore_nullable=True,
                       allow_nan_equality=True)
    model.write().overwrite().save(path)  # an existing path needs overwrite()
    with pytest.raises(Exception, match="already exists"):
        model.write().save(path)


@pytest.mark.spark
@pytest.mark.parametrize("algorithm", ["ds", "dds"])
def test_one_saved_model_format_for_warm_start_and_ml(spark, labels, tmp_path, algorithm):
    """A model saved by crowdspark.ml warm starts a command-line run, and crowdspark.ml loads a command-line
    run's output: both hold the same model/ folder (crowdspark.io.saved_model)."""
    from crowdspark.io.saved_model import load_saved_model

    params = {"n_levels": 2} if algorithm == "dds" else {}
    model = CrowdAggregator(algorithm=algorithm, seed=SEED, algorithmParams=params).fit(labels)
    path = str(tmp_path / "ml-model")
    model.write().save(path)
    saved = load_saved_model(path)
    assert saved.algorithm == algorithm and saved.workers == model.encoding.workers
    overrides = [f"{algorithm}.{k}={v}" for k, v in params.items()]
    config = load_config(overrides=overrides, algorithm=algorithm, engine_name="local", seed=SEED)
    warm = aggregate(config, LABELS, str(tmp_path / "warm"), warm_start=path).summary
    cold = aggregate(config, LABELS, str(tmp_path / "cold")).summary
    assert warm["iterations"] < cold["iterations"]
    loaded = CrowdAggregatorModel.load(str(tmp_path / "cold"))
    assert loaded.getAlgorithm() == algorithm and loaded.getSeed() == SEED
    assert loaded.kernel.n_workers == cold["counts"]["workers"]
    assert loaded.summary["iterations"] == cold["iterations"]
    assert loaded.items.count() == cold["counts"]["items"] and loaded.workers.count() == cold["counts"]["workers"]
    scored = loaded.transform(labels).toPandas().sort_values("item", ignore_index=True)
    written = pd.read_parquet(tmp_path / "cold" / "items").sort_values("item", ignore_index=True)
    assert (scored["label"] == written["label"]).all()
    np.testing.assert_allclose(np.stack(scored["posterior"]), np.stack(written["posterior"]), atol=1e-9)


@pytest.mark.spark
def test_a_model_saved_in_format_1_still_loads(spark, labels, models, tmp_path):
    """A format-1 save (its arrays in a Parquet table beside pyspark's metadata) loads and scores the same."""
    from chispa import assert_df_equality
    from pyspark.ml.util import DefaultParamsWriter

    model = models("ds")
    base = str(tmp_path / "v1")
    extra = {"format": 1, "algorithm": "ds", "hyperparameters": {"seed": SEED, "max_iter": 100, "tol": 1e-6,
             "smoothing": 0.5}, "classes": list(model.encoding.classes), "n_workers": model.encoding.n_workers,
             "summary": model.summary, "has_items": False}
    DefaultParamsWriter.saveMetadata(model, base, spark, extraMetadata={"crowdspark": extra})
    rows = [("params", k, "array", v.dtype.str, list(v.shape), bytearray(v.tobytes()))
            for k, v in model.globalParams.items()]
    schema = "section string, name string, kind string, dtype string, shape array<bigint>, data binary"
    spark.createDataFrame(rows, schema).write.parquet(f"{base}/params")
    spark.createDataFrame(list(enumerate(model.encoding.workers)), "index bigint, worker string").write.parquet(
        f"{base}/encoding")
    model.workers.write.parquet(f"{base}/workers")
    loaded = CrowdAggregatorModel.load(base)
    assert loaded.kernel == model.kernel and loaded.encoding == model.encoding
    assert_df_equality(loaded.transform(labels), model.transform(labels), ignore_row_order=True,
                       ignore_nullable=True)


# --------------------------------------------------------------------------- Pipeline


@pytest.mark.spark
def test_inside_a_pipeline_that_renames_columns_and_after_save_and_load(labels, models, tmp_path):
    from chispa import assert_df_equality
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import SQLTransformer

    rename = SQLTransformer(statement="SELECT item AS task, worker AS annotator, label FROM __THIS__")
    aggregator = MajorityVoteAggregator(itemCol="task", workerCol="annotator", seed=SEED)
    pipeline = Pipeline(stages=[rename, aggregator])
    fitted = pipeline.fit(labels)
    assert fitted.stages[1].summary["engine"] == "local"  # RTE is small: fitted on the driver
    expected = models("mv").items
    assert_df_equality(fitted.transform(labels), expected, ignore_row_order=True, ignore_nullable=True)
    pipeline.write().save(str(tmp_path / "pipeline"))
    assert Pipeline.load(str(tmp_path / "pipeline")).getStages()[1].getItemCol() == "task"
    fitted.write().save(str(tmp_path / "pipeline_model"))
    reloaded = PipelineModel.load(str(tmp_path / "pipeline_model"))
    assert isinstance(reloaded.stages[1], CrowdAggregatorModel)
    assert_df_equality(reloaded.transform(labels), expected, ignore_row_order=True, ignore_nullable=True)
    closed = fitted.stages[1]
    closed.close()  # frees the item table's checkpoint; the model still transforms and saves
    with pytest.raises(ConfigError, match=r"has no item table: close\(\) released it"):
        closed.items
    closed.write().save(str(tmp_path / "closed"))
    reloaded_closed = CrowdAggregatorModel.load(str(tmp_path / "closed"))
    assert reloaded_closed.kernel == closed.kernel
    with pytest.raises(ConfigError, match="has no item table"):
        reloaded_closed.items


# --------------------------------------------------------------------------- errors


@pytest.mark.spark
def test_input_errors_are_the_command_lines(spark, labels):
    with pytest.raises(InputError) as from_ml:
        CrowdAggregator(itemCol="task").fit(labels)
    with pytest.raises(InputError) as from_pandas:
        Aggregator("ds", item="task").fit(pd.read_csv(LABELS, dtype=str))
    core = "has no column(s) ['task']; present columns: ['item', 'worker', 'label']"
    assert core in str(from_ml.value) and core in str(from_pandas.value)
    # each face names the settings its own way
    assert "itemCol='<column>'" in str(from_ml.value) and "--set" not in str(from_ml.value)
    assert "item='<column>'" in str(from_pandas.value) and "--set" not in str(from_pandas.value)
    with pytest.raises(InputError, match=r"value\(s\) \['1'\] outside the configured classes \['0', 'yes'\]"):
        CrowdAggregator(classes=["0", "yes"]).fit(labels)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"algorithm": "nope"}, r"algorithm must be one of \[.*'ds'.*\], but got 'nope'"),
        ({"algorithmParams": {"max_iter": 0}}, r"^maxIter must be an integer >= 1, but got 0"),
        ({"algorithm": "ds", "algorithmParams": {"maxiter": 5}},
         r"^unknown parameter\(s\) maxiter for algorithm 'ds'; known: mStep, maxIter, smoothing, stop, tol \(did you mean 'maxIter'\?\)$"),
        ({"algorithm": "ds", "algorithmParams": {"n_iter": 3}},
         r"^unknown parameter\(s\) nIter for algorithm 'ds'; known: mStep, maxIter, smoothing, stop, tol \(did you mean 'maxIter'\?\)$"),
        ({"seed": -1}, r"seed must be an integer >= 0, but got -1"),
        ({"partitions": -2}, r"^partitions must be an integer >= 0, but got -2"),
        ({"smallInputBytes": -1}, r"^smallInputBytes must be an integer >= 0, but got -1"),
    ],
)
def test_config_errors_name_the_settings_as_this_face_does_when_the_estimator_is_built(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        CrowdAggregator(**kwargs)
    if "algorithmParams" in kwargs:
        with pytest.raises(ConfigError, match=message):
            DawidSkeneAggregator().setAlgorithmParams(kwargs["algorithmParams"])


def test_setting_another_algorithm_is_checked_and_params_take_this_faces_names():
    with pytest.raises(ConfigError, match=r"algorithm must be one of .*, but got 'nope'"):
        CrowdAggregator().setAlgorithm("nope")
    with pytest.raises(ConfigError, match=r"algorithm must be one of .*, but got 'nope'"):
        CrowdAggregator().setParams(algorithm="nope")
    config = CrowdAggregator(algorithm="ds", algorithmParams={"maxIter": 3, "tol": 0.1})._run_config()
    assert config.algorithm_params() == {"max_iter": 3, "tol": 0.1}
    with pytest.raises(ConfigError, match=r"^maxIter is given twice in algorithmParams \(as maxIter and as max_iter\); give it once$"):
        CrowdAggregator(algorithm="ds", algorithmParams={"max_iter": 3, "maxIter": 4})


def test_a_pandas_frame_is_pointed_to_the_pandas_api():
    frame = pd.read_csv(LABELS, dtype=str)
    with pytest.raises(InputError, match=r"^fit: pass a Spark DataFrame of labels, but got a DataFrame\. For a "
                                         r"pandas DataFrame use crowdspark.api"):
        CrowdAggregator().fit(frame)
    with pytest.raises(InputError, match=r"^fit: pass a Spark DataFrame .*crowdspark.api"):
        aggregate_df(frame, "mv")


@pytest.mark.spark
def test_transform_refuses_unknown_workers_or_skips_them_and_refuses_new_classes(spark, labels, models):
    model = models("ds")
    extra = spark.createDataFrame([("266", "new-worker", "1")], labels.schema)
    unknown = r"1 worker\(s\) were not seen when the model was fitted, e.g. \['new-worker'\]"
    with pytest.raises(InputError, match=unknown):
        model.transform(labels.unionByName(extra))
    skipping = model.copy({model.handleUnknownWorkers: "skip"})
    assert skipping.transform(labels.unionByName(extra)).count() == 800
    other_class = spark.createDataFrame([("266", "AEX5NCH03LWSG", "2")], labels.schema)
    with pytest.raises(InputError, match=r"value\(s\) \['2'\] outside the configured classes \['0', '1'\]"):
        model.transform(other_class)
    with pytest.raises(ConfigError, match=r"handleUnknownWorkers must be one of \['error', 'skip'\]"):
        model.copy({model.handleUnknownWorkers: "keep"}).transform(labels)


@dataclass(frozen=True)
class _StatefulVote(MajorityVote):
    """A test kernel whose per-item results need per-item state (like collapsed VI)."""

    def finish_block(self, block: Any, state: Any, params: Any) -> ItemResult:
        assert state is not None
        return super().finish_block(block, state, params)


@pytest.mark.spark
def test_transform_refuses_models_that_need_per_item_state(labels):
    encoding = Encoding(("a", "b"), ("0", "1"))
    model = CrowdAggregatorModel(kernel=_StatefulVote(2, 2), globalParams={}, encoding=encoding)
    with pytest.raises(ConfigError, match="keeps per-item state and cannot score labels"):
        model.transform(labels)


def test_an_unfitted_model_says_so():
    with pytest.raises(ConfigError, match="has no item table; fit a CrowdAggregator or load a model"):
        CrowdAggregatorModel().items


# --------------------------------------------------------------------------- docstrings


@pytest.mark.spark
def test_docstring_examples_run(spark):
    import crowdspark.ml.estimator

    attempted = 0
    for module in (ml, crowdspark.ml.estimator):
        result = doctest.testmod(module, extraglobs={"spark": spark}, optionflags=doctest.ELLIPSIS, verbose=False)
        assert result.failed == 0
        attempted += result.attempted
    assert attempted >= 10
