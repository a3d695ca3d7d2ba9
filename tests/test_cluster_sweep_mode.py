"""How the Spark engine chooses between sweep sessions and one job per sweep (``spark.sweep_mode``), without a
cluster: the configuration's part, the probe, and the fallback when the probe fails."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pandas as pd
import pytest

from crowdspark.engine.spark.engine import static_choice
from crowdspark.errors import ConfigError
from tests.helpers import DATA, frames_to_blocks

LOOPBACK = "127.0.0.1"
#: a loopback address nothing listens on when the server is bound to 127.0.0.1: connections are refused
ELSEWHERE = "127.0.0.2"


@pytest.mark.parametrize(
    ("requested", "master", "conf", "mode"),
    [
        ("jobs", "local[2]", {}, "jobs"),
        ("auto", "local[2]", {}, "session"),
        ("auto", "local[2]", {"spark.dynamicAllocation.enabled": "true"}, "session"),  # Spark ignores it locally
        ("session", "local[2]", {}, "session"),
        ("auto", "spark://h:7077", {"spark.dynamicAllocation.enabled": "true"}, "jobs"),
        ("auto", "yarn", {"spark.network.crypto.enabled": "true"}, "jobs"),
        ("auto", "yarn", {"spark.ssl.rpc.enabled": "TRUE"}, "jobs"),
        ("auto", "yarn", {}, None),  # the probe decides
        ("session", "yarn", {"spark.network.crypto.enabled": "true"}, None),  # asked for: the probe decides
        ("jobs", "yarn", {"spark.dynamicAllocation.enabled": "true"}, "jobs"),
    ],
)
def test_the_configuration_decides_what_it_can(requested, master, conf, mode):
    choice = static_choice(requested, master, conf)
    assert (choice.mode if choice else None) == mode
    if choice is not None:
        assert choice.reason


def test_sessions_asked_for_with_dynamic_allocation_on_a_cluster_are_a_config_error():
    with pytest.raises(ConfigError, match="spark.sweep_mode = session cannot run: spark.dynamicAllocation.enabled"):
        static_choice("session", "yarn", {"spark.dynamicAllocation.enabled": "true"})


@pytest.mark.spark
@pytest.mark.alone
def test_the_probe_passes_when_tasks_reach_the_driver_and_says_why_when_they_cannot(spark):
    from crowdspark.engine.spark.session import probe

    assert probe(spark.sparkContext, 2, LOOPBACK, LOOPBACK, seconds=5) is None
    reason = probe(spark.sparkContext, 2, ELSEWHERE, LOOPBACK, seconds=2)
    assert reason is not None
    assert f"2 of 2 probe tasks could not connect to the driver's sweep session at {ELSEWHERE}:" in reason
    assert "within 2 s" in reason and "Connection refused" in reason


def _ds_on_spark(spark, engine_options: dict, addresses: tuple[str, str] | None, monkeypatch):
    """A DS fit on the Spark engine as on a cluster (the choice left to the probe), and on the local engine."""
    from crowdspark.engine.spark import engine as spark_engine
    from crowdspark.engine.local import LocalEngine
    from crowdspark.engine.loop import fit
    from crowdspark.models.dawid_skene import DawidSkene

    blocks, enc = frames_to_blocks(pd.read_csv(DATA / "rte" / "labels.csv", dtype=str), max_labels=1000)
    model = DawidSkene(enc.n_workers, enc.n_classes, max_iter=6, tol=0.0)
    if addresses is not None:
        monkeypatch.setattr(spark_engine, "session_addresses", lambda master, conf: addresses)
    engine = spark_engine.SparkEngine(spark.sparkContext.parallelize(blocks, 3), **engine_options)
    engine.choice = None  # as on a cluster master: decided at the first fit
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no convergence at tol = 0
            result = fit(model, engine)
        report = engine.report()
    finally:
        engine.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = fit(model, LocalEngine(blocks))
    np.testing.assert_allclose(result.params["log_pi"], expected.params["log_pi"], atol=1e-9)
    return report


@pytest.mark.spark
@pytest.mark.alone
def test_tasks_that_cannot_reach_the_driver_make_the_run_use_jobs_and_say_why(spark, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="crowdspark.engine.spark.engine"):
        report = _ds_on_spark(spark, {}, (LOOPBACK, ELSEWHERE), monkeypatch)
    assert report["sweep_mode"]["requested"] == "auto"
    assert report["sweep_mode"]["chosen"] == "jobs"
    assert "2 of 2 probe tasks could not connect" in report["sweep_mode"]["reason"]
    assert report["sweep_sessions"] == {"enabled": False, "sessions": 0, "task_restarts": 0}
    assert any("one Spark job per sweep, because 2 of 2 probe tasks" in r.getMessage() for r in caplog.records)


@pytest.mark.spark
@pytest.mark.alone
def test_tasks_that_reach_the_driver_make_the_run_use_sessions(spark, monkeypatch):
    report = _ds_on_spark(spark, {}, None, monkeypatch)
    assert report["sweep_mode"]["chosen"] == "session"
    assert report["sweep_mode"]["reason"].startswith("2 barrier tasks (one per slot) reached the driver")
    assert report["sweep_sessions"]["sessions"] == 1


@pytest.mark.spark
@pytest.mark.alone
def test_sessions_asked_for_where_tasks_cannot_reach_the_driver_stop_the_run_with_the_reason(spark, monkeypatch):
    with pytest.raises(ConfigError, match="spark.sweep_mode = session cannot run: 2 of 2 probe tasks could not "
                                          "connect.*set spark.sweep_mode=auto"):
        _ds_on_spark(spark, {"sweep_mode": "session"}, (LOOPBACK, ELSEWHERE), monkeypatch)
