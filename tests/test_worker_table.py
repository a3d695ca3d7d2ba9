"""Starting worker matrices from a worker table (``--initial-workers``, the pandas API's ``initial_error``).

A table of a previous run (``workers/``) or a user's (``worker`` and ``confusion`` or ``accuracy``) becomes a
warm start of the workers it lists (``WarmStart(workers_only=True)``); the other workers, and the class and
level values, start as usual.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from crowdspark.cli import main
from crowdspark.config import load_config
from crowdspark.engine.local import LocalEngine
from crowdspark.engine.loop import initialize
from crowdspark.errors import IncompatibleModelError, InputError
from crowdspark.io.worker_table import read_worker_table, worker_table_from_frame
from crowdspark.models.common import one_coin_confusion
from crowdspark.models.registry import build_model
from crowdspark.pipeline.fit import table_start
from tests.helpers import DATA, frames_to_blocks


@pytest.fixture(scope="module")
def temp():
    return pd.read_csv(DATA / "temp" / "labels.csv", dtype=str)


def _started(algorithm: str, labels: pd.DataFrame, table, **params):
    """(model, its own start, the start with the table) on ``labels``."""
    blocks, enc = frames_to_blocks(labels)
    model = build_model(algorithm, params, enc.n_workers, enc.n_classes, 0)
    own, _, _ = initialize(model, LocalEngine(blocks), model.stateful)
    return model, own, table_start(table, enc).start(model, own), enc


def test_listed_workers_start_from_the_table_and_the_others_as_usual(temp):
    workers = sorted(temp["worker"].unique())
    listed = workers[::3]
    confusion = np.array([[[0.8, 0.2], [0.3, 0.7]]] * len(listed))
    confusion[0] = [[1.0, 0.0], [0.5, 0.5]]
    table = worker_table_from_frame(pd.DataFrame({"worker": listed, "confusion": list(confusion)}))
    model, own, started, enc = _started("ds", temp, table)
    index = [enc.workers.index(w) for w in listed]
    others = [k for k in range(enc.n_workers) if k not in index]
    np.testing.assert_allclose(np.exp(started["log_pi"][index]), confusion, atol=1e-12)
    np.testing.assert_array_equal(started["log_pi"][others], own["log_pi"][others])
    np.testing.assert_array_equal(started["log_alpha"], own["log_alpha"])  # the class proportions stay the run's
    assert np.isfinite(started["log_pi"]).all()  # a zero cell is floored, not -inf


def test_a_table_gives_the_worker_matrices_a_warm_start_from_the_same_run_gives(tmp_path, temp):
    run = tmp_path / "run"
    temp.to_csv(tmp_path / "labels.csv", index=False)
    assert main(["aggregate", "--labels", str(tmp_path / "labels.csv"), "--engine", "local", "--algorithm", "ds",
                 "--output", str(run), "--quiet"]) == 0
    table = read_worker_table(str(run))
    assert table.classes == ("1", "2")
    from crowdspark.io.saved_model import load_saved_model
    from crowdspark.pipeline.fit import warm_start_for

    model, own, from_table, enc = _started("ds", temp, table)
    config = load_config(engine_name="local", algorithm="ds")
    from_model = warm_start_for(load_saved_model(str(run)), config, enc).start(model, own)
    np.testing.assert_allclose(from_table["log_pi"], from_model["log_pi"], rtol=0, atol=1e-12)
    assert not np.allclose(from_table["log_pi"], own["log_pi"])


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_the_command_line_starts_from_a_previous_runs_workers(tmp_path, fmt):
    labels = str(DATA / "web_search" / "labels.csv")
    first, second = tmp_path / "first", tmp_path / "second"
    common = ["aggregate", "--labels", labels, "--engine", "local", "--quiet", "--set", f"output.format={fmt}"]
    assert main([*common, "--output", str(first)]) == 0
    for start in (str(first), str(first / "workers")):
        assert main([*common, "--output", str(second), "--initial-workers", start]) == 0
        summary = json.loads((second / "summary.json").read_text())
        cold = json.loads((first / "summary.json").read_text())
        assert summary["warm_start"] == {"source": start, "used": True, "worker_table": True, "workers_listed": 177,
                                         "workers_known": 177}
        assert summary["iterations"] < cold["iterations"]


def test_an_accuracy_is_a_one_coin_matrix(temp):
    workers = sorted(temp["worker"].unique())[:4]
    table = worker_table_from_frame(pd.DataFrame({"worker": workers, "accuracy": [0.9, 0.6, 1.0, 0.5]}))
    model, own, started, enc = _started("ds", temp, table)
    index = [enc.workers.index(w) for w in workers]
    expected = one_coin_confusion(np.array([0.9, 0.6, 1.0, 0.5]), 2)
    np.testing.assert_allclose(np.exp(started["log_pi"][index]), expected, atol=1e-12)
    np.testing.assert_allclose(expected[0], [[0.9, 0.1], [0.1, 0.9]])
    three = one_coin_confusion(np.array([0.7]), 3)[0]
    np.testing.assert_allclose(three, [[0.7, 0.15, 0.15], [0.15, 0.7, 0.15], [0.15, 0.15, 0.7]])


@pytest.mark.parametrize("algorithm, key", [("dds", "log_B"), ("bcc", "pi"), ("fixed-idbla", "pi"), ("zbs", "skill")])
def test_every_model_with_worker_parameters_starts_from_a_table(temp, algorithm, key):
    workers = sorted(temp["worker"].unique())[:5]
    table = worker_table_from_frame(pd.DataFrame({"worker": workers, "accuracy": [0.9, 0.8, 0.7, 0.6, 0.55]}))
    model, own, started, enc = _started(algorithm, temp, table)
    index = [enc.workers.index(w) for w in workers]
    assert not np.allclose(np.asarray(started[key])[index], np.asarray(own[key])[index])
    if algorithm == "fixed-idbla":  # the fixed levels keep their fixed matrices
        fixed = ~model.learned_levels()
        np.testing.assert_array_equal(started["pi"][:, fixed], own["pi"][:, fixed])


def test_models_without_worker_parameters_refuse_a_table(tmp_path, temp, capsys):
    temp.to_csv(tmp_path / "labels.csv", index=False)
    pd.DataFrame({"worker": ["w"], "accuracy": [0.9]}).to_csv(tmp_path / "table.csv", index=False)
    for algorithm in ("mv", "wawa", "kos", "mmsr", "idbla-cvb"):
        code = main(["aggregate", "--labels", str(tmp_path / "labels.csv"), "--engine", "local", "--algorithm",
                     algorithm, "--output", str(tmp_path / "out"), "--initial-workers", str(tmp_path / "table.csv")])
        assert code == 2 and f"{algorithm} cannot start its workers from a worker table" in capsys.readouterr().err
    code = main(["aggregate", "--labels", str(tmp_path / "labels.csv"), "--engine", "local", "--output",
                 str(tmp_path / "out"), "--initial-workers", str(tmp_path / "table.csv"), "--warm-start",
                 str(tmp_path / "table.csv")])
    assert code == 2 and "give one" in capsys.readouterr().err


@pytest.mark.parametrize("frame, message", [
    (pd.DataFrame({"worker": ["a"], "skill": [0.5]}), r"needs the columns worker and confusion or accuracy"),
    (pd.DataFrame({"worker": ["a", "a"], "accuracy": [0.5, 0.6]}), r"worker 'a' is listed more than once"),
    (pd.DataFrame({"worker": ["a", None], "accuracy": [0.5, 0.6]}), r"1 row\(s\) have no worker"),
    (pd.DataFrame({"worker": ["a"], "accuracy": [1.5]}), r"accuracy of worker 'a' must be a number in \[0, 1\]"),
    (pd.DataFrame({"worker": ["a"], "accuracy": ["high"]}), r"accuracy of worker 'a'.*'high'"),
    (pd.DataFrame({"worker": ["a"], "confusion": ["[[1, 0], [0]]"]}), r"confusion of worker 'a' must be a C x C"),
    (pd.DataFrame({"worker": ["a"], "confusion": ["[[1, -1], [0, 1]]"]}), r"non-negative"),
    (pd.DataFrame({"worker": ["a", "b"], "confusion": ["[[1, 0], [0, 1]]", "[[1,0,0],[0,1,0],[0,0,1]]"]}),
     r"worker 'b' is 3 x 3, other workers' are 2 x 2"),
    (pd.DataFrame({"worker": ["a", "b"], "confusion": ["[[1, 0], [0, 1]]", None], "accuracy": [None, None]}),
     r"worker 'b' has neither a confusion matrix nor an accuracy"),
])
def test_bad_tables_are_input_errors(frame, message):
    with pytest.raises(InputError, match=message):
        worker_table_from_frame(frame, "t.csv")


def test_counts_are_normalized_and_a_table_of_other_classes_is_incompatible(temp):
    table = worker_table_from_frame(pd.DataFrame({"worker": ["a"], "confusion": [[[9, 1], [2, 8]]]}))
    confusion, accuracy = table.matrices(("1", "2"))
    np.testing.assert_allclose(confusion[0], [[0.9, 0.1], [0.2, 0.8]])
    np.testing.assert_allclose(accuracy, [0.85])
    with pytest.raises(IncompatibleModelError, match=r"2 x 2 confusion matrices, this run has 3 classes"):
        table.matrices(("a", "b", "c"))
    named = worker_table_from_frame(pd.DataFrame({"worker": ["a"], "accuracy": [0.9]}), classes=("0", "1"))
    with pytest.raises(IncompatibleModelError, match=r"written for the classes \['0', '1'\], this run has"):
        named.matrices(("1", "2"))


def test_a_missing_table_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"--initial-workers .* does not exist"):
        read_worker_table(str(tmp_path / "nothing"))


def test_on_incompatible_cold_runs_without_the_table(tmp_path, temp):
    from crowdspark.pipeline import aggregate_frames
    from crowdspark.pipeline.fit import RunOptions

    table = worker_table_from_frame(pd.DataFrame({"worker": ["a"], "accuracy": [0.9]}), "t", classes=("x", "y"))
    with pytest.raises(IncompatibleModelError):
        aggregate_frames(load_config(engine_name="local"), temp, options=RunOptions(initial_workers=table))
    cold = load_config(engine_name="local", overrides=['nightly.on_incompatible="cold"'])
    run = aggregate_frames(cold, temp, options=RunOptions(initial_workers=table))
    assert run.summary["warm_start"]["used"] is False
    plain = aggregate_frames(load_config(engine_name="local"), temp)
    pd.testing.assert_frame_equal(run.items, plain.items)
