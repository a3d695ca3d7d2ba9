"""Scheduled runs: run ids and the latest pointer, warm start, checkpoint and resume, task retries."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from crowdspark.cli import main
from crowdspark.config import load_config
from crowdspark.errors import ConfigError, IncompatibleModelError, InputError
from crowdspark.pipeline import RunOptions, aggregate
from tests.helpers import DATA

RTE = str(DATA / "rte" / "labels.csv"), str(DATA / "rte" / "truth.csv")
TEMP = str(DATA / "temp" / "labels.csv"), str(DATA / "temp" / "truth.csv")


def items(path):
    return pd.read_parquet(f"{path}/items").sort_values("item").reset_index(drop=True)


def assert_same_items(a, b):
    assert a["label"].tolist() == b["label"].tolist()
    np.testing.assert_allclose(np.stack(a["posterior"]), np.stack(b["posterior"]), rtol=0, atol=1e-12)


def test_run_ids_keep_old_runs_and_move_latest_last(tmp_path):
    config = load_config(algorithm="mv", engine_name="local")
    for day in ("2026-11-24", "2026-11-25"):
        aggregate(config, RTE[0], str(tmp_path / "out"), run_id=day)
    latest = json.loads((tmp_path / "out" / "_LATEST.json").read_text())
    assert latest["run_id"] == "2026-11-25" and latest["path"].endswith("run_id=2026-11-25")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "_CROWDSPARK.json", "_LATEST.json", "run_id=2026-11-24", "run_id=2026-11-25"
    ]
    with pytest.raises(ConfigError, match=r"--run-id must be a plain name"):
        aggregate(config, RTE[0], str(tmp_path / "out"), run_id="../x")


def test_failed_run_does_not_move_latest(tmp_path, monkeypatch):
    config = load_config(algorithm="mv", engine_name="local")
    aggregate(config, RTE[0], str(tmp_path / "out"), run_id="day1")
    monkeypatch.setattr("crowdspark.io.tables.write_frame_local", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        aggregate(config, RTE[0], str(tmp_path / "out"), run_id="day2")
    assert json.loads((tmp_path / "out" / "_LATEST.json").read_text())["run_id"] == "day1"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["_CROWDSPARK.json", "_LATEST.json", "run_id=day1"]


def _split_days(tmp_path):
    """Synthetic history: items arrive over 31 days; day 31 is the new day."""
    from crowdspark.synthetic import dawid_skene_data

    labels, truth, _ = dawid_skene_data(6200, 80, 3, 6, seed=3)
    day = (labels["item"].str[1:].astype(int) % 31) + 1
    history = labels[day <= 30]
    new_day = labels[day == 31]
    paths = {}
    for name, frame in (("history", history), ("new", new_day)):
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
        paths[name] = str(tmp_path / f"{name}.csv")
    truth.to_csv(tmp_path / "truth.csv", index=False)
    paths["truth"] = str(tmp_path / "truth.csv")
    return paths


def test_warm_start_converges_faster_with_the_same_quality(tmp_path):
    paths = _split_days(tmp_path)
    config = load_config(algorithm="ds", engine_name="local")
    aggregate(config, paths["history"], str(tmp_path / "hist"), gold_path=paths["truth"])
    cold = aggregate(config, paths["new"], str(tmp_path / "cold"), gold_path=paths["truth"]).summary
    warm = aggregate(config, paths["new"], str(tmp_path / "warm"), gold_path=paths["truth"], warm_start=str(tmp_path / "hist")).summary
    assert warm["iterations"] < cold["iterations"]
    assert warm["metrics"]["error_rate"] <= cold["metrics"]["error_rate"] + 0.005


def test_warm_start_refuses_another_algorithm_or_class_set(tmp_path):
    config = load_config(algorithm="ds", engine_name="local")
    aggregate(config, RTE[0], str(tmp_path / "prev"))
    with pytest.raises(IncompatibleModelError, match=r"was fitted with 'ds', this run uses 'mv'"):
        aggregate(load_config(algorithm="mv", engine_name="local"), RTE[0], None, warm_start=str(tmp_path / "prev"))
    with pytest.raises(IncompatibleModelError,
                       match=r"class set changed since the warm-start run \(\['0', '1'\] -> \['1', '2'\]\)"):
        aggregate(config, TEMP[0], None, warm_start=str(tmp_path / "prev"))
    # the command line stops such a run with exit 2 and one line, before it writes anything
    code = main(["aggregate", "--labels", TEMP[0], "--output", str(tmp_path / "next"), "--warm-start",
                 str(tmp_path / "prev"), "--engine", "local", "--quiet"])
    assert code == 2 and not (tmp_path / "next").exists()
    cold = load_config(overrides=["nightly.on_incompatible=cold"], algorithm="ds", engine_name="local")
    summary = aggregate(cold, TEMP[0], None, warm_start=str(tmp_path / "prev")).summary
    assert summary["warm_start"]["used"] is False and "class set changed" in summary["warm_start"]["reason"]
    assert any("ran cold" in w for w in summary["warnings"])
    with pytest.raises(InputError, match=r"--warm-start .*nowhere. does not exist"):
        aggregate(config, RTE[0], None, warm_start=str(tmp_path / "nowhere"))


def test_dds_warm_start_keeps_the_previous_runs_levels(tmp_path):
    """dds chooses H unless n_levels is set; with --warm-start it keeps the warm-start model's H (choosing
    again could change H, and a warm start needs the same H), and reports no new choice."""
    aggregate(load_config(overrides=["dds.n_levels=2"], algorithm="dds", engine_name="local"), TEMP[0],
              str(tmp_path / "prev"))
    config = load_config(algorithm="dds", engine_name="local")
    cold = aggregate(config, TEMP[0], str(tmp_path / "cold")).summary
    assert cold["level_selection"]["chosen"] == cold["parameters"]["n_levels"] == 1
    warm = aggregate(config, TEMP[0], str(tmp_path / "warm"), warm_start=str(tmp_path / "prev")).summary
    assert warm["parameters"]["n_levels"] == 2 and warm.get("level_selection") is None


class Killed(Exception):
    pass


def _kill_at(monkeypatch, sweep_to_die):
    """Kill the driver (an exception in the fit loop, on the driver) right after sweep ``sweep_to_die``."""
    from crowdspark.engine.checkpoint import Checkpointer

    original = Checkpointer.due

    def dying(self, sweep):
        if sweep == sweep_to_die:
            raise Killed(f"driver killed at sweep {sweep}")
        return original(self, sweep)

    monkeypatch.setattr(Checkpointer, "due", dying)


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
@pytest.mark.parametrize("algorithm", ["idbla", "ds"])
def test_resume_after_a_killed_driver_equals_an_uninterrupted_run(request, tmp_path, monkeypatch, engine, algorithm):
    spark = request.getfixturevalue("spark") if engine == "spark" else None
    chain = [f"{algorithm}.burn_in=6", f"{algorithm}.n_samples=8"] if algorithm == "idbla" else ["ds.tol=0", "ds.max_iter=14"]
    base = [*chain, "spark.partitions=3", "spark.checkpoint_interval=3", "spark.session_sweeps=3",
            "engine.small_input_bytes=0"]
    with_cp = [*base, f"engine.checkpoint_dir={tmp_path / 'cp'}", "engine.checkpoint_every=5"]
    clean = load_config(overrides=base, algorithm=algorithm, engine_name=engine, seed=4)
    aggregate(clean, *TEMP[:1], str(tmp_path / "clean"), gold_path=TEMP[1], spark=spark)

    config = load_config(overrides=with_cp, algorithm=algorithm, engine_name=engine, seed=4)
    with monkeypatch.context() as patch:
        _kill_at(patch, 12)
        with pytest.raises(Killed):
            aggregate(config, TEMP[0], str(tmp_path / "resumed"), gold_path=TEMP[1], spark=spark)
    assert (tmp_path / "cp" / "crowdspark-checkpoint.json").exists() and not (tmp_path / "resumed").exists()
    summary = aggregate(config, TEMP[0], str(tmp_path / "resumed"), gold_path=TEMP[1], spark=spark).summary
    assert summary["resumed_from_iteration"] == 10
    assert not (tmp_path / "cp").exists()  # cleared after the fit completed
    assert_same_items(items(tmp_path / "resumed"), items(tmp_path / "clean"))
    clean_summary = json.loads((tmp_path / "clean" / "summary.json").read_text())
    assert [h["objective"] for h in summary["history"]] == pytest.approx([h["objective"] for h in clean_summary["history"]])


def test_a_checkpoint_of_another_run_is_refused(tmp_path, monkeypatch):
    over = ["ds.tol=0", "ds.max_iter=12", f"engine.checkpoint_dir={tmp_path / 'cp'}", "engine.checkpoint_every=5"]
    config = load_config(overrides=over, algorithm="ds", engine_name="local")
    with monkeypatch.context() as patch:
        _kill_at(patch, 8)
        with pytest.raises(Killed):
            aggregate(config, RTE[0], None)
    other = load_config(overrides=[*over, "ds.smoothing=0.1"], algorithm="ds", engine_name="local")
    with pytest.raises(ConfigError, match=r"belongs to a different run \(changed: parameters\)"):
        aggregate(other, RTE[0], None)


@pytest.mark.spark
@pytest.mark.parametrize("algorithm", ["ds", "idbla"])
def test_a_retried_task_does_not_change_the_result(spark, tmp_path, algorithm):
    chain = ["idbla.burn_in=4", "idbla.n_samples=4"] if algorithm == "idbla" else []
    chain = [*chain, "spark.partitions=2", "engine.small_input_bytes=0"]
    clean = load_config(overrides=chain, algorithm=algorithm, engine_name="spark")
    aggregate(clean, TEMP[0], str(tmp_path / "clean"), spark=spark)
    summary = aggregate(clean, TEMP[0], str(tmp_path / "retried"), spark=spark,
                        options=RunOptions(inject_task_failure=3)).summary
    assert summary["sweep_sessions"]["task_restarts"] >= 1 or summary["sweep_sessions"]["enabled"] is False
    assert_same_items(items(tmp_path / "retried"), items(tmp_path / "clean"))


@pytest.mark.spark
def test_partitioned_lake_with_a_partition_filter(spark, tmp_path):
    labels = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str)
    labels["date"] = np.where(labels.index % 3 == 0, "2026-11-01", "2026-11-02")
    spark.createDataFrame(labels).write.partitionBy("date").parquet(str(tmp_path / "lake"))
    config = load_config(overrides=["input.filter=date >= '2026-11-02'"], algorithm="mv", engine_name="spark")
    summary = aggregate(config, str(tmp_path / "lake"), None, spark=spark).summary
    assert summary["counts"]["labels"] == int((labels["date"] == "2026-11-02").sum())
    bad = load_config(overrides=["input.filter=dte >= 1"], algorithm="mv", engine_name="spark")
    with pytest.raises(ConfigError, match=r"input.filter 'dte >= 1' is not a valid Spark SQL condition"):
        aggregate(bad, str(tmp_path / "lake"), None, spark=spark)
    local = load_config(overrides=["input.filter=date >= '2026-11-02'"], algorithm="mv", engine_name="local")
    with pytest.raises(ConfigError, match=r"needs the spark engine"):
        aggregate(local, str(tmp_path / "lake"), None)


def test_a_result_of_crowdspark_0_1_with_its_model_folder_warm_starts(tmp_path):
    """0.1 wrote the saved model to ``model/``; such a result is still a warm start (and still replaceable)."""
    config = load_config(algorithm="ds", engine_name="local")
    aggregate(config, RTE[0], str(tmp_path / "old"))
    (tmp_path / "old" / "_model").rename(tmp_path / "old" / "model")
    (tmp_path / "old" / "_CROWDSPARK.json").unlink()  # 0.1 wrote no marker (nor its listing of the files)
    warm = aggregate(config, RTE[0], str(tmp_path / "new"), warm_start=str(tmp_path / "old")).summary
    assert warm["warm_start"] == {"source": str(tmp_path / "old"), "used": True}
    aggregate(config, RTE[0], str(tmp_path / "old"))  # an 0.1 result at --output is replaced
    assert sorted(p.name for p in (tmp_path / "old").iterdir()) == [
        "_CROWDSPARK.json", "_model", "items", "relabel", "summary.json", "workers"]
