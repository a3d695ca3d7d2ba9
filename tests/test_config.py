"""Configuration files, overrides and their errors."""

from __future__ import annotations

import tomllib
from dataclasses import fields

import pytest

from crowdspark.algorithms import algorithm_class, algorithm_names, hyperparameters
from crowdspark.config import EngineConfig, GoldConfig, InputConfig, OutputConfig, RunConfig, load_config
from crowdspark.errors import ConfigError
from tests.helpers import DATA

DEFAULT = DATA.parent / "conf" / "default.toml"


def test_default_toml_documents_every_key_with_the_code_default():
    tree = tomllib.loads(DEFAULT.read_text())
    defaults = RunConfig()
    assert tree["algorithm"] == defaults.algorithm and tree["seed"] == defaults.seed
    for name, cls in (("input", InputConfig), ("gold", GoldConfig), ("output", OutputConfig), ("engine", EngineConfig)):
        obj = cls()
        expected = {f.name: (list(v) if isinstance(v := getattr(obj, f.name), tuple) else v) for f in fields(cls)}
        assert tree[name] == expected, name
    for algorithm in algorithm_names():
        expected = hyperparameters(algorithm)
        if getattr(algorithm_class(algorithm), "auto_levels", ()):  # H is chosen at run time unless n_levels is set (documented in a comment)
            del expected["n_levels"]
        assert tree.get(algorithm, {}) == expected, algorithm
    assert load_config([DEFAULT]) == RunConfig(algorithms={k: v for k, v in tree.items() if k in algorithm_names()})


def test_precedence_file_then_set_then_flags(tmp_path):
    conf = tmp_path / "a.toml"
    conf.write_text('seed = 4\nalgorithm = "mv"\n[ds]\nmax_iter = 7\n[engine]\npartitions = 2\n')
    config = load_config([conf], ["ds.max_iter=9", "seed=5"], seed=6, engine_name="local")
    assert config.seed == 6 and config.algorithm == "mv"
    assert config.algorithm_params("ds") == {"max_iter": 9}
    assert config.engine.partitions == 2 and config.engine.name == "local"


def test_set_values_are_read_as_toml_then_as_strings():
    config = load_config(overrides=["input.item=task", "ds.tol=1e-3", 'input.classes=["b", "a"]'])
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
        (["engine.session_sweeps=0"], r"engine.session_sweeps must be an integer >= 1, but got 0"),
        (["bogus=1"], r"unknown configuration key 'bogus'"),
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

    from crowdspark.runner import default_partitions

    spark = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=cores))
    assert default_partitions(spark, labels) == expected
