"""Configuration files, overrides and their errors."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from dataclasses import fields

import pandas as pd
import pytest
import tomllib

from crowdspark.config import (
    EngineConfig,
    GoldConfig,
    InputConfig,
    OutputConfig,
    RunConfig,
    load_config,
)
from crowdspark.errors import ConfigError
from crowdspark.models.registry import (
    algorithm_names,
    build_model,
    hyperparameters,
    model_class,
)
from tests.helpers import DATA

DEFAULT = DATA.parent / "conf" / "default.toml"


def test_default_toml_is_generated_from_the_code_and_holds_every_default():
    from crowdspark.config import NightlyConfig, SparkConfig
    from crowdspark.defaults import render_defaults

    assert DEFAULT.read_text() == render_defaults(), "conf/default.toml is stale: run `crowdspark defaults`"
    tree = tomllib.loads(DEFAULT.read_text())
    defaults = RunConfig()
    assert tree["algorithm"] == defaults.algorithm and tree["seed"] == defaults.seed
    for name, cls in (("input", InputConfig), ("gold", GoldConfig), ("output", OutputConfig), ("engine", EngineConfig),
                      ("spark", SparkConfig), ("nightly", NightlyConfig)):
        obj = cls()
        expected = {f.name: (list(v) if isinstance(v := getattr(obj, f.name), tuple) else v) for f in fields(cls)}
        assert tree[name] == expected, name
    for algorithm in algorithm_names():
        expected = hyperparameters(algorithm)
        if getattr(model_class(algorithm), "auto_levels", ()):  # H is chosen at run time unless n_levels is set
            del expected["n_levels"]
        assert tree.get(algorithm, {}) == expected, algorithm
    assert load_config([DEFAULT]) == RunConfig(algorithms={k: v for k, v in tree.items() if k in algorithm_names()})


def test_spark_tuning_keys_live_in_their_own_section():
    assert load_config(overrides=["spark.partitions=4"]).spark.partitions == 4
    with pytest.raises(ConfigError, match=r"engine.partitions moved to the \[spark\] section .*write spark.partitions"):
        load_config(overrides=["engine.partitions=4"])
    with pytest.raises(ConfigError, match="unknown configuration key"):
        load_config(overrides=["engine.inject_task_failure=3"])  # a test hook, not a setting


def test_precedence_file_then_set_then_flags(tmp_path):
    conf = tmp_path / "a.toml"
    conf.write_text('seed = 4\nalgorithm = "ds"\n[ds]\nmax_iter = 7\n[spark]\npartitions = 2\n')
    config = load_config([conf], ["ds.max_iter=9", "seed=5"], seed=6, engine_name="local")
    assert config.seed == 6 and config.algorithm == "ds"
    assert config.algorithm_params("ds") == {"max_iter": 9}
    assert config.spark.partitions == 2 and config.engine.name == "local"


def test_set_values_are_read_as_toml_then_as_strings():
    config = load_config(overrides=["input.item=task", "ds.tol=1e-3", 'input.classes=["b", "a"]'], algorithm="ds")
    assert config.input.item == "task"
    assert config.algorithm_params("ds") == {"tol": 1e-3}
    assert config.input.classes == ("b", "a")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["nonsense"], r"--set must be KEY=VALUE \(e.g. ds.max_iter=50\), but got 'nonsense'"),
        (["input.colour=red"], r"unknown configuration key\(s\) input.colour; known keys in \[input\]"),
        (["input.format=xls"], r"input.format must be one of \['auto', 'csv', 'parquet', 'json'\], but got 'xls'"),
        (["input.item=label"], r"must be three different columns"),
        (['input.classes=["a", "a"]'], r"input.classes must not repeat a class"),
        (["input.classes=a"], r"input.classes must be a list"),
        (["engine.name=flink"], r"engine.name must be one of \['spark', 'local'\], but got 'flink'"),
        (["engine.max_block_labels=0"], r"engine.max_block_labels must be an integer >= 1, but got 0"),
        (["spark.session_sweeps=0"], r"spark.session_sweeps must be an integer >= 1, but got 0"),
        (["bogus=1"], r"unknown configuration key 'bogus'"),
        (["sed=3"], r"unknown configuration key 'sed' \(did you mean 'seed'\?\); top-level keys are algorithm, seed"),
        (["seed=1.5"], r"seed must be an integer, but got 1.5"),
    ],
)
def test_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides)


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match=r"configuration file .*nope.toml' does not exist"):
        load_config([tmp_path / "nope.toml"])
    bad = tmp_path / "bad.toml"
    bad.write_text("seed = = 1")
    with pytest.raises(ConfigError, match=r"is not valid TOML"):
        load_config([bad])


@pytest.mark.parametrize(
    "cores, labels, expected",
    [(2, 1_000, 2), (2, 10_000_000, 4), (2, 100_000_000, 26), (8, 10_000_000, 8), (3, 40_000_000, 12)],
)
def test_default_partitions_are_a_multiple_of_the_cores(cores, labels, expected):
    """One partition per 4M labels at least, and a multiple of the cores: sweep sessions deal the blocks over
    one task per core."""
    from types import SimpleNamespace

    from crowdspark.pipeline.prepare import default_partitions

    spark = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=cores))
    assert default_partitions(spark, labels) == expected


# --------------------------------------------------------------------------- values take their declared types


def _declared(cls, kind, skip=()):
    return [f.name for f in fields(cls) if typing.get_type_hints(cls)[f.name] is kind and f.name not in skip]


#: every (algorithm, int hyperparameter), read from the model dataclasses
INT_PARAMETERS = [
    (name, key) for name in algorithm_names() for key in _declared(model_class(name), int) if key in hyperparameters(name)
]


def _typed(values: dict) -> dict:
    return {k: (type(v), v) for k, v in values.items()}


def test_every_iterative_model_has_its_int_parameters_in_the_generated_list():
    keys = {key for _, key in INT_PARAMETERS}
    assert {"max_iter", "burn_in", "n_samples", "thin", "n_levels", "newton_steps", "histogram_bins"} <= keys
    iterative = {name for name in algorithm_names() if model_class(name)(1, 2).schedule.max_sweeps > 0}
    assert iterative <= {name for name, _ in INT_PARAMETERS}
    assert {"ds", "zbs", "kos", "mmsr"} <= {name for name, _ in INT_PARAMETERS}


@pytest.mark.parametrize("name, key", INT_PARAMETERS)
def test_int_parameters_given_integral_floats_hold_ints(name, key):
    default = hyperparameters(name)[key]
    as_float = load_config(overrides=[f"{name}.{key}={float(default):e}"], algorithm=name)  # e.g. 4.096000e+03
    as_int = load_config(overrides=[f"{name}.{key}={default}"], algorithm=name)
    assert _typed(as_float.algorithm_params(name)) == _typed(as_int.algorithm_params(name)) == {key: (int, default)}
    built = [build_model(name, c.algorithm_params(name), 3, 2, 0) for c in (as_float, as_int)]
    assert [_typed(vars(m)) for m in built] == [_typed(vars(built[1]))] * 2
    direct = model_class(name)(n_workers=3, n_classes=2, **{key: float(default)})
    assert type(getattr(direct, key)) is int
    with pytest.raises(ConfigError, match=rf"^{name}.{key} must be an integer, but got 2.5$"):
        load_config(overrides=[f"{name}.{key}=2.5"])


@pytest.mark.parametrize("value, shown", [("2.5", "2.5"), ("nan", "nan"), ("inf", "inf"), ("true", "True"), ('"ten"', "'ten'")])
def test_int_parameters_refuse_what_is_not_an_integer(value, shown, tmp_path):
    message = rf"^ds.max_iter must be an integer, but got {shown}$"
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=[f"ds.max_iter={value}"])
    conf = tmp_path / "c.toml"
    conf.write_text(f"[ds]\nmax_iter = {value}\n")
    with pytest.raises(ConfigError, match=message):
        load_config([conf])


def test_float_parameters_given_ints_hold_floats_and_refuse_strings():
    config = load_config(overrides=["ds.tol=1", "ds.smoothing=2"], algorithm="ds")
    assert _typed(config.algorithm_params("ds")) == {"tol": (float, 1.0), "smoothing": (float, 2.0)}
    with pytest.raises(ConfigError, match=r"^ds.tol must be a finite number, but got 'small'$"):
        load_config(overrides=["ds.tol=small"])


@pytest.mark.parametrize("key", _declared(EngineConfig, int))
def test_engine_int_settings_given_integral_floats_hold_ints(key):
    default = getattr(EngineConfig(), key)
    extra = ["engine.checkpoint_dir=/tmp/x"] if key == "checkpoint_every" else []
    config = load_config(overrides=[f"engine.{key}={float(default) + 1}", *extra])
    assert _typed({key: getattr(config.engine, key)}) == {key: (int, default + 1)}
    with pytest.raises(ConfigError, match=rf"^engine.{key} must be an integer, but got 1.5$"):
        load_config(overrides=[f"engine.{key}=1.5", *extra])


def test_seed_given_an_integral_float_is_the_int_everywhere(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text("seed = 1000.0\n")
    for config in (load_config([conf]), load_config(overrides=["seed=1e3"]), load_config(seed=1000.0),
                   RunConfig(seed=1000.0)):
        assert type(config.seed) is int and config == RunConfig(seed=1000)
        assert config.to_dict() == RunConfig(seed=1000).to_dict()


def test_select_levels_are_ints_and_must_be_integers():
    config = load_config(overrides=["idbla.select_levels=[1.0, 2.0]"], algorithm="idbla")
    assert _typed({"v": config.algorithm_params("idbla")["select_levels"]}) == {"v": (list, [1, 2])}
    assert [type(h) for h in config.algorithm_params("idbla")["select_levels"]] == [int, int]
    for bad in ("[1.5]", "[0]", "[]", "[true]"):
        with pytest.raises(ConfigError, match=r"idbla.select_levels must be a list of integers >= 1, but got"):
            load_config(overrides=[f"idbla.select_levels={bad}"])


def test_pandas_api_keyword_arguments_take_integral_floats():
    from crowdspark.api import Aggregator, DawidSkene

    labels = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str)
    fitted = DawidSkene(max_iter=1e3, seed=4.0).fit(labels)
    want = DawidSkene(max_iter=1000, seed=4).fit(labels)
    assert fitted.summary_["parameters"] == want.summary_["parameters"]
    assert _typed(fitted.summary_["parameters"]) == _typed(want.summary_["parameters"])
    pd.testing.assert_frame_equal(fitted.probas_, want.probas_)
    with pytest.raises(ConfigError, match=r"^burn_in must be an integer, but got 10.5$"):  # the API's own name
        Aggregator("idbla", burn_in=10.5)


# --------------------------------------------------------------------------- sections


@pytest.mark.parametrize(
    "override, message",
    [
        ("bcc.burnin=5", r"unknown parameter\(s\) bcc.burnin for algorithm 'bcc'; known: .*\(did you mean 'burn_in'\?\)"),
        ("bcc.burn_in=-1", r"bcc.burn_in must be an integer >= 0, but got -1"),
        ("idbla.n_samples=2.5", r"idbla.n_samples must be an integer, but got 2.5"),
        ("dds.level_criterion=bicc", r"dds.level_criterion must be one of \['aic', 'bic', 'icl'\], but got 'bicc'"),
        ("ds.select_levels=[1, 2]", r"ds.select_levels applies only to models with difficulty levels"),
        ("fixed-idbla.preset=fast", r"fixed-idbla.preset must be one of \['paper'\], but got 'fast'"),
        ("ds.preset=paper", r"ds has no presets, but got ds.preset = 'paper'; remove it"),
    ],
)
def test_sections_of_other_algorithms_are_checked_too(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=[override], algorithm="ds")


@pytest.mark.parametrize("path", sorted((DATA.parent / "conf").glob("*.toml")), ids=lambda p: p.name)
def test_every_bundled_configuration_file_loads(path):
    tree = tomllib.loads(path.read_text())
    config = load_config([path])
    assert config.algorithm == tree["algorithm"]
    assert set(config.algorithms) == set(tree) & set(algorithm_names())


KNOWN_SECTIONS = r"the sections are input, gold, output, engine, spark, nightly, incremental, quality, relabel and the algorithm names mv, ds, bcc, idbla, .*dds"


@pytest.mark.parametrize(
    "text, overrides, message",
    [
        ("[DS]\nmax_iter = 5\n", [], r"unknown configuration section \[DS\] \(did you mean 'ds'\?\); "),
        ("", ["dss.max_iter=5"], r"unknown configuration section \[dss\] \(did you mean 'ds'\?\); "),
        ("", ["foo.bar=1"], r"unknown configuration section \[foo\]; "),
        ("[Engine]\npartitions = 2\n", [], r"unknown configuration section \[Engine\] \(did you mean 'engine'\?\); "),
    ],
)
def test_only_known_sections_are_tables(tmp_path, text, overrides, message):
    conf = tmp_path / "c.toml"
    conf.write_text(text)
    with pytest.raises(ConfigError, match=message + KNOWN_SECTIONS):
        load_config([conf], overrides)


def test_run_config_refuses_sections_of_unknown_algorithms():
    with pytest.raises(ConfigError, match=r"unknown configuration section \[DS\] \(did you mean 'ds'\?\)"):
        RunConfig(algorithms={"DS": {"max_iter": 5}})
    with pytest.raises(ConfigError, match=r"algorithm must be one of \['mv', .*\], but got 'DS' \(did you mean 'ds'\?\)"):
        RunConfig(algorithm="DS")


# --------------------------------------------------------------------------- overrides of unused sections


def test_a_set_for_an_algorithm_the_run_does_not_use_is_refused_naming_the_section_that_applies():
    # the default algorithm reads only [ads]: --set ds.max_iter would change nothing
    with pytest.raises(ConfigError, match=r"--set ds.max_iter=3 sets a parameter of ds, but this run's algorithm is "
                                          r"ads, which reads only the \[ads\] section, .*--set ads.max_iter=3 sets it "
                                          r"for ads; or run ds with --algorithm ds"):
        load_config(overrides=["ds.max_iter=3"])
    with pytest.raises(ConfigError, match=r"sets a parameter of bcc, but this run's algorithm is mv.*the \[mv\] keys"):
        load_config(overrides=["bcc.burn_in=3"], algorithm="mv")
    assert load_config(overrides=["ds.max_iter=3"], algorithm="ds").algorithm_params() == {"max_iter": 3}
    assert load_config(overrides=["ds.max_iter=3", "algorithm=ds"]).algorithm == "ds"


def test_sections_of_other_algorithms_in_files_are_allowed_and_listed_as_unused():
    config = load_config([DEFAULT])
    assert config.algorithm == "ads" and "ds" in config.algorithms
    assert config.to_dict()["unused_sections"] == sorted(set(config.algorithms) - {"ads"})
    assert load_config([DEFAULT], ["ads.max_iter=3"]).algorithm_params()["max_iter"] == 3


def test_the_command_line_refuses_a_set_for_another_algorithm_and_reports_unused_file_sections(tmp_path):
    labels = str(DATA / "temp" / "labels.csv")

    def aggregate(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "crowdspark", "aggregate", "--labels", labels, "--engine",
                               "local", *args], capture_output=True, text=True, timeout=300)

    refused = aggregate("--set", "ds.max_iter=3", "--output", str(tmp_path / "refused"))
    assert refused.returncode == 2, refused.stderr
    assert "--set ds.max_iter=3 sets a parameter of ds, but this run's algorithm is ads" in refused.stderr
    assert "--set ads.max_iter=3" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "refused").exists()
    done = aggregate("--config", str(DEFAULT), "--set", "ads.max_iter=3", "--output", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["iterations"] <= 3
    assert summary["config"]["unused_sections"] == sorted(set(tomllib.loads(DEFAULT.read_text())) &
                                                          set(algorithm_names()) - {"ads"})
