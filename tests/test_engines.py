"""The Spark engine gives the local engine's answers, on any number of partitions."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest

from crowdspark.block import Block
from crowdspark.config import load_config
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import finish_fn, fit
from crowdspark.models.base import ItemResult
from crowdspark.models.common import confusion_counts, vote_counts
from crowdspark.models.dawid_skene import DawidSkene, ds_e_step
from crowdspark.pipeline import aggregate
from tests.helpers import DATA, by_item, frames_to_blocks

pytestmark = pytest.mark.spark


def planted_ds_frames(n_items=3000, n_workers=60, n_classes=3, per_item=5, seed=7):
    """A small Dawid-Skene sample (test-local generator)."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, n_classes, n_items)
    acc = rng.uniform(0.45, 0.9, n_workers)
    rows = []
    for i in range(n_items):
        for k in rng.choice(n_workers, per_item, replace=False):
            if rng.random() < acc[k]:
                label = truth[i]
            else:
                label = rng.choice([c for c in range(n_classes) if c != truth[i]])
            rows.append((f"i{i}", f"w{k}", str(label)))
    labels = pd.DataFrame(rows, columns=["item", "worker", "label"])
    gold = pd.DataFrame({"item": [f"i{i}" for i in range(n_items)], "truth": truth.astype(str)})
    return labels, gold, acc


@pytest.fixture(scope="module")
def synthetic_paths(tmp_path_factory):
    labels, gold, _ = planted_ds_frames()
    folder = tmp_path_factory.mktemp("synthetic")
    labels.to_parquet(folder / "labels.parquet")
    gold.to_csv(folder / "truth.csv", index=False)
    return str(folder / "labels.parquet"), str(folder / "truth.csv")


def read_items(path):
    items = pd.read_parquet(path + "/items").sort_values("item").reset_index(drop=True)
    return items


def run_engine(spark, engine, labels, gold, out, algorithm="ds", partitions=0, extra=()):
    config = load_config(
        overrides=[f"spark.partitions={partitions}", "engine.small_input_bytes=0", *extra], algorithm=algorithm,
        engine_name=engine, seed=11,
    )
    return aggregate(config, labels, str(out), gold_path=gold, spark=spark).summary


#: majority vote on RTE and on the synthetic crowd is in the full tier: the default tier runs majority vote on
#: web_search (the same single pass of the Spark engine, on more classes) and Dawid-Skene on all three datasets
#: (the same reading, blocks and partitionings, and iterations besides)
_MV_FULL_TIER = ("rte", "synthetic")


@pytest.mark.parametrize("algorithm, dataset", [
    pytest.param(algorithm, dataset, id=f"{algorithm}-{dataset}",
                 marks=[pytest.mark.full] if algorithm == "mv" and dataset in _MV_FULL_TIER else [])
    for algorithm in ("ds", "mv") for dataset in ("rte", "web_search", "synthetic")])
def test_spark_equals_local_on_1_3_8_partitions(spark, tmp_path, dataset, algorithm, synthetic_paths):
    if dataset == "synthetic":
        labels, gold = synthetic_paths
    else:
        labels, gold = str(DATA / dataset / "labels.csv"), str(DATA / dataset / "truth.csv")
    local = run_engine(None, "local", labels, gold, tmp_path / "local", algorithm)
    local_items = read_items(str(tmp_path / "local"))
    local_workers = pd.read_parquet(tmp_path / "local" / "workers").sort_values("worker").reset_index(drop=True)
    for partitions in (1, 3, 8):
        out = tmp_path / f"spark{partitions}"
        summary = run_engine(spark, "spark", labels, gold, out, algorithm, partitions)
        assert summary["partitions"] == partitions
        items = read_items(str(out))
        assert items["item"].tolist() == local_items["item"].tolist()
        assert items["label"].tolist() == local_items["label"].tolist()
        np.testing.assert_allclose(np.stack(items["posterior"]), np.stack(local_items["posterior"]), rtol=0, atol=1e-9)
        workers = pd.read_parquet(out / "workers").sort_values("worker").reset_index(drop=True)
        assert workers["n_labels"].tolist() == local_workers["n_labels"].tolist()
        np.testing.assert_allclose(
            np.stack([np.stack(c) for c in workers["confusion"]]),
            np.stack([np.stack(c) for c in local_workers["confusion"]]),
            atol=1e-9,
        )
        assert summary["iterations"] == local["iterations"]
        assert summary["counts"] == local["counts"]
        assert summary["metrics"]["error_rate"] == local["metrics"]["error_rate"]
        assert summary["metrics"]["nll"] == pytest.approx(local["metrics"]["nll"], abs=1e-9)


@dataclass(frozen=True)
class DampedEM(DawidSkene):
    """A stateful test model: EM whose per-item posterior is damped with the previous sweep's."""

    stateful: ClassVar[bool] = True

    def init_block(self, block: Block):
        votes = vote_counts(block, self.n_classes)
        shares = votes / votes.sum(axis=1, keepdims=True)
        state = {"post": shares}
        return state, {"confusion": confusion_counts(block, shares, self.n_workers, self.n_classes), "classes": shares.sum(0)}

    def local_step(self, block: Block, state: Any, params: Any, sweep: int):
        post, log_ev = ds_e_step(block, params["log_pi"], params["log_alpha"])
        post = 0.5 * state["post"] + 0.5 * post
        stats = {
            "confusion": confusion_counts(block, post, self.n_workers, self.n_classes),
            "classes": post.sum(0),
            "log_evidence": np.array(log_ev.sum()),
        }
        return {"post": post}, stats

    def finish_block(self, block: Block, state: Any, params: Any) -> ItemResult:
        return ItemResult(posterior=state["post"], label=state["post"].argmax(1).astype(np.int32))


def _damped_em_local_and_spark(spark, max_iter: int, **engine_options):
    """DampedEM fitted on the local engine and on the Spark engine (3 partitions); results per item."""
    import pickle

    from crowdspark.engine.spark.engine import SparkEngine

    blocks, enc = frames_to_blocks(pd.read_csv(DATA / "rte" / "labels.csv", dtype=str), max_labels=1000)
    model = DampedEM(enc.n_workers, enc.n_classes, max_iter=max_iter, tol=0.0)
    local = LocalEngine(blocks)
    with pytest.warns(UserWarning):
        r_local = fit(model, local)
    res_local = local.map_items(partial(finish_fn, model), r_local.params)
    engine = SparkEngine(spark.sparkContext.parallelize(blocks, 3), **engine_options)
    try:
        with pytest.warns(UserWarning):
            r_spark = fit(model, engine)
        blobs = engine.item_blobs(partial(finish_fn, model), r_spark.params).collect()
        report = engine.session_report()
    finally:
        engine.close()
    res_spark = [pickle.loads(b[0]) for b in blobs]
    _, l1, p1 = by_item(res_local)
    _, l2, p2 = by_item(res_spark)
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_allclose(p1, p2, atol=1e-9)
    np.testing.assert_allclose(
        [h["objective"] for h in r_local.history], [h["objective"] for h in r_spark.history], atol=1e-12
    )
    return report


def test_stateful_models_survive_lineage_truncation(spark):
    report = _damped_em_local_and_spark(spark, 7, checkpoint_interval=2, sweep_mode="jobs")
    assert report["sessions"] == 0


SHORT_CHAIN = ["{alg}.burn_in=10", "{alg}.n_samples=10"]


@pytest.mark.parametrize("algorithm", ["idbla", "fixed-idbla", "bcc"])
def test_samplers_are_identical_on_both_engines_and_any_partitioning(spark, tmp_path, algorithm):
    labels, gold = str(DATA / "temp" / "labels.csv"), str(DATA / "temp" / "truth.csv")
    extra = [s.format(alg=algorithm) for s in SHORT_CHAIN] + ["spark.checkpoint_interval=4", "spark.session_sweeps=4"]
    local = run_engine(None, "local", labels, gold, tmp_path / "local", algorithm, extra=extra)
    local_items = read_items(str(tmp_path / "local"))
    for partitions in (1, 8):
        out = tmp_path / f"spark{partitions}"
        summary = run_engine(spark, "spark", labels, gold, out, algorithm, partitions, extra=extra)
        items = read_items(str(out))
        assert items["label"].tolist() == local_items["label"].tolist()
        assert items["level"].tolist() == local_items["level"].tolist()
        np.testing.assert_allclose(np.stack(items["posterior"]), np.stack(local_items["posterior"]), atol=1e-12)
        np.testing.assert_allclose(
            np.stack(items["level_posterior"]), np.stack(local_items["level_posterior"]), atol=1e-12
        )
        assert [h["loglik"] for h in summary["history"]] == pytest.approx([h["loglik"] for h in local["history"]])
        for key in ("error_rate", "n_gold", "level_gold_items"):
            assert summary["metrics"][key] == local["metrics"][key]
        assert summary["metrics"]["nll"] == pytest.approx(local["metrics"]["nll"], abs=1e-9)
        assert summary["metrics"]["level_labeling_error"] == pytest.approx(local["metrics"]["level_labeling_error"])


def test_level_selection_runs_on_spark_and_matches_local(spark, tmp_path):
    labels, gold = str(DATA / "temp" / "labels.csv"), str(DATA / "temp" / "truth.csv")
    extra = [s.format(alg="idbla") for s in SHORT_CHAIN] + ["idbla.select_levels=[1, 2]"]
    local = run_engine(None, "local", labels, gold, tmp_path / "local", "idbla", extra=extra)
    remote = run_engine(spark, "spark", labels, gold, tmp_path / "spark", "idbla", 3, extra=extra)
    assert remote["level_selection"]["chosen"] == local["level_selection"]["chosen"]
    for a, b in zip(remote["level_selection"]["table"], local["level_selection"]["table"]):
        assert a["aic"] == pytest.approx(b["aic"]) and a["paper"] == pytest.approx(b["paper"])


def _ds_fit(engine, enc, max_iter=6):
    model = DawidSkene(enc.n_workers, enc.n_classes, max_iter=max_iter, tol=0.0)
    with pytest.warns(UserWarning):
        return fit(model, engine)


@pytest.mark.parametrize("partitions", [1, 2, 5])
def test_sweep_session_equals_one_job_per_sweep_and_the_local_engine(spark, partitions):
    from crowdspark.engine.spark.engine import SparkEngine

    blocks, enc = frames_to_blocks(pd.read_csv(DATA / "rte" / "labels.csv", dtype=str), max_labels=700)
    local = _ds_fit(LocalEngine(blocks), enc)
    results = {}
    for mode in ("session", "jobs"):
        engine = SparkEngine(spark.sparkContext.parallelize(blocks, partitions), sweep_mode=mode)
        try:
            results[mode] = _ds_fit(engine, enc)
            report = engine.session_report()
        finally:
            engine.close()
        assert report == {"enabled": mode == "session", "sessions": int(mode == "session"), "task_restarts": 0}
    for mode, result in results.items():
        np.testing.assert_allclose(result.params["log_pi"], local.params["log_pi"], atol=1e-12, err_msg=mode)
        np.testing.assert_allclose(
            [h["objective"] for h in result.history], [h["objective"] for h in local.history], atol=1e-12
        )


def test_sweep_session_survives_a_task_failure(spark):
    from crowdspark.engine.spark.engine import SparkEngine

    blocks, enc = frames_to_blocks(pd.read_csv(DATA / "temp" / "labels.csv", dtype=str), max_labels=500)
    clean = _ds_fit(LocalEngine(blocks), enc)
    engine = SparkEngine(spark.sparkContext.parallelize(blocks, 2), sweep_mode="session", inject_task_failure=3)
    try:
        retried = _ds_fit(engine, enc)
        report = engine.session_report()
    finally:
        engine.close()
    assert report["task_restarts"] == 1  # the failure really happened, and Spark restarted the stage
    np.testing.assert_allclose(retried.params["log_pi"], clean.params["log_pi"], atol=1e-12)
    assert len(retried.history) == len(clean.history)


def test_small_input_is_collected_and_gives_the_distributed_answer(spark, tmp_path, monkeypatch):
    from crowdspark.pipeline.source import local_small_input

    labels, gold = str(DATA / "rte" / "labels.csv"), str(DATA / "rte" / "truth.csv")
    small = load_config(algorithm="ds", engine_name="spark", seed=11)
    distributed = load_config(overrides=["engine.small_input_bytes=0"], algorithm="ds", engine_name="spark", seed=11)
    # local files: read with pandas, no Spark needed (aggregate works without a session)
    s_small = aggregate(small, labels, str(tmp_path / "small"), gold_path=gold).summary
    # remote files (simulated: not small local files): read by Spark, collected, fitted on the driver
    with monkeypatch.context() as patch:
        patch.setattr("crowdspark.pipeline.source._pandas_files", lambda *args, **kwargs: None)
        s_collected = aggregate(small, labels, str(tmp_path / "collected"), gold_path=gold, spark=spark).summary
    s_dist = aggregate(distributed, labels, str(tmp_path / "dist"), gold_path=gold, spark=spark).summary
    size = (DATA / "rte" / "labels.csv").stat().st_size
    threshold = small.engine.small_input_bytes
    assert s_small["small_input"] == {"input_bytes": size, "threshold": threshold, "reader": "pandas"}
    assert s_collected["small_input"] == {"input_bytes": size, "threshold": threshold, "reader": "spark"}
    assert s_small["engine"] == s_collected["engine"] == "local"
    assert s_dist["engine"] == "spark" and "small_input" not in s_dist
    for summary, name in ((s_small, "small"), (s_collected, "collected")):
        assert summary["counts"] == s_dist["counts"] and summary["metrics"] == pytest.approx(s_dist["metrics"])
        a, b = read_items(str(tmp_path / name)), read_items(str(tmp_path / "dist"))
        assert (a["label"] == b["label"]).all()
        np.testing.assert_allclose(np.stack(a["posterior"]), np.stack(b["posterior"]), atol=1e-9)
    # a remote output keeps Spark in the run (it writes there)
    assert local_small_input(small, labels, gold, "hdfs:///results/x") is None
    assert local_small_input(small, labels, gold, str(tmp_path / "out"))["reader"] == "pandas"
    # Hive-style folders (worker=w1/) are columns to Spark's reader only: such input keeps Spark
    frame = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str)
    for worker, part in frame.groupby("worker"):
        folder = tmp_path / "hive" / f"worker={worker}"
        folder.mkdir(parents=True)
        part.drop(columns="worker").to_parquet(folder / "part.parquet")
    assert local_small_input(small, str(tmp_path / "hive")) is None
    s_hive = aggregate(small, str(tmp_path / "hive"), None, spark=spark).summary
    assert s_hive["small_input"]["reader"] == "spark" and s_hive["counts"]["labels"] == len(frame)
    # a filter selects from the files: small files are filtered by Spark, then collected (the distributed answer)
    condition = "input.filter=worker < 'A3'"
    filtered = load_config(overrides=[condition], algorithm="ds", engine_name="spark", seed=11)
    f_dist = load_config(overrides=[condition, "engine.small_input_bytes=0"], algorithm="ds", engine_name="spark",
                         seed=11)
    s_filtered = aggregate(filtered, labels, str(tmp_path / "filtered"), spark=spark).summary
    s_fdist = aggregate(f_dist, labels, str(tmp_path / "fdist"), spark=spark).summary
    assert s_filtered["small_input"]["reader"] == "spark" and "small_input" not in s_fdist
    assert s_filtered["counts"] == s_fdist["counts"] and s_filtered["counts"]["labels"] < s_dist["counts"]["labels"]
    a, b = read_items(str(tmp_path / "filtered")), read_items(str(tmp_path / "fdist"))
    assert (a["label"] == b["label"]).all()
    np.testing.assert_allclose(np.stack(a["posterior"]), np.stack(b["posterior"]), atol=1e-9)
    # input above the threshold is left to the memory rule (crowdspark.engine.choice): on this local master,
    # the driver within the budget, Spark above it (100 MiB: below the local process, above the Spark driver's)
    above = load_config(overrides=["engine.small_input_bytes=100000"], algorithm="mv", engine_name="spark")
    assert aggregate(above, labels, None, spark=spark).summary["engine_choice"]["reason"] == "memory"
    tight = load_config(overrides=["engine.small_input_bytes=100000", "engine.max_memory=100m"], algorithm="mv")
    assert aggregate(tight, labels, None, spark=spark).summary["engine"] == "spark"


def test_input_bytes_is_unknown_for_frames_built_in_memory(spark):
    from crowdspark.io.spark_reader import input_bytes

    assert input_bytes(spark, spark.createDataFrame(pd.DataFrame({"a": [1]})), 10) is None
    frame = spark.read.option("header", "true").csv(str(DATA / "temp" / "labels.csv"))
    assert input_bytes(spark, frame, 1) == (DATA / "temp" / "labels.csv").stat().st_size


@pytest.mark.parametrize("inject", [0, 5])
def test_stateful_sessions_roll_over_replay_after_a_failure_and_equal_the_local_engine(spark, inject):
    report = _damped_em_local_and_spark(
        spark, 9, checkpoint_interval=4, session_sweeps=4, sweep_mode="session", inject_task_failure=inject
    )
    # 10 requests (the initialization and 9 sweeps), at most 4 per session
    assert report == {"enabled": True, "sessions": 3, "task_restarts": int(bool(inject))}


def test_sessions_regroup_blocks_one_by_one(spark):
    """More partitions than session tasks: elements are dealt one by one, (p + j) % tasks, so every task gets
    the same number of blocks (PySpark's coalesce(shuffle=True) moves batches of elements and can put all of
    them on one task)."""
    from crowdspark.engine.spark.engine import _regroup

    rdd = spark.sparkContext.parallelize(range(24), 4)
    parts = _regroup(rdd, 2).glom().collect()
    assert [len(p) for p in parts] == [12, 12]
    assert sorted(x for p in parts for x in p) == list(range(24))
    three = _regroup(spark.sparkContext.parallelize(range(9), 3), 2).glom().collect()
    assert sorted(len(p) for p in three) == [4, 5]


def test_session_refuses_a_reply_to_another_request():
    """A task's reply must answer the request just sent; one that does not (a protocol bug) is an error, not
    statistics added to the sweep."""
    import socket

    from crowdspark.engine.spark.session import SessionError, _exchange
    from crowdspark.engine.spark.session_net import Channel, channel_keys, encode, new_key

    key, hello, nonce = new_key(), bytes(16), bytes(16)
    driver_sock, task_sock = socket.socketpair()
    driver = Channel(driver_sock, channel_keys(key, hello, nonce, driver=True))
    task = Channel(task_sock, channel_keys(key, hello, nonce, driver=False))
    try:
        task.send(("stats", 6, {"n": np.array(1.0)}))  # the answer to an older request
        request = encode(("run", 7, None, None, False))
        with pytest.raises(SessionError, match=r"task 0 answered request 6 to request 7"):
            _exchange([driver], 7, request, request)
        assert task.receive()[1] == 7  # the request itself went out
        task.send(("stats", 8, {"n": np.array(1.0)}))
        request = encode(("run", 8, None, None, False))
        replies = _exchange([driver], 8, request, request)
        assert replies[0][1] == 8
    finally:
        driver.close()
        task.close()


def test_a_stateful_session_whose_states_are_lost_after_its_sweeps_runs_again(spark, monkeypatch):
    """The first session's job fails after its sweeps (as when an executor holding its result dies before the
    result is checkpointed): the engine runs a new session on the same elements, replays the sweeps, and
    the fit ends with the local engine's answer (not with the session's first states)."""
    from crowdspark.engine.spark.session import SweepSession

    real_failed = SweepSession.failed
    lost: list[SweepSession] = []

    def failed_once(self) -> bool:
        if not lost and self.served:  # the first session, once it served its sweeps
            lost.append(self)
        return (bool(lost) and self is lost[0]) or real_failed.fget(self)

    monkeypatch.setattr(SweepSession, "failed", property(failed_once))
    report = _damped_em_local_and_spark(spark, 9, session_sweeps=4, sweep_mode="session")
    assert lost
    # 3 sessions of the fit and the one that ran the first again
    assert report == {"enabled": True, "sessions": 4, "task_restarts": 0}


def test_a_run_of_one_pass_models_on_a_cluster_never_probes_and_says_why(spark, monkeypatch):
    """wawa fits in one Spark job: on a cluster master (where only a probe decides the sweep mode) no probe
    runs, no mode is chosen, and the report says why, not that nothing ran."""
    from crowdspark.engine.spark import engine as spark_engine
    from crowdspark.models.wawa import Wawa

    monkeypatch.setattr(spark_engine, "static_choice", lambda *args: None)  # as on a cluster master
    monkeypatch.setattr(spark_engine, "probe", lambda *args: pytest.fail("a one-pass fit probed the cluster"))
    blocks, enc = frames_to_blocks(pd.read_csv(DATA / "rte" / "labels.csv", dtype=str), max_labels=700)
    engine = spark_engine.SparkEngine(spark.sparkContext.parallelize(blocks, 2), sweep_mode="session")
    try:
        local = fit(Wawa(enc.n_workers, enc.n_classes), LocalEngine(blocks))
        result = fit(Wawa(enc.n_workers, enc.n_classes), engine)
        mode = engine.report()["sweep_mode"]
    finally:
        engine.close()
    np.testing.assert_allclose(result.params["skill"], local.params["skill"], atol=1e-12)
    assert mode["requested"] == "session" and mode["chosen"] is None
    assert mode["reason"].startswith("no fit of this run sweeps (a one-pass model")


def _evaluate_pass(engine, model, params):
    from crowdspark.pipeline.fit import evaluate_stats

    return evaluate_stats(model, engine, params, quality_bins=10)


@pytest.mark.parametrize("algorithm", ["ds", "idbla-cvb0"])
def test_a_held_session_serves_the_evaluation_and_ends_with_its_scope(spark, algorithm):
    from crowdspark.engine.spark.engine import SparkEngine
    from crowdspark.models.registry import build_model

    frame = pd.read_csv(DATA / "rte" / "labels.csv", dtype=str)
    blocks, enc = frames_to_blocks(frame, max_labels=700)
    model = build_model(algorithm, {"max_iter": 4, "tol": 1e-12}, enc.n_workers, enc.n_classes, 3)
    local_engine = LocalEngine(blocks)
    with pytest.warns(UserWarning):  # not converged in 4 iterations
        local = fit(model, local_engine)
    expected = _evaluate_pass(local_engine, model, local.params)
    engine = SparkEngine(spark.sparkContext.parallelize(blocks, 3), sweep_mode="session")
    try:
        with engine.sweeps_held():
            with pytest.warns(UserWarning):
                result = fit(model, engine)
            held = engine._session is not None
            stats = _evaluate_pass(engine, model, result.params)
        report = engine.session_report()
        assert engine._session is None
        assert engine.n_partitions == spark.sparkContext.parallelize([1, 2, 3], 3).count()  # Spark is free again
    finally:
        engine.close()
    # a stateless fit's session serves the evaluation; a stateful one's ends with the fit (its states become
    # the cached RDD) and the evaluation is one plain job
    assert held is (not model.stateful)
    assert report["sessions"] == 1
    assert stats.keys() == expected.keys()
    for key in expected:
        np.testing.assert_allclose(stats[key], expected[key], rtol=1e-12, atol=1e-12, err_msg=key)


def _stage_names(spark, group, run):
    """``run()`` and the names of the stages of the Spark jobs it started."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        result = run()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    stages = [s for j in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(j).stageIds]
    return result, [tracker.getStageInfo(s).name for s in stages if tracker.getStageInfo(s) is not None]


def test_the_evaluation_of_a_run_shares_the_fits_session(spark, tmp_path):
    labels, gold = str(DATA / "rte" / "labels.csv"), str(DATA / "rte" / "truth.csv")
    summary, stages = _stage_names(spark, "evaluation", lambda: run_engine(spark, "spark", labels, gold,
                                                                            tmp_path / "out", partitions=3))
    local = run_engine(spark, "local", labels, gold, tmp_path / "local")
    # gold metrics and quality statistics computed in the fit's session: no job, no tree reduction of their own
    assert summary["sweep_sessions"] == {"enabled": True, "sessions": 1, "task_restarts": 0}
    assert stages and not [name for name in stages if "treeAggregate" in name]
    assert summary["metrics"] == pytest.approx(local["metrics"], abs=1e-12)
    assert summary["quality"]["krippendorff_alpha"] == pytest.approx(local["quality"]["krippendorff_alpha"], abs=1e-12)
