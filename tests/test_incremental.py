"""Incremental nights (incremental.mode = "on"): what a night carries, what it refits, what it refuses.

The local engine reads the lake's day folders with pandas (no Spark); the Spark tests run the same nights with
Spark reading and fitting.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdspark.config import load_config
from crowdspark.engine.carry import Carried, label_sums
from crowdspark.io.chain import read_items
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import initialize
from crowdspark.errors import ConfigError, IncompatibleModelError, InputError
from crowdspark.io.datatree import tree_from_bytes
from crowdspark.io.runs import read_latest
from crowdspark.lake import LakeSpec, make_lake, write_lake
from crowdspark.models.common import confusion_counts
from crowdspark.models.registry import ALGORITHMS, build_model, hyperparameters
from crowdspark.pipeline import aggregate
from crowdspark.quality import ITEM_COLUMNS
from tests.helpers import DATA, frames_to_blocks, written_lake

NIGHTLY = ["input.date_column=date", "incremental.mode=on", "ds.tol=1e-10", "ds.max_iter=500", "dds.tol=1e-10",
           "dds.max_iter=500"]


def config(*extra: str, algorithm: str = "ds", engine: str = "local", spark_small: bool = False):
    engine_keys = [] if engine == "local" or spark_small else ["engine.small_input_bytes=0"]
    own = [key for key in NIGHTLY if key.split(".")[0] not in ALGORITHMS or key.startswith(f"{algorithm}.")]
    return load_config(overrides=[*own, *engine_keys, *extra], algorithm=algorithm, engine_name=engine)


def write_days(root, frame: pd.DataFrame) -> str:
    """A lake of ``frame`` (item, worker, label, date) as ``root/date=<day>/part-0.parquet``."""
    for day, part in frame.groupby("date"):
        folder = os.path.join(root, f"date={day}")
        os.makedirs(folder, exist_ok=True)
        part.drop(columns="date").to_parquet(os.path.join(folder, "part-0.parquet"), index=False)
    return str(root)


def night(cfg, labels, out, day, spark=None, **kwargs):
    return aggregate(cfg, labels, str(out), kwargs.pop("gold", None), spark, run_id=day, **kwargs)


def table(out, day, name):
    """The whole table ``name`` of a night (``items`` and the item state: the newest row of each item over the
    night's chain of runs)."""
    run = os.path.join(out, f"run_id={day}")
    return read_items(run, folder=name) if name != "workers" else pd.read_parquet(os.path.join(run, name))


def delta(out, day, name="items"):
    """What the night itself wrote into ``name``."""
    return pd.read_parquet(os.path.join(out, f"run_id={day}", name))


def sorted_items(result) -> pd.DataFrame:
    return result.items.set_index("item").sort_index() if result.items is not None else None


def assert_same_answers(a: pd.DataFrame, b: pd.DataFrame, atol: float = 1e-6) -> None:
    a, b = a.set_index("item").sort_index(), b.set_index("item").sort_index()
    assert list(a.index) == list(b.index)
    assert (a["label"] == b["label"]).all()
    np.testing.assert_allclose(np.stack(a["posterior"]), np.stack(b["posterior"]), atol=atol, rtol=0)


# ---- the model capability ----------------------------------------------------------------------------------
INCREMENTAL = [name for name, cls in ALGORITHMS.items() if cls.carried_stats]


def test_ds_and_dds_declare_carried_statistics():
    assert {"ds", "dds"} <= set(INCREMENTAL)


@pytest.mark.parametrize("name", INCREMENTAL)
def test_carried_statistics_are_what_a_sweep_returns(name):
    labels = pd.read_csv(DATA / "temp" / "labels.csv", dtype=str)
    blocks, enc = frames_to_blocks(labels, max_labels=150)
    params = {"n_levels": 2} if "n_levels" in hyperparameters(name) else {}
    model = build_model(name, params, enc.n_workers, enc.n_classes, 0)
    start, _, _ = initialize(model, LocalEngine(blocks), model.stateful)
    for block in blocks:
        _, stats = model.local_step(block, None, start, 1)
        resp = model.item_responsibilities(block, start)
        assert resp.shape[0] == block.n_items and np.allclose(resp.sum(axis=1), 1.0)
        sums = confusion_counts(block, resp, enc.n_workers, enc.n_classes)
        # the same sums from labels given one by one (what a night subtracts)
        np.testing.assert_allclose(label_sums(block.worker, block.label, resp[block.item_of_label], enc.n_workers,
                                              enc.n_classes), sums, atol=1e-12)
        carried = model.carried_from_sums(sums, resp.sum(axis=0))
        assert set(carried) == set(model.carried_stats)
        for key in model.carried_stats:
            np.testing.assert_allclose(carried[key], stats[key], atol=1e-9)


@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n not in INCREMENTAL])
def test_models_without_carried_statistics_refuse_incremental_nights(tmp_path, name):
    with pytest.raises(ConfigError, match=rf"{name} cannot run incrementally .*use one of \['ds', 'dds'"):
        night(config(algorithm=name), str(tmp_path / "labels"), tmp_path / "out", "2026-11-01")


@pytest.mark.parametrize("keys, message", [
    (["input.date_column="], r"needs input.date_column"),
    (["input.window_days=30"], r"input.window_days = 30 .* set input.window_days = 0"),
    (["output.format=csv"], r"output.format = \"parquet\""),
    (["dds.select_levels=[1, 2]"], r"dds.select_levels chooses H"),
])
def test_configurations_incremental_nights_cannot_run_with_are_refused_before_reading(tmp_path, keys, message):
    with pytest.raises(ConfigError, match=message):
        night(config(*keys, algorithm="dds"), str(tmp_path / "missing"), tmp_path / "out", "2026-11-01")


def test_full_refit_needs_incremental_mode(tmp_path):
    cfg = load_config(overrides=["input.date_column=date"], engine_name="local")
    with pytest.raises(ConfigError, match=r"--full-refit applies to incremental nights"):
        night(cfg, str(tmp_path / "x"), tmp_path / "out", "2026-11-01", full_refit=True)


# ---- nights on a lake ---------------------------------------------------------------------------------------
SPEC = LakeSpec(days=8, items_per_day=120, labels_per_item=4, n_workers=16, n_classes=3, revisit=0.3,
                new_workers_per_day=1, missing_days=(5,), seed=11)


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    return written_lake(tmp_path_factory.mktemp("lake"), SPEC)


def carried_of(out, day) -> Carried:
    with open(os.path.join(out, f"run_id={day}", "_model", "carried.npz"), "rb") as handle:
        return Carried.from_tree(tree_from_bytes(handle.read()))


def recomputed(out, day, data, decay: float) -> tuple[np.ndarray, np.ndarray]:
    """The carried sums of night ``day``, recomputed from the lake and the night's item state: every item's
    labels up to ``day`` with the responsibilities it was last fitted with, weighted by its age."""
    state = table(out, day, "_incremental/items").set_index("item")
    labels = data.labels[data.labels["date"] <= day]
    with open(os.path.join(out, f"run_id={day}", "_model", "model.json")) as handle:
        document = json.load(handle)
    workers, classes = pd.Index(document["workers"]), pd.Index(document["classes"])
    resp = np.stack(state["resp"].to_numpy())
    age = np.array([(_dt.date.fromisoformat(day) - _dt.date.fromisoformat(v)).days for v in state["visited"]])
    weighted = resp * decay ** age[:, None]
    rows = state.index.get_indexer(labels["item"])
    assert (rows >= 0).all()
    sums = label_sums(workers.get_indexer(labels["worker"]), classes.get_indexer(labels["label"]), weighted[rows],
                      len(workers), len(classes))
    assert (state["labels"].sum(), len(state)) == (len(labels), labels["item"].nunique())
    return sums, weighted.sum(axis=0)


@pytest.mark.parametrize("decay", [1.0, 0.8])
def test_a_night_carries_exactly_the_contributions_of_the_items_it_did_not_refit(lake, tmp_path, decay):
    labels, gold, data = lake
    cfg = config(f"incremental.decay={decay}")
    out = tmp_path / "runs"
    kinds = [night(cfg, labels, out, SPEC.date(d), gold=gold).summary["incremental"]["kind"] for d in range(SPEC.days)]
    assert kinds == ["full refit"] + ["incremental"] * 4 + ["carried forward"] + ["incremental"] * 2
    for d in (3, 7):
        day = SPEC.date(d)
        carried = carried_of(out, day)
        sums, items = recomputed(out, day, data, decay)
        np.testing.assert_allclose(carried.label_sums, sums, atol=1e-9)
        np.testing.assert_allclose(carried.item_sums, items, atol=1e-9)
        assert carried.n_labels == int((data.labels["date"] <= day).sum())
    # every item of the lake is in the result, and its labels are counted once per worker
    last = table(out, SPEC.date(7), "items")
    assert set(last["item"]) == set(data.labels["item"])
    workers = table(out, SPEC.date(7), "workers").set_index("worker")["n_labels"].sort_index()
    assert workers.equals(data.labels.groupby("worker").size().sort_index().astype(np.int64))


def test_a_night_refits_the_items_its_new_labels_touch(lake, tmp_path):
    labels, gold, data = lake
    out = tmp_path / "runs"
    cfg = config()
    for d in range(3):
        summary = night(cfg, labels, out, SPEC.date(d), gold=gold).summary
    day = SPEC.date(2)
    touched = set(data.labels.loc[data.labels["date"] == day, "item"])
    revisits = {i for i in touched if not i.startswith("d002-")}
    report = summary["incremental"]
    assert report["items_fitted"] == len(touched) and report["items_revisited"] == len(revisits) > 0
    upto = data.labels[data.labels["date"] <= day]
    assert report["labels_fitted"] == int(upto["item"].isin(touched).sum())
    assert report["earlier_days"] == [SPEC.date(1)]
    assert summary["inputs"]["days"] == {day: int((data.labels["date"] == day).sum())}
    state = table(out, day, "_incremental/items").set_index("item")
    assert (state.loc[sorted(touched), "visited"] == day).all()
    assert (state.drop(sorted(touched))["visited"] != day).all()
    assert list(state.loc[sorted(revisits)[0], "days"]) == [SPEC.date(1), day]
    # items not refitted keep the answers of the night that fitted them
    before = table(out, SPEC.date(1), "items").set_index("item")
    now = table(out, day, "items").set_index("item")
    kept = sorted(set(before.index) - touched)
    assert now.loc[kept, "label"].equals(before.loc[kept, "label"])
    assert summary["counts"]["items"] == len(now) == data.labels.loc[data.labels["date"] <= day, "item"].nunique()


def test_with_nothing_new_a_night_equals_the_full_refit(lake, tmp_path):
    labels, gold, data = lake
    cfg = config()
    for d in range(4):
        night(cfg, labels, tmp_path / "inc", SPEC.date(d), gold=gold)
    night(cfg, labels, tmp_path / "inc", SPEC.date(4), gold=gold, full_refit=True)
    result = night(cfg, labels, tmp_path / "inc", SPEC.date(5), gold=gold)  # day 5 has no labels
    assert result.summary["incremental"]["kind"] == "carried forward"
    assert any("no new data since run" in w for w in result.summary["warnings"])
    assert "quality" not in result.summary and "metrics" not in result.summary  # nothing was evaluated tonight
    full = night(cfg, labels, tmp_path / "full", SPEC.date(5), gold=gold, full_refit=True)
    assert len(result.items) == 0 and len(delta(tmp_path / "inc", SPEC.date(5))) == 0
    assert_same_answers(table(tmp_path / "inc", SPEC.date(5), "items"), full.items)
    a, b = (r.workers.set_index("worker").sort_index() for r in (result, full))
    np.testing.assert_allclose(a["accuracy"], b["accuracy"], atol=1e-6)
    assert a["n_labels"].equals(b["n_labels"])
    assert carried_of(tmp_path / "inc", SPEC.date(5)).as_of == SPEC.date(5)


def test_a_window_run_and_every_kind_of_night_go_through_the_one_path(lake, tmp_path, monkeypatch):
    """A window run, a full refit and an incremental night each read, prepare, fit and write through the same
    functions of crowdspark.pipeline.run; a night without new labels reads nothing to prepare or fit."""
    from crowdspark.pipeline import run as run_module

    labels, gold, _ = lake
    calls: list[str] = []
    for name in ("prepare_reading", "fit_prepared", "write_result"):
        def spy(*args, _original=getattr(run_module, name), _name=name, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(run_module, name, spy)
    one_path = ["prepare_reading", "fit_prepared", "write_result"]
    aggregate(load_config(algorithm="ds", engine_name="local"), str(DATA / "rte" / "labels.csv"),
              str(tmp_path / "window"))
    assert calls == one_path
    for d, kind in ((0, "full refit"), (1, "incremental"), (5, "carried forward")):
        calls.clear()
        result = night(config(), labels, tmp_path / "runs", SPEC.date(d), gold=gold)
        assert result.summary["incremental"]["kind"] == kind
        assert calls == (one_path if kind != "carried forward" else ["write_result"])
        if d == 1:  # day 5 continues the chain: days 2 to 4 are fitted by the night of day 4
            night(config(), labels, tmp_path / "runs", SPEC.date(4), gold=gold)


def relabelled_lake(root) -> tuple[str, pd.DataFrame]:
    """Two days; every item of day 1 gets more labels on day 2 (from other workers)."""
    rng = np.random.default_rng(5)
    truth = rng.integers(0, 3, 80)
    accuracy = rng.uniform(0.5, 0.9, 12)
    rows = []
    for day, workers in (("2026-11-01", range(0, 8)), ("2026-11-02", range(4, 12))):
        for i, t in enumerate(truth):
            for k in rng.choice(list(workers), 3, replace=False):
                label = t if rng.random() < accuracy[k] else (t + rng.integers(1, 3)) % 3
                rows.append((f"i{i:03d}", f"w{k:02d}", str(label), day))
    frame = pd.DataFrame(rows, columns=["item", "worker", "label", "date"])
    return write_days(root, frame), frame


@pytest.mark.parametrize("algorithm", ["ds", "dds", "ads"])
def test_a_night_that_refits_every_item_equals_a_warm_full_refit(tmp_path, algorithm):
    labels, _ = relabelled_lake(tmp_path / "labels")
    extra = ["dds.n_levels=2"] if algorithm == "dds" else []
    cfg = config(*extra, algorithm=algorithm)
    night(cfg, labels, tmp_path / "inc", "2026-11-01")
    inc = night(cfg, labels, tmp_path / "inc", "2026-11-02")
    assert inc.summary["incremental"]["items_revisited"] == 80
    warm = night(cfg, labels, tmp_path / "warm", "2026-11-02", warm_start=str(tmp_path / "inc" / "run_id=2026-11-01"),
                 full_refit=True)
    assert warm.summary["incremental"]["kind"] == "full refit" and warm.summary["warm_start"]["used"]
    assert_same_answers(inc.items, warm.items)
    assert inc.summary["iterations"] == warm.summary["iterations"]
    if algorithm == "ads":  # the night keeps the first night's structure, as dds keeps its H
        assert inc.summary["model"]["structure_selection"]["reason"] == "kept from the warm-start model"


def test_decay_follows_a_drifting_worker(tmp_path):
    spec = LakeSpec(days=16, items_per_day=150, labels_per_item=4, n_workers=12, n_classes=3, drifting_workers=2,
                    drift=(0.9, 0.35), accuracy=(0.75, 0.85), seed=4)
    data = make_lake(spec)
    labels = str(tmp_path / "labels")
    write_lake(data, labels)
    planted = data.accuracy.set_index(["worker", "date"])["accuracy"]
    errors = {}
    for decay in (1.0, 0.8):
        cfg = config(f"incremental.decay={decay}")
        for d in range(spec.days):
            result = night(cfg, labels, tmp_path / f"d{decay}", spec.date(d))
        estimated = result.workers.set_index("worker")["accuracy"]
        errors[decay] = np.mean([abs(estimated[w] - planted[(w, spec.date(spec.days - 1))]) for w in data.drifting])
        moves = result.summary["incremental"]["accuracy_moves"]
        assert len(moves) == 10 and abs(moves[0]["change"]) >= abs(moves[-1]["change"])
    assert errors[0.8] < 0.6 * errors[1.0]


def test_periodic_full_refits(lake, tmp_path):
    labels, _, _ = lake
    cfg = config("incremental.full_refit_days=3")
    kinds = [night(cfg, labels, tmp_path / "runs", SPEC.date(d)).summary["incremental"] for d in range(5)]
    assert [k["kind"] for k in kinds] == ["full refit", "incremental", "incremental", "full refit", "incremental"]
    assert "incremental.full_refit_days = 3" in kinds[3]["reason"]
    assert kinds[4]["full_refit_as_of"] == SPEC.date(3)


# ---- refusals -----------------------------------------------------------------------------------------------
@pytest.fixture()
def first_night(lake, tmp_path):
    labels, gold, _ = lake
    out = tmp_path / "runs"
    night(config(), labels, out, SPEC.date(0), gold=gold)
    return labels, out


@pytest.mark.parametrize("keys, algorithm, message", [
    ([], "dds", r"it was fitted with 'ds', this run uses 'dds'"),
    (["ds.smoothing=0.2"], "ds", r"the model's parameters changed \(ds.smoothing: 0.5 -> 0.2\)"),
    (["seed=3"], "ds", r"the model's parameters changed \(ds.seed: 0 -> 3\)"),
    (["input.classes=[\"0\", \"1\", \"2\", \"3\"]"], "ds", r"input.classes: \[\] -> \['0', '1', '2', '3'\]"),
])
def test_an_incompatible_previous_run_is_refused_with_the_way_to_refit(first_night, keys, algorithm, message):
    labels, out = first_night
    with pytest.raises(IncompatibleModelError, match=message + r".*run a full refit: add --full-refit"):
        night(config(*keys, algorithm=algorithm), labels, out, SPEC.date(1))
    assert read_latest(str(out))["run_id"] == SPEC.date(0)
    # the same night as a full refit runs, and the next one continues from it
    assert night(config(*keys, algorithm=algorithm), labels, out, SPEC.date(1), full_refit=True).summary[
        "incremental"]["kind"] == "full refit"
    assert night(config(*keys, algorithm=algorithm), labels, out, SPEC.date(2)).summary["incremental"][
        "kind"] == "incremental"


def test_a_worker_table_is_refused_on_a_night_that_continues_and_starts_a_full_refit(first_night):
    labels, out = first_night
    workers = os.path.join(out, f"run_id={SPEC.date(0)}")
    with pytest.raises(ConfigError, match=r"--initial-workers .* continues the previous run .*--full-refit"):
        night(config(), labels, out, SPEC.date(1), initial_workers=workers)
    assert read_latest(str(out))["run_id"] == SPEC.date(0)
    refit = night(config(), labels, out, SPEC.date(1), full_refit=True, initial_workers=workers).summary
    assert refit["incremental"]["kind"] == "full refit" and refit["warm_start"]["worker_table"] is True


def test_a_previous_run_without_incremental_state_is_refused_or_refitted(lake, tmp_path):
    _, _, data = lake
    labels = str(tmp_path / "labels.parquet")  # the date in a column: the pandas reader of any run reads it
    data.labels.to_parquet(labels, index=False)
    out = tmp_path / "runs"
    plain = load_config(overrides=["input.date_column=date"], engine_name="local")
    night(plain, labels, out, SPEC.date(0))
    with pytest.raises(IncompatibleModelError, match=r"it has no carried summary .*add --full-refit"):
        night(config(), labels, out, SPEC.date(1))
    cold = night(config("nightly.on_incompatible=cold"), labels, out, SPEC.date(1)).summary["incremental"]
    assert cold["kind"] == "full refit" and "no carried summary" in cold["reason"]


def test_a_new_class_is_refused_before_the_fit(tmp_path):
    spec = LakeSpec(days=3, items_per_day=60, n_workers=10, new_class_day=2, seed=2)
    labels = str(tmp_path / "labels")
    write_lake(make_lake(spec), labels)
    out = tmp_path / "runs"
    night(config(), labels, out, spec.date(0))
    night(config(), labels, out, spec.date(1))
    with pytest.raises(IncompatibleModelError, match=r"label\(s\) \['3'\] outside the previous run's classes"):
        night(config(), labels, out, spec.date(2))
    assert not (out / f"run_id={spec.date(2)}").exists()
    refit = night(config("nightly.on_incompatible=cold"), labels, out, spec.date(2))
    assert refit.summary["classes"] == ["0", "1", "2", "3"] and refit.summary["incremental"]["kind"] == "full refit"


def test_labels_added_to_a_day_a_run_has_read_are_refused(tmp_path):
    labels, frame = relabelled_lake(tmp_path / "labels")
    out = tmp_path / "runs"
    night(config(), labels, out, "2026-11-01")
    late = frame[frame["date"] == "2026-11-01"].head(5).assign(worker="w99")
    late.drop(columns="date").to_parquet(os.path.join(labels, "date=2026-11-01", "part-1.parquet"), index=False)
    with pytest.raises(IncompatibleModelError, match=r"1 day\(s\) of the input changed or are gone .*2026-11-01: "
                                                    r"\{'files': 1, .*--full-refit"):
        night(config(), labels, out, "2026-11-02")
    # a previous run that recorded no partitions: the revisited items' label counts still show it
    os.remove(out / "run_id=2026-11-01" / "_incremental" / "partitions.json")
    with pytest.raises(InputError, match=r"labels of a day were added or removed after a run read it"):
        night(config(), labels, out, "2026-11-02")


# ---- interrupted nights -------------------------------------------------------------------------------------
def digest(folder) -> dict[str, str]:
    out = {}
    for base, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(base, name)
            with open(path, "rb") as handle:
                out[os.path.relpath(path, folder)] = hashlib.sha256(handle.read()).hexdigest()
    return out


def test_an_interrupted_night_changes_nothing_and_its_rerun_gives_the_same_answer(lake, tmp_path, monkeypatch):
    labels, gold, _ = lake
    cfg = config()
    for d in range(3):
        night(cfg, labels, tmp_path / "runs", SPEC.date(d), gold=gold)
        night(cfg, labels, tmp_path / "clean", SPEC.date(d), gold=gold)
    before = digest(tmp_path / "runs")

    def killed(self):
        raise KeyboardInterrupt("killed")

    with monkeypatch.context() as patch:
        patch.setattr("crowdspark.io.sink.StagedOutput.commit", killed)
        patch.setattr("crowdspark.io.sink.StagedOutput.abort", lambda self: None)
        with pytest.raises(KeyboardInterrupt):
            night(cfg, labels, tmp_path / "runs", SPEC.date(3), gold=gold)
    after = {k: v for k, v in digest(tmp_path / "runs").items() if not k.startswith("_crowdspark-staging-")}
    assert after == before  # the previous runs, their state and _LATEST.json are untouched
    rerun = night(cfg, labels, tmp_path / "runs", SPEC.date(3), gold=gold)
    clean = night(cfg, labels, tmp_path / "clean", SPEC.date(3), gold=gold)
    assert "removed" in rerun.summary["recovered"]
    assert_same_answers(rerun.items, clean.items, atol=0)
    assert digest(tmp_path / "runs" / f"run_id={SPEC.date(3)}" / "_model") == digest(
        tmp_path / "clean" / f"run_id={SPEC.date(3)}" / "_model")
    # the same night run again continues from the same previous run, and gives the same answer
    again = night(cfg, labels, tmp_path / "runs", SPEC.date(3), gold=gold)
    assert_same_answers(again.items, clean.items, atol=0)


# ---- on Spark -----------------------------------------------------------------------------------------------
#: the Spark nights' lake: five nights that go through every kind of night of :data:`SPEC`'s eight (a first full
#: fit, nights that revisit items, a missing day carried forward, a night after it that revisits none), each
#: night on Spark being some 20-100 Spark jobs
SPARK_SPEC = LakeSpec(days=5, items_per_day=120, labels_per_item=4, n_workers=16, n_classes=3, revisit=0.3,
                      new_workers_per_day=1, missing_days=(2,), seed=11)


@pytest.fixture(scope="module")
def spark_lake(tmp_path_factory):
    return written_lake(tmp_path_factory.mktemp("spark-lake"), SPARK_SPEC)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("small", [False, pytest.param(True, marks=pytest.mark.full)], ids=["spark-engine", "collected"])
def test_spark_nights_give_the_local_nights_answers(spark, spark_lake, tmp_path, small, monkeypatch):
    labels, gold, _ = spark_lake
    last = SPARK_SPEC.date(SPARK_SPEC.days - 1)
    local, distributed = config(), config(engine="spark", spark_small=small)
    if small:  # remote files (simulated): Spark reads the days, the small night is collected to the driver
        monkeypatch.setattr("crowdspark.pipeline.source._pandas_files", lambda *args, **kwargs: None)
    kinds = []
    for d in range(SPARK_SPEC.days):
        a = night(local, labels, tmp_path / "local", SPARK_SPEC.date(d), gold=gold)
        b = night(distributed, labels, tmp_path / "spark", SPARK_SPEC.date(d), spark=spark, gold=gold)
        assert a.summary["incremental"]["kind"] == b.summary["incremental"]["kind"]
        kinds.append((b.summary["incremental"]["kind"], b.summary["incremental"].get("items_revisited")))
        assert b.summary["engine"] == ("local" if small else "spark")
        assert a.summary["inputs"]["days"] == b.summary["inputs"]["days"]
    # every kind of night: the first full fit, nights that revisit items, the missing day carried forward, a
    # night after it that revisits none
    assert kinds[0][0] == "full refit" and kinds[SPARK_SPEC.missing_days[0]][0] == "carried forward"
    revisited = [n for kind, n in kinds if kind == "incremental"]
    assert 0 in revisited and max(revisited) > 0
    for name in ("items", "_incremental/items"):
        x, y = table(tmp_path / "local", last, name), table(tmp_path / "spark", last, name)
        assert sorted(x["item"]) == sorted(y["item"])
    assert_same_answers(table(tmp_path / "local", last, "items"), table(tmp_path / "spark", last, "items"))
    x, y = (table(tmp_path / e, last, "items").set_index("item").sort_index() for e in ("local", "spark"))
    for column in ITEM_COLUMNS:  # each item's quality columns, from the night that last fitted it
        np.testing.assert_allclose(x[column].to_numpy(float), y[column].to_numpy(float), rtol=0, atol=1e-9)
    # read with Spark, the whole answer is the same
    assert_same_answers(read_items(str(tmp_path / "spark"), spark).toPandas(), table(tmp_path / "local", last,
                                                                                  "items"))
    a, b = carried_of(tmp_path / "local", last), carried_of(tmp_path / "spark", last)
    assert a.n_items == b.n_items and a.n_labels == b.n_labels


@pytest.mark.spark
@pytest.mark.slow
def test_spark_nights_every_item_refitted_and_nothing_new(spark, tmp_path, monkeypatch):
    labels, _ = relabelled_lake(tmp_path / "labels")
    cfg = config(engine="spark")
    night(cfg, labels, tmp_path / "inc", "2026-11-01", spark=spark)
    # a night killed before its commit leaves the previous state as it was
    before = digest(tmp_path / "inc")
    with monkeypatch.context() as patch:
        patch.setattr("crowdspark.io.sink.StagedOutput.commit", lambda self: (_ for _ in ()).throw(KeyboardInterrupt()))
        patch.setattr("crowdspark.io.sink.StagedOutput.abort", lambda self: None)
        with pytest.raises(KeyboardInterrupt):
            night(cfg, labels, tmp_path / "inc", "2026-11-02", spark=spark)
    assert {k: v for k, v in digest(tmp_path / "inc").items() if not k.startswith("_crowdspark-")} == before
    night(cfg, labels, tmp_path / "inc", "2026-11-02", spark=spark)
    night(cfg, labels, tmp_path / "warm", "2026-11-02", spark=spark, full_refit=True,
          warm_start=str(tmp_path / "inc" / "run_id=2026-11-01"))
    assert_same_answers(table(tmp_path / "inc", "2026-11-02", "items"), table(tmp_path / "warm", "2026-11-02", "items"))
    # nothing new on 2026-11-03: the night carries the result forward, equal to a full refit of the same days
    # from the same start (a cold start converges to within ds.tol of it, not to 1e-6)
    night(cfg, labels, tmp_path / "inc", "2026-11-03", spark=spark)
    night(cfg, labels, tmp_path / "full", "2026-11-03", spark=spark, full_refit=True,
          warm_start=str(tmp_path / "inc" / "run_id=2026-11-01"))
    assert_same_answers(table(tmp_path / "inc", "2026-11-03", "items"), table(tmp_path / "full", "2026-11-03", "items"))


# ---- what a night writes: the items it fitted, and the chain that makes up the whole answer -------------------
def test_a_night_writes_only_the_items_it_fitted_and_read_items_gives_the_whole_answer(lake, tmp_path, capsys):
    from crowdspark.cli import main

    labels, gold, data = lake
    out = tmp_path / "runs"
    for d in range(3):
        result = night(config(), labels, out, SPEC.date(d), gold=gold)
    day = SPEC.date(2)
    touched = set(data.labels.loc[data.labels["date"] == day, "item"])
    assert set(delta(out, day)["item"]) == touched == set(result.items["item"])
    assert set(delta(out, day, "_incremental/items")["item"]) == touched
    assert result.summary["items_scope"].startswith("fitted this night")
    with open(out / f"run_id={SPEC.date(0)}" / "summary.json") as handle:
        assert json.load(handle)["items_scope"].startswith("all")
    with open(out / f"run_id={day}" / "_incremental" / "chain.json") as handle:
        assert json.load(handle) == {"runs": [f"run_id={SPEC.date(0)}", f"run_id={SPEC.date(1)}"]}
    whole = read_items(str(out)).set_index("item")  # the run root: its latest run
    assert sorted(whole.index) == sorted(data.labels.loc[data.labels["date"] <= day, "item"].unique())
    assert result.summary["counts"]["items"] == len(whole)
    for d in range(3):  # each item's row is the one of the newest night that fitted it
        mine = delta(out, SPEC.date(d)).set_index("item")
        later = set().union(*(set(delta(out, SPEC.date(e))["item"]) for e in range(d + 1, 3)))
        own = sorted(set(mine.index) - later)
        assert len(own) and whole.loc[own, "label"].equals(mine.loc[own, "label"])
        np.testing.assert_array_equal(np.stack(whole.loc[own, "posterior"]), np.stack(mine.loc[own, "posterior"]))
    capsys.readouterr()
    assert main(["items", str(out / f"run_id={day}")]) == 0
    printed = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out), dtype={"label": str}).set_index("item")
    assert printed["label"].equals(whole["label"])
    assert main(["items", str(out), "--out", str(tmp_path / "whole")]) == 0
    assert_same_answers(pd.read_parquet(tmp_path / "whole" / "items"), whole.reset_index(), atol=0)


def test_retention_keeps_the_runs_a_kept_night_builds_on_until_a_full_refit(lake, tmp_path):
    labels, gold, _ = lake
    out = tmp_path / "runs"
    cfg = config("nightly.keep_runs=1")
    for d in range(3):
        night(cfg, labels, out, SPEC.date(d), gold=gold)
    assert sorted(p.name for p in out.glob("run_id=*")) == [f"run_id={SPEC.date(d)}" for d in range(3)]
    assert len(read_items(str(out))) > len(delta(out, SPEC.date(2)))
    night(cfg, labels, out, SPEC.date(3), gold=gold, full_refit=True)  # whole again: the older runs may go
    assert sorted(p.name for p in out.glob("run_id=*")) == [f"run_id={SPEC.date(3)}"]
    assert not (out / f"run_id={SPEC.date(3)}" / "_incremental" / "chain.json").exists()


def test_a_night_whose_chain_lost_a_run_is_refused_before_reading(lake, tmp_path):
    import shutil

    labels, gold, _ = lake
    out = tmp_path / "runs"
    for d in range(3):
        night(config(), labels, out, SPEC.date(d), gold=gold)
    shutil.rmtree(out / f"run_id={SPEC.date(1)}")
    with pytest.raises(InputError, match="earlier runs its answer builds on are gone"):
        read_items(str(out))
    with pytest.raises(IncompatibleModelError, match=r"are gone .*--full-refit"):
        night(config(), labels, out, SPEC.date(3), gold=gold)
    cold = night(config("nightly.on_incompatible=cold"), labels, out, SPEC.date(3), gold=gold)
    assert cold.summary["incremental"]["kind"] == "full refit"
    assert_same_answers(read_items(str(out)), cold.items, atol=0)


def test_a_local_night_continues_a_run_whose_index_is_a_parquet_folder(lake, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    labels, gold, _ = lake
    for root in ("arrow", "parquet"):
        for d in range(3):
            night(config(), labels, tmp_path / root, SPEC.date(d), gold=gold)
    state = tmp_path / "parquet" / f"run_id={SPEC.date(2)}" / "_incremental"
    index = pa.ipc.open_file(pa.memory_map(str(state / "index.arrow"))).read_all()
    os.remove(state / "index.arrow")
    os.makedirs(state / "index")
    pq.write_table(index, state / "index" / "part-00000.snappy.parquet")
    a, b = (night(config(), labels, tmp_path / root, SPEC.date(3), gold=gold) for root in ("arrow", "parquet"))
    assert a.summary["incremental"]["items_revisited"] == b.summary["incremental"]["items_revisited"] > 0
    assert_same_answers(a.items, b.items, atol=0)
    assert_same_answers(read_items(str(tmp_path / "arrow")), read_items(str(tmp_path / "parquet")), atol=0)


@pytest.mark.spark
@pytest.mark.slow
def test_nights_switch_engines_through_either_index(spark, lake, tmp_path):
    labels, gold, _ = lake
    local, distributed = config(), config(engine="spark")
    for d in range(3):
        night(local, labels, tmp_path / "local", SPEC.date(d), gold=gold)
        night(local, labels, tmp_path / "mixed", SPEC.date(d), gold=gold)
    # the Spark engine continues a local night (Arrow IPC index), the local engine a Spark night (Parquet index)
    for d, cfg, engine in ((3, distributed, spark), (4, local, None)):
        night(local, labels, tmp_path / "local", SPEC.date(d), gold=gold)
        mixed = night(cfg, labels, tmp_path / "mixed", SPEC.date(d), spark=engine, gold=gold)
        assert mixed.summary["incremental"]["kind"] == "incremental"
        assert_same_answers(table(tmp_path / "local", SPEC.date(d), "items"), table(tmp_path / "mixed", SPEC.date(d),
                                                                                    "items"))
    assert (tmp_path / "mixed" / f"run_id={SPEC.date(3)}" / "_incremental" / "index").is_dir()


def test_a_night_cannot_replace_a_run_it_builds_on(lake, tmp_path):
    labels, gold, _ = lake
    out = str(tmp_path / "one")
    aggregate(config(), labels, out, gold, as_of=_dt.date.fromisoformat(SPEC.date(0)))
    with pytest.raises(ConfigError, match=r"is a run that this incremental night builds on .*--run-id DATE"):
        aggregate(config(), labels, out, gold, warm_start=out, as_of=_dt.date.fromisoformat(SPEC.date(1)))
    assert read_items(out)["item"].str.startswith("d000-").all()  # the previous run is as it was
    full = aggregate(config(), labels, out, gold, warm_start=out, as_of=_dt.date.fromisoformat(SPEC.date(1)),
                     full_refit=True)  # a full refit writes every item: it may replace it
    assert full.summary["items_scope"].startswith("all")


# ---- quality signals and the files read, night by night ----------------------------------------------------------
def test_a_night_writes_the_quality_columns_of_the_items_it_fitted_and_lists_the_days_it_read(lake, tmp_path):
    labels, gold, data = lake
    out = tmp_path / "runs"
    for d in range(3):
        result = night(config(), labels, out, SPEC.date(d), gold=gold)
    day = SPEC.date(2)
    items = delta(out, day).set_index("item")
    assert set(ITEM_COLUMNS) <= set(items.columns)
    # each fitted item's columns count all its labels up to the night, the earlier ones included
    upto = data.labels[data.labels["date"] <= day]
    mine = upto[upto["item"].isin(items.index)]
    assert items["n_labels"].equals(mine.groupby("item").size().reindex(items.index).astype(items["n_labels"].dtype))
    same = mine["label"].astype(str).to_numpy() == items.loc[mine["item"], "label"].astype(str).to_numpy()
    agreement = pd.Series(same, index=mine["item"].to_numpy()).groupby(level=0).mean().reindex(items.index)
    np.testing.assert_allclose(items["agreement"], agreement, rtol=0, atol=1e-12)
    queue = delta(out, day, "relabel")
    assert len(queue) == len(items) and set(queue["item"]) == set(items.index)
    summary = result.summary
    assert summary["quality"]["covers"].startswith("the items fitted this night")
    first = json.loads((out / f"run_id={SPEC.date(0)}" / "summary.json").read_text())
    assert "covers" not in first["quality"] and set(ITEM_COLUMNS) <= set(delta(out, SPEC.date(0)).columns)
    # the manifest lists the days read (the new day and the earlier days of its revisited items) and their files
    read = summary["inputs"]["files"]["labels"]
    days = sorted({day, *summary["incremental"]["earlier_days"]})
    assert read["days"] == days and len(days) > 1
    files = [p for d in days for p in Path(labels).glob(f"date={d}/*") if not p.name.startswith(("_", "."))]
    assert read["files"] == len(files) and read["bytes"] == sum(p.stat().st_size for p in files)
    assert summary["inputs"]["files"]["gold"]["files"] == 1 and set(summary["inputs"]["files"]) == {"labels", "gold"}
