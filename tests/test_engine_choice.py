"""The engine is chosen by the predicted memory of the local engine's fit (crowdspark.engine.choice): on a local
master an input whose local fit fits the driver's budget runs on the local engine without a SparkSession, a
cluster master keeps the conservative byte rule, ``engine.small_input_bytes=0`` always distributes, and the
recorded prediction is within a stated factor of the measured peak."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdspark.config import load_config
from crowdspark.engine import choice as choice_module
from crowdspark.engine.choice import (
    READ_BYTES,
    InputEstimate,
    choose_engine,
    driver_master,
    estimate_files,
    estimate_rows,
    is_local_master,
    predict_local,
)
from crowdspark.engine.memory import CELL, LABEL_BYTES, PARAM_COPIES, Budget, memory_budget
from crowdspark.pipeline.source import needs_spark
from tests.helpers import DATA

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30
ESTIMATE = InputEstimate(n_labels=10_000_000, n_items=1_000_000, n_workers=10_000, n_classes=5,
                         sampled_labels=200_000, method="parquet footers")


def cgroup_budget(n_bytes: int) -> Budget:
    return Budget(n_bytes, f"engine.memory_share = 0.8 of the cgroup memory limit ({n_bytes})")


# ------------------------------------------------------------------------------------------------ the rule
def test_a_local_master_fits_on_the_driver_exactly_when_the_prediction_is_within_the_budget():
    config = load_config(algorithm="ds")
    peak = predict_local(config, ESTIMATE).peak_bytes
    within = choose_engine(config, "local[2]", estimate=ESTIMATE, budget=cgroup_budget(peak))
    above = choose_engine(config, "local[2]", estimate=ESTIMATE, budget=cgroup_budget(peak - 1))
    assert (within.engine, within.reason) == ("local", "memory")
    assert (above.engine, above.reason) == ("spark", "memory")
    recorded = within.to_dict()
    assert recorded["predicted_peak_bytes"] == peak and recorded["budget_bytes"] == peak
    assert recorded["budget_source"] == "cgroup" and recorded["input"]["labels"] == ESTIMATE.n_labels
    assert recorded["master"] == "local[2]" and "within the driver's budget" in recorded["detail"]


def test_the_prediction_grows_with_the_labels_and_the_parameters():
    config = load_config(algorithm="ds")
    base = predict_local(config, ESTIMATE).peak_bytes
    doubled = InputEstimate(20_000_000, 2_000_000, 10_000, 5, 200_000, "parquet footers")
    many_classes = InputEstimate(10_000_000, 1_000_000, 10_000, 50, 200_000, "parquet footers")
    # every label more holds its block's codes and the reader's columns
    assert predict_local(config, doubled).peak_bytes - base >= (LABEL_BYTES + READ_BYTES) * 10_000_000
    # the (K, C, C) tables: at least PARAM_COPIES copies of the confusion matrices' extra cells
    grown = predict_local(config, many_classes).peak_bytes - base
    assert grown >= PARAM_COPIES * CELL * 10_000 * (50 * 50 - 5 * 5)


@pytest.mark.parametrize("master, small, expected", [
    ("spark://host:7077", False, ("spark", "cluster master")),
    ("yarn", False, ("spark", "cluster master")),
    (None, False, ("spark", "cluster master")),
    ("local-cluster[2,1,1024]", False, ("spark", "cluster master")),
    ("yarn", True, ("local", "small input")),
    ("local[*]", True, ("local", "small input")),
])
def test_a_cluster_master_keeps_the_byte_rule(master, small, expected):
    config = load_config(algorithm="ds")
    roomy = cgroup_budget(1 << 50)
    got = choose_engine(config, master, small=small, estimate=ESTIMATE, budget=roomy)
    assert (got.engine, got.reason) == expected


def test_the_settings_override_the_memory_rule():
    roomy = cgroup_budget(1 << 50)
    forced = load_config(overrides=["engine.small_input_bytes=0"], algorithm="ds")
    got = choose_engine(forced, "local[2]", small=True, estimate=ESTIMATE, budget=roomy)
    assert (got.engine, got.reason) == ("spark", "forced distributed")
    local = load_config(algorithm="ds", engine_name="local")
    assert choose_engine(local, "yarn", estimate=ESTIMATE, budget=cgroup_budget(1)).engine == "local"
    tight = load_config(overrides=["engine.max_memory=1m"], algorithm="ds")
    got = choose_engine(tight, "local[2]", estimate=ESTIMATE)
    assert got.engine == "spark" and got.to_dict()["budget_source"] == "setting"


@pytest.mark.parametrize("master, expected", [
    ("local", True), ("local[2]", True), ("local[*]", True), ("local[2,2]", True), ("local[*, 3]", True),
    ("local-cluster[2,1,1024]", False), ("yarn", False), ("spark://h:7077", False), ("k8s://h", False),
    (None, False),
])
def test_local_masters(master, expected):
    assert is_local_master(master) is expected


@pytest.mark.parametrize("source, kind", [
    ("cgroup memory limit", "cgroup"), ("physical memory", "physical"),
    ("address space left under ulimit -v 4 GiB", "ulimit"),
])
def test_the_budget_says_where_it_comes_from(source, kind):
    assert memory_budget(0, 0.5, host=lambda: (10 * GIB, source)).kind == kind
    assert memory_budget(3 * GIB, 0.5).kind == "setting"


def test_the_master_before_any_session(monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    assert driver_master() == "local[*]"  # what build_session starts from plain Python
    assert driver_master(requested="yarn") == "yarn"
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--master spark://h:7077 pyspark-shell")
    assert driver_master() == "spark://h:7077"
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf a=b pyspark-shell")
    assert driver_master() is None


# ------------------------------------------------------------------------------------------- the estimate
def ordered_labels(n_items: int, per_item: int, n_workers: int, n_classes: int, seed: int = 0) -> pd.DataFrame:
    """Labels ordered by item, as crowdspark.synthetic writes them."""
    rng = np.random.default_rng(seed)
    items = np.repeat(np.arange(n_items), per_item)
    return pd.DataFrame({"item": [f"i{x}" for x in items],
                         "worker": [f"w{x}" for x in rng.integers(0, n_workers, len(items))],
                         "label": [f"c{x}" for x in rng.integers(0, n_classes, len(items))]})


def test_the_estimate_reads_the_footers_or_the_size_and_scales_a_sample(tmp_path, monkeypatch):
    frame = ordered_labels(20_000, 5, 300, 4)
    frame.to_parquet(tmp_path / "labels.parquet", row_group_size=7_000)
    frame.to_csv(tmp_path / "labels.csv", index=False)
    columns = ("item", "worker", "label")
    exact = estimate_files([str(tmp_path / "labels.parquet")], "parquet", columns)
    assert (exact.n_labels, exact.n_items, exact.n_workers, exact.n_classes) == (100_000, 20_000, 300, 4)
    monkeypatch.setattr(choice_module, "SAMPLE_ROWS", 10_000)
    monkeypatch.setattr(choice_module, "SAMPLE_BYTES", 100_000)
    choice_module._cached_estimate.cache_clear()
    sampled = estimate_files([str(tmp_path / "labels.parquet")], "parquet", columns, n_classes=6)
    assert sampled.n_labels == 100_000 and sampled.sampled_labels == 10_000  # the footers count every row
    assert 20_000 <= sampled.n_items <= 22_000 and 300 <= sampled.n_workers <= 330 and sampled.n_classes == 6
    csv = estimate_files([str(tmp_path / "labels.csv")], "csv", columns)
    assert abs(csv.n_labels - 100_000) <= 5_000 and 20_000 <= csv.n_items <= 22_000  # within 5%
    rows = estimate_rows(100_000, frame.iloc[:10_000], columns)
    assert rows.n_labels == 100_000 and 300 <= rows.n_workers <= 330
    choice_module._cached_estimate.cache_clear()


def test_a_file_that_cannot_be_estimated_is_left_to_spark(tmp_path):
    """A file the estimate cannot read is not fitted on the driver: Spark's reader says what is wrong."""
    (tmp_path / "labels.parquet").write_bytes(b"not parquet" * 100)
    config = load_config(overrides=["engine.small_input_bytes=10"], algorithm="ds")
    assert needs_spark(config, str(tmp_path / "labels.parquet"), master="local[2]")


# ------------------------------------------------------------------------------------------ the command line
def run_cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "crowdspark", "aggregate", *args], env=env, capture_output=True,
                          text=True, timeout=600)


def test_an_input_above_the_byte_rule_fits_on_the_driver_without_spark_on_a_local_master(tmp_path):
    """RTE above a 1,000-byte small-input rule, on --master local[2]: the memory rule picks the local engine and
    no SparkSession starts (Java is hidden, so starting one would fail); a budget below the prediction asks for
    Spark, and so does a cluster master."""
    no_java = {"JAVA_HOME": str(tmp_path / "no-java")}
    args = ["--labels", str(DATA / "rte" / "labels.csv"), "--algorithm", "ds", "--master", "local[2]",
            "--set", "engine.small_input_bytes=1000", "--quiet"]
    done = run_cli([*args, "--output", str(tmp_path / "out")], no_java)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    chosen = summary["engine_choice"]
    assert summary["engine"] == "local" and "small_input" not in summary
    assert chosen["engine"] == "local" and chosen["reason"] == "memory" and chosen["master"] == "local[2]"
    assert 0 < chosen["predicted_peak_bytes"] <= chosen["budget_bytes"]
    assert chosen["budget_source"] in ("cgroup", "physical", "ulimit")
    assert chosen["input"]["labels"] == summary["counts"]["labels"] and chosen["input"]["method"] == "csv size"
    labels = str(DATA / "rte" / "labels.csv")
    above = load_config(overrides=["engine.small_input_bytes=1000"], algorithm="ds")
    tight = load_config(overrides=["engine.small_input_bytes=1000", "engine.max_memory=1k"], algorithm="ds")
    assert not needs_spark(above, labels, master="local[2]")
    assert needs_spark(tight, labels, master="local[2]") and needs_spark(above, labels, master="yarn")


# ---------------------------------------------------------------------------------------- prediction vs peak
#: the stated factor between the recorded prediction and the measured peak RSS of the whole run (the
#: interpreter and its libraries included)
PEAK_FACTOR = 2.0

_WRAPPER = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


@pytest.mark.slow
def test_the_recorded_prediction_is_within_its_factor_of_the_measured_peak(tmp_path):
    """2M labels (200k items, 10 labels each, 2,000 workers, 5 classes) as Parquet, fitted by the default
    command on a local master: the memory rule picks the local engine, and the peak RSS of that process
    (ru_maxrss, measured by a wrapper process whose only child it is) is within PEAK_FACTOR of the prediction
    the summary records."""
    from crowdspark.synthetic import dawid_skene_data

    labels, _, _ = dawid_skene_data(200_000, 2_000, 5, 10, 0)
    labels.to_parquet(tmp_path / "labels.parquet", index=False)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "crowdspark", "aggregate", "--labels", str(tmp_path / "labels.parquet"),
               "--algorithm", "ds", "--set", "ds.max_iter=3", "--set", "engine.small_input_bytes=1000",
               "--master", "local[2]", "--quiet", "--output", str(out)]
    done = subprocess.run([sys.executable, "-c", _WRAPPER, *command], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    peak = int(done.stdout.split()[-1]) * 1024
    chosen = json.loads((out / "summary.json").read_text())["engine_choice"]
    assert chosen["engine"] == "local" and chosen["reason"] == "memory"
    predicted = chosen["predicted_peak_bytes"]
    assert peak / PEAK_FACTOR <= predicted <= peak * PEAK_FACTOR, (predicted, peak)


# ---------------------------------------------------------------------------------------------- spark-submit
def spark_submit(args: list[str]) -> subprocess.CompletedProcess:
    """``spark-submit --master local[2] jobs/aggregate.py ARGS`` with this tree's code and interpreter."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    return subprocess.run([submit, "--master", "local[2]", str(ROOT / "jobs" / "aggregate.py"), *args], env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.spark
@pytest.mark.slow
def test_spark_submit_on_a_local_master_chooses_by_memory_and_the_override_distributes(tmp_path):
    """Under spark-submit the master comes from the JVM spark-submit started: RTE above a 1,000-byte rule is
    fitted on the driver by the memory rule, without a SparkSession; engine.small_input_bytes=0 distributes it,
    with the same labels."""
    from crowdspark.io.chain import read_items

    args = ["--labels", str(DATA / "rte" / "labels.csv"), "--algorithm", "ds", "--seed", "3", "--quiet"]
    chosen = spark_submit([*args, "--set", "engine.small_input_bytes=1000", "--output", str(tmp_path / "auto")])
    forced = spark_submit([*args, "--set", "engine.small_input_bytes=0", "--output", str(tmp_path / "forced")])
    assert chosen.returncode == 0, chosen.stderr[-3000:]
    assert forced.returncode == 0, forced.stderr[-3000:]
    auto = json.loads((tmp_path / "auto" / "summary.json").read_text())
    spread = json.loads((tmp_path / "forced" / "summary.json").read_text())
    assert auto["engine"] == "local" and auto["engine_choice"]["reason"] == "memory"
    assert auto["engine_choice"]["master"] == "local[2]"
    assert spread["engine"] == "spark" and spread["engine_choice"]["reason"] == "forced distributed"
    a, b = read_items(str(tmp_path / "auto")), read_items(str(tmp_path / "forced"))
    assert (a.sort_values("item")["label"].to_numpy() == b.sort_values("item")["label"].to_numpy()).all()
